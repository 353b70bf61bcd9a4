/*
 * protobuf.h — a small reader and writer of the protobuf wire format (no schema, no
 * dependency): what the GraphDef importer and exporter need.
 *
 * Reading walks one message's fields in order: npuI_pb_next yields (field number, wire type,
 * value); length-delimited values point into the caller's buffer (nothing is copied, so the
 * buffer must outlive the values).  Packed repeated scalars are walked with the same reader
 * over the field's bytes.  Malformed input (a varint over 10 bytes, a length past the end, a
 * group or an unknown wire type) makes npuI_pb_next return -1; it never reads out of bounds.
 *
 * Writing appends to a growable buffer allocated through the context.  Nested messages are
 * written in place: npuI_pb_begin reserves nothing, npuI_pb_end moves the body forward by the
 * size of its length prefix.  The first failed allocation sets `failed` and every later call
 * is a no-op, so a writer is checked once at the end.
 */
#ifndef NPU_IO_PROTOBUF_H
#define NPU_IO_PROTOBUF_H

#include "core/npu_int.h"
#include "io/pb_varint.h"

enum { NPUI_PB_VARINT = 0, NPUI_PB_FIXED64 = 1, NPUI_PB_BYTES = 2, NPUI_PB_FIXED32 = 5 };

typedef struct npuI_pb_reader {
  const uint8_t *p, *end;
} npuI_pb_reader;

typedef struct npuI_pb_field {
  uint32_t number;
  int wire;          /* NPUI_PB_* */
  uint64_t u;        /* VARINT, FIXED64, FIXED32 (zero-extended) */
  const uint8_t *data; /* BYTES */
  size_t len;
} npuI_pb_field;

static inline npuI_pb_reader npuI_pb_reader_of(const void *data, size_t len) {
  const uint8_t *p = data;
  return (npuI_pb_reader){p, p ? p + len : p}; /* (NULL, 0): an empty message, no offset */
}
/* 1: a field was read into *f; 0: end of the message; -1: malformed. */
int npuI_pb_next(npuI_pb_reader *r, npuI_pb_field *f);
/* One varint / little-endian fixed value from r (for packed fields): 1 ok, 0 end, -1 bad. */
int npuI_pb_read_varint(npuI_pb_reader *r, uint64_t *v);
int npuI_pb_read_fixed32(npuI_pb_reader *r, uint32_t *v);
int npuI_pb_read_fixed64(npuI_pb_reader *r, uint64_t *v);

typedef struct npuI_pb_writer {
  npu_context *ctx;
  uint8_t *buf;
  size_t n, cap;
  bool failed;
} npuI_pb_writer;

void npuI_pb_put_varint(npuI_pb_writer *w, uint32_t field, uint64_t v);
void npuI_pb_put_fixed32(npuI_pb_writer *w, uint32_t field, uint32_t v);
void npuI_pb_put_bytes(npuI_pb_writer *w, uint32_t field, const void *data, size_t len);
void npuI_pb_put_string(npuI_pb_writer *w, uint32_t field, const char *s);
/* A raw varint with no tag (inside a packed field). */
void npuI_pb_put_raw_varint(npuI_pb_writer *w, uint64_t v);
void npuI_pb_put_raw(npuI_pb_writer *w, const void *data, size_t len);
/* Nested message: mark = npuI_pb_begin(w, field); ...fields...; npuI_pb_end(w, mark). */
size_t npuI_pb_begin(npuI_pb_writer *w, uint32_t field);
void npuI_pb_end(npuI_pb_writer *w, size_t mark);
void npuI_pb_writer_free(npuI_pb_writer *w);

#endif
