/*
 * pb_varint.h — the protobuf varint encoding, the one copy every writer of the wire format
 * uses: io/protobuf.c's writer, the event file records (io/events.c) and the Summary encoder
 * of the summary kernels (kernels/summary.c).  Header-only on <stdint.h> alone, as core/half.h
 * is, so the kernels (the ground floor) share it without linking to a layer above them.
 * A varint is 7 bits a byte, least significant first, the high bit set on every byte but the
 * last: at most 10 bytes for 64 bits.
 */
#ifndef NPU_IO_PB_VARINT_H
#define NPU_IO_PB_VARINT_H

#include <stddef.h>
#include <stdint.h>

enum { NPUI_PB_VARINT_MAX = 10 };

/* The bytes v takes. */
static inline size_t npuI_pb_varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) v >>= 7, n++;
  return n;
}

/* Writes v at b (room for npuI_pb_varint_size(v) bytes); returns the bytes written. */
static inline size_t npuI_pb_encode_varint(uint8_t *b, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    b[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  b[n++] = (uint8_t)v;
  return n;
}

#endif
