/*
 * bundle.c — TensorFlow tensor bundles (checkpoint / SavedModel variables), implemented from
 * the formats' definitions (tensor_bundle.proto; LevelDB's table format; Snappy's format
 * description):
 *
 *   <prefix>.index   a sorted table: data blocks, a metaindex block, an index block, then a
 *                    48-byte footer (metaindex and index BlockHandles as varints, zero
 *                    padding to 40 bytes, the little-endian magic 0xdb4775248b80fb57).
 *                    Each block is followed by a 5-byte trailer: its compression (0 none,
 *                    1 Snappy) and the masked CRC-32C of the block and that byte.  A block is
 *                    entries (varint shared-prefix length, varint rest length, varint value
 *                    length, the key's rest, the value), then its restart offsets (fixed32
 *                    each) and their count (fixed32).  The index block maps a key at or past
 *                    each data block's last key to that block's handle.
 *                    Keys are tensor names; the value is a BundleEntryProto (dtype, shape,
 *                    shard_id, offset, size, masked crc32c of the bytes); the empty key holds
 *                    the BundleHeaderProto (num_shards, endianness).
 *   <prefix>.data-<shard:05d>-of-<num_shards:05d>   the tensors' raw little-endian bytes.
 *
 * Invariants: every read is bounds-checked (the table is untrusted input: tests/fuzz covers
 * it); every block's checksum and every tensor's checksum is verified; memory comes from the
 * context's allocator.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/bundle.h"
#include "io/graphdef.h"
#include "io/protobuf.h"
#include "kernels/ksummary.h" /* npuK_crc32c: CRC-32C, as TFRecord files use it */

/* ---- Snappy -------------------------------------------------------------------------------- */

static int snappy_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  uint64_t r = 0;
  for (int shift = 0; shift < 35; shift += 7) {
    if (*p >= end) return -1;
    uint8_t c = *(*p)++;
    r |= (uint64_t)(c & 0x7f) << shift;
    if (c < 0x80) {
      *v = r;
      return 0;
    }
  }
  return -1;
}

int64_t npuI_snappy_length(const uint8_t *src, size_t n) {
  uint64_t v;
  return snappy_varint(&src, src + n, &v) ? -1 : (int64_t)v;
}

/* Elements after the length: a tag byte whose low two bits say literal (00: length-1 in the
   upper six bits, or 60..63 meaning it follows in 1..4 bytes) or copy (01: length 4..11,
   11-bit offset; 10: length 1..64, 16-bit offset; 11: length 1..64, 32-bit offset). */
int npuI_snappy_decompress(const uint8_t *src, size_t n, uint8_t *dst, size_t dst_len) {
  const uint8_t *p = src, *end = src + n;
  uint64_t len;
  if (snappy_varint(&p, end, &len) || len != dst_len) return -1;
  size_t out = 0;
  while (p < end) {
    uint8_t tag = *p++;
    size_t length, offset;
    if ((tag & 3) == 0) {
      length = (size_t)(tag >> 2) + 1;
      if (length > 60) {
        size_t nb = length - 60;
        if ((size_t)(end - p) < nb) return -1;
        length = 0;
        for (size_t i = 0; i < nb; i++) length |= (size_t)p[i] << (8 * i);
        length += 1;
        p += nb;
      }
      if ((size_t)(end - p) < length || dst_len - out < length) return -1;
      memcpy(dst + out, p, length);
      p += length;
      out += length;
      continue;
    }
    if ((tag & 3) == 1) {
      if (p >= end) return -1;
      length = 4 + ((tag >> 2) & 7);
      offset = ((size_t)(tag >> 5) << 8) | *p++;
    } else if ((tag & 3) == 2) {
      if (end - p < 2) return -1;
      length = (size_t)(tag >> 2) + 1;
      offset = (size_t)p[0] | (size_t)p[1] << 8;
      p += 2;
    } else {
      if (end - p < 4) return -1;
      length = (size_t)(tag >> 2) + 1;
      offset = (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 | (size_t)p[3] << 24;
      p += 4;
    }
    if (offset == 0 || offset > out || dst_len - out < length) return -1;
    for (size_t i = 0; i < length; i++, out++) dst[out] = dst[out - offset]; /* may overlap */
  }
  return out == dst_len ? 0 : -1;
}

/* ---- the table ------------------------------------------------------------------------------ */

typedef struct bundle_entry {
  char *key;
  int tf_dtype;
  int ndim;
  int64_t shape[NPU_MAX_DIMS];
  int shard;
  int64_t offset, size;
  uint32_t crc32c; /* masked */
  bool sliced;
} bundle_entry;

struct npuI_bundle {
  npu_context *ctx;
  char *prefix;
  int num_shards;
  int n, cap;
  bundle_entry *entries;
};

static npu_status corrupt(npu_context *ctx, const char *path, const char *what) {
  return npuC_error(ctx, NPU_ERR_FORMAT, "%s: corrupt tensor bundle index: %s", path, what);
}

static uint32_t load32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void store32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static int get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  npuI_pb_reader r = {*p, end};
  int k = npuI_pb_read_varint(&r, v);
  *p = r.p;
  return k == 1 ? 0 : -1;
}

/* A block's contents (decompressed when it was compressed: *owned set, free it). */
static npu_status read_block(npu_context *ctx, const char *path, const uint8_t *file,
                             size_t file_len, uint64_t offset, uint64_t size,
                             const uint8_t **out, size_t *out_len, uint8_t **owned) {
  *owned = NULL;
  if (offset > file_len || size > file_len - offset || file_len - offset - size < 5)
    return corrupt(ctx, path, "a block handle points past the end of the file");
  const uint8_t *b = file + offset;
  uint32_t stored = npuI_crc32c_unmask(load32(b + size + 1));
  if (npuK_crc32c(0, b, size + 1) != stored)
    return npuC_error(ctx, NPU_ERR_FORMAT,
                      "%s: tensor bundle index: block checksum mismatch (block at byte %llu)",
                      path, (unsigned long long)offset);
  if (b[size] == 0) {
    *out = b, *out_len = size;
    return NPU_OK;
  }
  if (b[size] != 1) return corrupt(ctx, path, "unknown block compression");
  int64_t len = npuI_snappy_length(b, size);
  if (len < 0 || len > (int64_t)1 << 30) return corrupt(ctx, path, "bad Snappy block");
  uint8_t *d = npuC_alloc(ctx, (size_t)len + 1);
  if (!d) return npuC_error(ctx, NPU_ERR_NOMEM, "%s: out of memory", path);
  if (npuI_snappy_decompress(b, size, d, (size_t)len)) {
    npuC_free(ctx, d);
    return corrupt(ctx, path, "bad Snappy block");
  }
  *owned = d, *out = d, *out_len = (size_t)len;
  return NPU_OK;
}

typedef npu_status (*entry_fn)(void *ud, const uint8_t *key, size_t key_len, const uint8_t *value,
                               size_t value_len);

/* Calls fn for each entry of a block, in order. */
static npu_status walk_block(npu_context *ctx, const char *path, const uint8_t *b, size_t len,
                             entry_fn fn, void *ud) {
  if (len < 4) return corrupt(ctx, path, "a block too short for its restart count");
  uint32_t n_restarts = load32(b + len - 4);
  if (n_restarts > (len - 4) / 4) return corrupt(ctx, path, "bad restart count");
  size_t limit = len - 4 - 4 * (size_t)n_restarts;
  uint8_t *key = NULL;
  size_t key_len = 0, key_cap = 0;
  npu_status st = NPU_OK;
  const uint8_t *p = b, *end = b + limit;
  while (p < end && !st) {
    uint64_t shared, rest, vlen;
    if (get_varint(&p, end, &shared) || get_varint(&p, end, &rest) ||
        get_varint(&p, end, &vlen) || shared > key_len || rest > (uint64_t)(end - p) ||
        vlen > (uint64_t)(end - p) - rest) {
      st = corrupt(ctx, path, "bad block entry");
      break;
    }
    size_t need = (size_t)(shared + rest);
    if (need + 1 > key_cap) {
      size_t cap = need + 64;
      uint8_t *k = npuC_realloc(ctx, key, cap);
      if (!k) {
        st = npuC_error(ctx, NPU_ERR_NOMEM, "%s: out of memory", path);
        break;
      }
      key = k, key_cap = cap;
    }
    memcpy(key + shared, p, (size_t)rest);
    key_len = need;
    key[key_len] = 0;
    p += rest;
    st = fn(ud, key, key_len, p, (size_t)vlen);
    p += vlen;
  }
  npuC_free(ctx, key);
  return st;
}

typedef struct table_walk {
  npu_context *ctx;
  const char *path;
  const uint8_t *file;
  size_t file_len;
  entry_fn fn;
  void *ud;
} table_walk;

static npu_status index_entry(void *ud, const uint8_t *key, size_t key_len, const uint8_t *value,
                              size_t value_len) {
  (void)key, (void)key_len;
  table_walk *w = ud;
  uint64_t off, size;
  const uint8_t *p = value, *end = value + value_len;
  if (get_varint(&p, end, &off) || get_varint(&p, end, &size))
    return corrupt(w->ctx, w->path, "bad block handle");
  const uint8_t *b;
  size_t len;
  uint8_t *owned;
  npu_status st = read_block(w->ctx, w->path, w->file, w->file_len, off, size, &b, &len, &owned);
  if (!st) st = walk_block(w->ctx, w->path, b, len, w->fn, w->ud);
  npuC_free(w->ctx, owned);
  return st;
}

/* Every entry of the table in file (w->file, whole) in key order. */
static npu_status walk_table(table_walk *w) {
  static const uint8_t magic[8] = {0x57, 0xfb, 0x80, 0x8b, 0x24, 0x75, 0x47, 0xdb};
  if (w->file_len < 48 || memcmp(w->file + w->file_len - 8, magic, 8) != 0)
    return corrupt(w->ctx, w->path, "no table footer (magic number missing)");
  const uint8_t *p = w->file + w->file_len - 48, *end = w->file + w->file_len - 8;
  uint64_t moff, msize, ioff, isize;
  if (get_varint(&p, end, &moff) || get_varint(&p, end, &msize) || get_varint(&p, end, &ioff) ||
      get_varint(&p, end, &isize))
    return corrupt(w->ctx, w->path, "bad footer");
  const uint8_t *b;
  size_t len;
  uint8_t *owned;
  npu_status st = read_block(w->ctx, w->path, w->file, w->file_len - 48, ioff, isize, &b, &len, &owned);
  if (st) return st;
  table_walk inner = *w;
  st = walk_block(w->ctx, w->path, b, len, index_entry, &inner);
  npuC_free(w->ctx, owned);
  return st;
}

/* ---- reading a bundle -------------------------------------------------------------------------- */

typedef struct open_state {
  npuI_bundle *b;
  const char *path;
  bool header;
} open_state;

static npu_status parse_shape(const uint8_t *data, size_t len, int *ndim, int64_t *shape) {
  npuI_pb_reader r = npuI_pb_reader_of(data, len);
  npuI_pb_field f;
  int k, n = 0;
  bool unknown = false;
  while ((k = npuI_pb_next(&r, &f)) == 1) {
    if (f.number == 3 && f.wire == NPUI_PB_VARINT) unknown = f.u != 0;
    if (f.number != 2 || f.wire != NPUI_PB_BYTES) continue;
    if (n >= NPU_MAX_DIMS) return NPU_ERR_UNSUPPORTED;
    npuI_pb_reader dr = npuI_pb_reader_of(f.data, f.len);
    npuI_pb_field df;
    int kk;
    int64_t size = 0;
    while ((kk = npuI_pb_next(&dr, &df)) == 1)
      if (df.number == 1 && df.wire == NPUI_PB_VARINT) size = (int64_t)df.u;
    if (kk < 0) return NPU_ERR_FORMAT;
    shape[n++] = size;
  }
  if (k < 0) return NPU_ERR_FORMAT;
  *ndim = unknown ? -1 : n;
  return NPU_OK;
}

static npu_status bundle_entry_cb(void *ud, const uint8_t *key, size_t key_len,
                                  const uint8_t *value, size_t value_len) {
  open_state *os = ud;
  npuI_bundle *b = os->b;
  npuI_pb_reader r = npuI_pb_reader_of(value, value_len);
  npuI_pb_field f;
  int k;
  if (key_len == 0) { /* BundleHeaderProto */
    os->header = true;
    while ((k = npuI_pb_next(&r, &f)) == 1) {
      if (f.number == 1 && f.wire == NPUI_PB_VARINT) b->num_shards = (int)f.u;
      if (f.number == 2 && f.wire == NPUI_PB_VARINT && f.u != 0)
        return npuC_error(b->ctx, NPU_ERR_UNSUPPORTED,
                          "%s: tensor bundle written on a big-endian machine", os->path);
    }
    return k < 0 ? corrupt(b->ctx, os->path, "bad BundleHeaderProto") : NPU_OK;
  }
  if (b->n == b->cap) {
    int cap = b->cap ? 2 * b->cap : 16;
    bundle_entry *e = npuC_realloc(b->ctx, b->entries, (size_t)cap * sizeof *e);
    if (!e) return npuC_error(b->ctx, NPU_ERR_NOMEM, "%s: out of memory", os->path);
    b->entries = e, b->cap = cap;
  }
  bundle_entry *e = &b->entries[b->n];
  memset(e, 0, sizeof *e);
  e->key = npuC_alloc(b->ctx, key_len + 1);
  if (!e->key) return npuC_error(b->ctx, NPU_ERR_NOMEM, "%s: out of memory", os->path);
  memcpy(e->key, key, key_len);
  e->key[key_len] = 0;
  b->n++;
  while ((k = npuI_pb_next(&r, &f)) == 1) {
    switch (f.number) {
    case 1: e->tf_dtype = (int)f.u; break;
    case 2:
      if (f.wire != NPUI_PB_BYTES || parse_shape(f.data, f.len, &e->ndim, e->shape))
        return corrupt(b->ctx, os->path, "bad tensor shape");
      break;
    case 3: e->shard = (int)f.u; break;
    case 4: e->offset = (int64_t)f.u; break;
    case 5: e->size = (int64_t)f.u; break;
    case 6: e->crc32c = (uint32_t)f.u; break;
    case 7: e->sliced = true; break;
    default: break;
    }
  }
  if (k < 0 || e->offset < 0 || e->size < 0 || e->shard < 0)
    return npuC_error(b->ctx, NPU_ERR_FORMAT, "%s: corrupt tensor bundle entry '%s'", os->path,
                      e->key);
  return NPU_OK;
}

void npuI_bundle_close(npuI_bundle *b) {
  if (!b) return;
  npu_context *ctx = b->ctx;
  for (int i = 0; i < b->n; i++) npuC_free(ctx, b->entries[i].key);
  npuC_free(ctx, b->entries);
  npuC_free(ctx, b->prefix);
  npuC_free(ctx, b);
}

npu_status npuI_bundle_open(npu_context *ctx, const char *prefix, npuI_bundle **out) {
  *out = NULL;
  size_t plen = strlen(prefix);
  char *path = npuC_alloc(ctx, plen + 8);
  npuI_bundle *b = npuC_calloc(ctx, 1, sizeof *b);
  if (b) b->ctx = ctx;
  if (!path || !b || !(b->prefix = npuC_strdup(ctx, prefix))) {
    npuC_free(ctx, path);
    npuI_bundle_close(b);
    return npuC_error(ctx, NPU_ERR_NOMEM, "%s: out of memory", prefix);
  }
  snprintf(path, plen + 8, "%s.index", prefix);
  char *file;
  size_t len;
  npu_status st = npuC_read_file(ctx, path, "tensor bundle index", &file, &len);
  if (!st) {
    open_state os = {b, path, false};
    table_walk w = {ctx, path, (const uint8_t *)file, len, bundle_entry_cb, &os};
    st = walk_table(&w);
    if (!st && !os.header) st = corrupt(ctx, path, "no header entry");
    if (!st && (b->num_shards < 1 || b->num_shards > 99999))
      st = corrupt(ctx, path, "bad number of shards");
    for (int i = 0; i < b->n && !st; i++)
      if (b->entries[i].shard >= b->num_shards)
        st = npuC_error(ctx, NPU_ERR_FORMAT, "%s: tensor '%s' is in shard %d of %d", path,
                        b->entries[i].key, b->entries[i].shard, b->num_shards);
    npuC_free(ctx, file);
  }
  npuC_free(ctx, path);
  if (st) {
    npuI_bundle_close(b);
    return st;
  }
  *out = b;
  return NPU_OK;
}

int npuI_bundle_count(const npuI_bundle *b) { return b ? b->n : 0; }

const char *npuI_bundle_key(const npuI_bundle *b, int i) {
  return b && i >= 0 && i < b->n ? b->entries[i].key : NULL;
}

static const bundle_entry *find_entry(const npuI_bundle *b, const char *key) {
  int lo = 0, hi = b->n - 1; /* the table's keys are sorted bytewise */
  while (lo <= hi) {
    int mid = (lo + hi) / 2, c = strcmp(b->entries[mid].key, key);
    if (c == 0) return &b->entries[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  for (int i = 0; i < b->n; i++) /* an index not sorted as promised: still found */
    if (strcmp(b->entries[i].key, key) == 0) return &b->entries[i];
  return NULL;
}

int npuI_bundle_has(const npuI_bundle *b, const char *key) { return find_entry(b, key) != NULL; }

/* The entry's e->size bytes from its shard into dst, checked against the entry's CRC-32C
   when `check` (a string tensor's checksum is not over its bytes as stored). */
static npu_status read_bytes(npuI_bundle *b, const bundle_entry *e, void *dst, bool check) {
  npu_context *ctx = b->ctx;
  char path[4200];
  snprintf(path, sizeof path, "%.4096s.data-%05d-of-%05d", b->prefix, e->shard, b->num_shards);
  const char *why = NULL;
  FILE *f = npuC_fopen_regular(path, &why);
  if (!f) return npuC_error(ctx, NPU_ERR_IO, "cannot open tensor bundle data '%s': %s", path, why);
  bool ok = e->size == 0 || (fseeko(f, (off_t)e->offset, SEEK_SET) == 0 &&
                             fread(dst, 1, (size_t)e->size, f) == (size_t)e->size);
  fclose(f);
  if (!ok)
    return npuC_error(ctx, NPU_ERR_FORMAT, "%s: tensor '%s' lies past the end of the file",
                      path, e->key);
  if (check && npuK_crc32c(0, dst, (size_t)e->size) != npuI_crc32c_unmask(e->crc32c))
    return npuC_error(ctx, NPU_ERR_FORMAT, "%s: tensor '%s': CRC-32C checksum mismatch", path,
                      e->key);
  return NPU_OK;
}

npu_status npuI_bundle_read(npuI_bundle *b, const char *key, npu_tensor **out) {
  *out = NULL;
  npu_context *ctx = b->ctx;
  const bundle_entry *e = find_entry(b, key);
  char dt[16];
  if (!e)
    return npuC_error(ctx, NPU_ERR_NOT_FOUND, "%s.index: no tensor '%s' in the bundle",
                      b->prefix, key);
  if (e->sliced)
    return npuC_error(ctx, NPU_ERR_UNSUPPORTED, "%s.index: tensor '%s' is partitioned (slices)",
                      b->prefix, key);
  int dtype = npuI_tf_to_dtype(e->tf_dtype);
  if (dtype < 0)
    return npuC_error(ctx, NPU_ERR_UNSUPPORTED, "%s.index: tensor '%s' has dtype %s", b->prefix,
                      key, npuI_tf_dtype_name(e->tf_dtype, dt));
  if (e->ndim < 0)
    return npuC_error(ctx, NPU_ERR_FORMAT, "%s.index: tensor '%s' has an unknown shape",
                      b->prefix, key);
  int64_t numel = 1;
  for (int i = 0; i < e->ndim; i++) {
    if (e->shape[i] < 0 || (e->shape[i] && numel > INT64_MAX / e->shape[i]))
      return npuC_error(ctx, NPU_ERR_FORMAT, "%s.index: tensor '%s' has a bad shape", b->prefix, key);
    numel *= e->shape[i];
  }
  size_t esize = npu_dtype_size((npu_dtype)dtype);
  if (numel > INT64_MAX / (int64_t)esize || numel * (int64_t)esize != e->size)
    return npuC_error(ctx, NPU_ERR_FORMAT,
                      "%s.index: tensor '%s' has %lld bytes, its dtype and shape need %lld",
                      b->prefix, key, (long long)e->size, (long long)(numel * (int64_t)esize));
  npu_tensor *t;
  npu_status st = npu_tensor_new(ctx, (npu_dtype)dtype, e->ndim, e->shape, &t);
  if (st) return st;
  if ((st = read_bytes(b, e, npu_tensor_data(t), true))) {
    npu_tensor_release(t);
    return st;
  }
  if (dtype == NPU_DTYPE_BOOL) npuT_canonical_bools(t);
  *out = t;
  return NPU_OK;
}

/* A DT_STRING tensor of one element, as TensorFlow's bundle writer lays it out in the shard:
     [varint64 length][4-byte masked CRC-32C of the length][the string's bytes]
   The length's checksum covers it as a little-endian uint32 (a uint64 past 4 GiB), and the
   entry's checksum covers that same uint32, then the 4 checksum bytes, then the string. */
npu_status npuI_bundle_read_string(npuI_bundle *b, const char *key, char **data, size_t *len) {
  *data = NULL, *len = 0;
  npu_context *ctx = b->ctx;
  const bundle_entry *e = find_entry(b, key);
  if (!e)
    return npuC_error(ctx, NPU_ERR_NOT_FOUND, "%s.index: no tensor '%s' in the bundle",
                      b->prefix, key);
  bool one = e->ndim >= 0;
  for (int i = 0; i < e->ndim; i++) one = one && e->shape[i] == 1;
  if (e->tf_dtype != 7 /* DT_STRING */ || !one || e->sliced)
    return npuC_error(ctx, NPU_ERR_FORMAT, "%s.index: tensor '%s' is not one string", b->prefix,
                      key);
  if (e->size < 5 || e->size > ((int64_t)1 << 31))
    return npuC_error(ctx, NPU_ERR_FORMAT, "%s.index: tensor '%s' has a bad size (%lld bytes)",
                      b->prefix, key, (long long)e->size);
  uint8_t *raw = npuC_alloc(ctx, (size_t)e->size);
  if (!raw) return npuC_error(ctx, NPU_ERR_NOMEM, "%s: out of memory", b->prefix);
  npu_status st = read_bytes(b, e, raw, false);
  if (st) {
    npuC_free(ctx, raw);
    return st;
  }
  npuI_pb_reader r = npuI_pb_reader_of(raw, (size_t)e->size);
  uint64_t n = 0;
  size_t head = 0;
  if (npuI_pb_read_varint(&r, &n) == 1) head = (size_t)(r.p - raw);
  uint8_t n_le[8];
  for (int i = 0; i < 8; i++) n_le[i] = (uint8_t)(n >> (8 * i));
  size_t n_size = n <= UINT32_MAX ? 4 : 8;
  uint32_t crc = npuK_crc32c(0, n_le, n_size);
  if (!head || (uint64_t)e->size - head < 4 || n != (uint64_t)e->size - head - 4 ||
      load32(raw + head) != npuI_crc32c_mask(crc) ||
      npuK_crc32c(crc, raw + head, (size_t)e->size - head) != npuI_crc32c_unmask(e->crc32c)) {
    npuC_free(ctx, raw);
    return npuC_error(ctx, NPU_ERR_FORMAT, "%s.index: string tensor '%s': bad length or CRC-32C "
                      "checksum mismatch", b->prefix, key);
  }
  memmove(raw, raw + head + 4, (size_t)n);
  *data = (char *)raw, *len = (size_t)n;
  return NPU_OK;
}

/* ---- writing a bundle ------------------------------------------------------------------------ */

static void put_handle(npuI_pb_writer *w, uint64_t off, uint64_t size) {
  npuI_pb_put_raw_varint(w, off);
  npuI_pb_put_raw_varint(w, size);
}

/* Appends the block in blk to file, with its trailer; *handle_off/size receive its handle. */
static void put_block(npuI_pb_writer *file, npuI_pb_writer *blk, uint64_t *off, uint64_t *size) {
  *off = file->n;
  *size = blk->n;
  npuI_pb_put_raw(file, blk->buf, blk->n);
  uint8_t trailer[5] = {0};
  uint32_t crc = npuK_crc32c(0, blk->buf, blk->n);
  crc = npuK_crc32c(crc, trailer, 1);
  store32(trailer + 1, npuI_crc32c_mask(crc));
  npuI_pb_put_raw(file, trailer, 5);
  blk->n = 0;
}

/* One block entry with no shared prefix (every entry a restart point). */
static void put_entry(npuI_pb_writer *blk, const char *key, const void *value, size_t value_len,
                      uint32_t *restarts, int *n_restarts) {
  restarts[(*n_restarts)++] = (uint32_t)blk->n;
  size_t klen = strlen(key);
  npuI_pb_put_raw_varint(blk, 0);
  npuI_pb_put_raw_varint(blk, klen);
  npuI_pb_put_raw_varint(blk, value_len);
  npuI_pb_put_raw(blk, key, klen);
  npuI_pb_put_raw(blk, value, value_len);
}

static void put_restarts(npuI_pb_writer *blk, const uint32_t *restarts, int n) {
  uint8_t b4[4];
  for (int i = 0; i < n; i++) {
    store32(b4, restarts[i]);
    npuI_pb_put_raw(blk, b4, 4);
  }
  store32(b4, (uint32_t)n);
  npuI_pb_put_raw(blk, b4, 4);
}

static int cmp_key_index(const void *a, const void *b, void *keys) {
  const char *const *k = keys;
  return strcmp(k[*(const int *)a], k[*(const int *)b]);
}

static npu_status write_file(npu_context *ctx, const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return npuC_error(ctx, NPU_ERR_IO, "cannot write tensor bundle file '%s'", path);
  bool ok = fwrite(data, 1, n, f) == n;
  ok = fclose(f) == 0 && ok;
  if (!ok) {
    remove(path);
    return npuC_error(ctx, NPU_ERR_IO, "cannot write tensor bundle file '%s'", path);
  }
  return NPU_OK;
}

npu_status npuI_bundle_write(npu_context *ctx, const char *prefix, int n, const char *const *keys,
                             npu_tensor *const *tensors) {
  if (!ctx || !prefix || n < 0 || (n && (!keys || !tensors)))
    return npuC_error(ctx, NPU_ERR_ARG, "tensor bundle: NULL argument");
  for (int i = 0; i < n; i++) {
    if (!keys[i] || !*keys[i] || !tensors[i])
      return npuC_error(ctx, NPU_ERR_ARG, "tensor bundle: entry %d has no name or no tensor", i);
    if (npuI_dtype_to_tf(npu_tensor_dtype(tensors[i])) < 0)
      return npuC_error(ctx, NPU_ERR_UNSUPPORTED, "tensor bundle: '%s' has a dtype TensorFlow lacks",
                        keys[i]);
    for (int j = 0; j < i; j++)
      if (strcmp(keys[i], keys[j]) == 0)
        return npuC_error(ctx, NPU_ERR_ARG, "tensor bundle: two tensors are named '%s'", keys[i]);
  }
  int *order = npuC_alloc(ctx, ((size_t)n + 1) * sizeof *order);
  uint32_t *restarts = npuC_alloc(ctx, ((size_t)n + 2) * sizeof *restarts);
  npuI_pb_writer data = {.ctx = ctx}, blk = {.ctx = ctx}, val = {.ctx = ctx}, idx = {.ctx = ctx};
  npu_status st = NPU_OK;
  if (!order || !restarts) {
    st = npuC_error(ctx, NPU_ERR_NOMEM, "tensor bundle: out of memory");
    goto done;
  }
  for (int i = 0; i < n; i++) order[i] = i;
  qsort_r(order, (size_t)n, sizeof *order, cmp_key_index, (void *)keys);
  /* the data block: the header under "", then the entries in key order */
  int nr = 0;
  npuI_pb_put_varint(&val, 1, 1); /* num_shards */
  size_t vm = npuI_pb_begin(&val, 3);
  npuI_pb_put_varint(&val, 1, 1); /* VersionDef.producer */
  npuI_pb_end(&val, vm);
  put_entry(&blk, "", val.buf, val.n, restarts, &nr);
  for (int k = 0; k < n; k++) {
    npu_tensor *t = tensors[order[k]];
    size_t nbytes = npu_tensor_nbytes(t);
    val.n = 0;
    npuI_pb_put_varint(&val, 1, (uint64_t)npuI_dtype_to_tf(npu_tensor_dtype(t)));
    size_t sm = npuI_pb_begin(&val, 2);
    for (int d = 0; d < npu_tensor_ndim(t); d++) {
      size_t dm = npuI_pb_begin(&val, 2);
      npuI_pb_put_varint(&val, 1, (uint64_t)npu_tensor_shape(t)[d]);
      npuI_pb_end(&val, dm);
    }
    npuI_pb_end(&val, sm);
    if (data.n) npuI_pb_put_varint(&val, 4, data.n);
    if (nbytes) npuI_pb_put_varint(&val, 5, nbytes);
    npuI_pb_put_fixed32(&val, 6, npuI_crc32c_mask(npuK_crc32c(0, npu_tensor_data(t), nbytes)));
    npuI_pb_put_raw(&data, npu_tensor_data(t), nbytes);
    put_entry(&blk, keys[order[k]], val.buf, val.n, restarts, &nr);
  }
  put_restarts(&blk, restarts, nr);
  uint64_t d_off, d_size, m_off, m_size, i_off, i_size;
  put_block(&idx, &blk, &d_off, &d_size);
  put_restarts(&blk, (const uint32_t[]){0}, 1); /* the metaindex: empty */
  put_block(&idx, &blk, &m_off, &m_size);
  val.n = 0;
  put_handle(&val, d_off, d_size);
  nr = 0;
  put_entry(&blk, n ? keys[order[n - 1]] : "", val.buf, val.n, restarts, &nr);
  put_restarts(&blk, restarts, nr);
  put_block(&idx, &blk, &i_off, &i_size);
  size_t footer = idx.n;
  put_handle(&idx, m_off, m_size);
  put_handle(&idx, i_off, i_size);
  static const uint8_t zeros[40] = {0};
  static const uint8_t magic[8] = {0x57, 0xfb, 0x80, 0x8b, 0x24, 0x75, 0x47, 0xdb};
  if (!idx.failed) npuI_pb_put_raw(&idx, zeros, 40 - (idx.n - footer));
  npuI_pb_put_raw(&idx, magic, 8);
  if (data.failed || blk.failed || val.failed || idx.failed) {
    st = npuC_error(ctx, NPU_ERR_NOMEM, "tensor bundle: out of memory");
    goto done;
  }
  char path[4200];
  snprintf(path, sizeof path, "%.4096s.data-00000-of-00001", prefix);
  if ((st = write_file(ctx, path, data.buf, data.n))) goto done;
  char ipath[4200];
  snprintf(ipath, sizeof ipath, "%.4096s.index", prefix);
  if ((st = write_file(ctx, ipath, idx.buf, idx.n))) remove(path);
done:
  npuI_pb_writer_free(&data);
  npuI_pb_writer_free(&blk);
  npuI_pb_writer_free(&val);
  npuI_pb_writer_free(&idx);
  npuC_free(ctx, order);
  npuC_free(ctx, restarts);
  return st;
}
