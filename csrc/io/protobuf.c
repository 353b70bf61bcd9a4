/*
 * protobuf.c — the protobuf wire format: tags, varints, fixed32/64, length-delimited fields
 * (see protobuf.h).  Invariant: the reader never reads past `end`; the writer's buffer always
 * holds a well-formed prefix of the message being written.
 */
#include <string.h>

#include "io/protobuf.h"

int npuI_pb_read_varint(npuI_pb_reader *r, uint64_t *v) {
  if (r->p >= r->end) return 0;
  uint64_t x = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (r->p >= r->end) return -1;
    uint8_t b = *r->p++;
    if (shift == 63 && b > 1) return -1;
    x |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = x;
      return 1;
    }
  }
  return -1;
}

int npuI_pb_read_fixed32(npuI_pb_reader *r, uint32_t *v) {
  if (r->p >= r->end) return 0;
  if (r->end - r->p < 4) return -1;
  *v = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 |
       (uint32_t)r->p[3] << 24;
  r->p += 4;
  return 1;
}

int npuI_pb_read_fixed64(npuI_pb_reader *r, uint64_t *v) {
  uint32_t lo, hi;
  if (r->p >= r->end) return 0;
  if (r->end - r->p < 8) return -1;
  npuI_pb_read_fixed32(r, &lo);
  npuI_pb_read_fixed32(r, &hi);
  *v = (uint64_t)hi << 32 | lo;
  return 1;
}

int npuI_pb_next(npuI_pb_reader *r, npuI_pb_field *f) {
  uint64_t tag;
  int k = npuI_pb_read_varint(r, &tag);
  if (k <= 0) return k;
  f->number = (uint32_t)(tag >> 3);
  f->wire = (int)(tag & 7);
  f->data = NULL;
  f->len = 0;
  f->u = 0;
  if (f->number == 0 || tag >> 32) return -1;
  switch (f->wire) {
  case NPUI_PB_VARINT: return npuI_pb_read_varint(r, &f->u) == 1 ? 1 : -1;
  case NPUI_PB_FIXED64: return npuI_pb_read_fixed64(r, &f->u) == 1 ? 1 : -1;
  case NPUI_PB_FIXED32: {
    uint32_t v;
    if (npuI_pb_read_fixed32(r, &v) != 1) return -1;
    f->u = v;
    return 1;
  }
  case NPUI_PB_BYTES: {
    uint64_t len;
    if (npuI_pb_read_varint(r, &len) != 1) return -1;
    if (len > (uint64_t)(r->end - r->p)) return -1;
    f->data = r->p;
    f->len = (size_t)len;
    r->p += len;
    return 1;
  }
  default: return -1; /* groups (3, 4) are not used by the messages we read */
  }
}

/* ---- writer ---- */

static bool reserve(npuI_pb_writer *w, size_t extra) {
  if (w->failed) return false;
  if (w->n + extra <= w->cap) return true;
  size_t cap = w->cap ? w->cap : 256;
  while (cap < w->n + extra) cap *= 2;
  uint8_t *b = npuC_realloc(w->ctx, w->buf, cap);
  if (!b) {
    w->failed = true;
    return false;
  }
  w->buf = b;
  w->cap = cap;
  return true;
}

void npuI_pb_put_raw_varint(npuI_pb_writer *w, uint64_t v) {
  if (reserve(w, NPUI_PB_VARINT_MAX)) w->n += npuI_pb_encode_varint(w->buf + w->n, v);
}

void npuI_pb_put_raw(npuI_pb_writer *w, const void *data, size_t len) {
  if (len && reserve(w, len)) {
    memcpy(w->buf + w->n, data, len);
    w->n += len;
  }
}

static void put_tag(npuI_pb_writer *w, uint32_t field, int wire) {
  npuI_pb_put_raw_varint(w, (uint64_t)field << 3 | (uint64_t)wire);
}

void npuI_pb_put_varint(npuI_pb_writer *w, uint32_t field, uint64_t v) {
  put_tag(w, field, NPUI_PB_VARINT);
  npuI_pb_put_raw_varint(w, v);
}

void npuI_pb_put_fixed32(npuI_pb_writer *w, uint32_t field, uint32_t v) {
  put_tag(w, field, NPUI_PB_FIXED32);
  uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  npuI_pb_put_raw(w, b, 4);
}

void npuI_pb_put_bytes(npuI_pb_writer *w, uint32_t field, const void *data, size_t len) {
  put_tag(w, field, NPUI_PB_BYTES);
  npuI_pb_put_raw_varint(w, len);
  npuI_pb_put_raw(w, data, len);
}

void npuI_pb_put_string(npuI_pb_writer *w, uint32_t field, const char *s) {
  npuI_pb_put_bytes(w, field, s, strlen(s));
}

size_t npuI_pb_begin(npuI_pb_writer *w, uint32_t field) {
  put_tag(w, field, NPUI_PB_BYTES);
  return w->n;
}

void npuI_pb_end(npuI_pb_writer *w, size_t mark) {
  if (w->failed) return;
  size_t len = w->n - mark, pre = npuI_pb_varint_size(len);
  if (!reserve(w, pre)) return;
  memmove(w->buf + mark + pre, w->buf + mark, len);
  npuI_pb_encode_varint(w->buf + mark, len);
  w->n += pre;
}

void npuI_pb_writer_free(npuI_pb_writer *w) {
  npuC_free(w->ctx, w->buf);
  w->buf = NULL;
  w->n = w->cap = 0;
}
