/*
 * bundle.h — TensorFlow's tensor bundle (the variables of a checkpoint or a SavedModel:
 * <prefix>.index and <prefix>.data-NNNNN-of-MMMMM), read and written by io/bundle.c, and
 * the pieces of its index file's format that bundle.c implements from their definitions:
 * CRC-32C (Castagnoli, with LevelDB's mask), Snappy decompression, and the LevelDB-style
 * sorted table.
 *
 * Reading opens the index, walks every table entry once and keeps the BundleEntryProtos in
 * memory (key, dtype, shape, shard, offset, size, crc32c); a tensor's bytes are read from its
 * shard when asked for and checked against the entry's checksum.  Writing produces one shard
 * and an index of one uncompressed data block, which TensorFlow's reader accepts.
 */
#ifndef NPU_IO_BUNDLE_H
#define NPU_IO_BUNDLE_H

#include "core/npu_int.h"

/* LevelDB's masked form of a CRC-32C (npuK_crc32c, kernels/ksummary.h), stored in block
   trailers and bundle entries. */
static inline uint32_t npuI_crc32c_mask(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
static inline uint32_t npuI_crc32c_unmask(uint32_t m) {
  uint32_t r = m - 0xa282ead8u;
  return (r >> 17) | (r << 15);
}

/* Snappy: the uncompressed length announced by src (-1 when malformed), and the
   decompression into dst of exactly that length (0 ok, -1 malformed: never reads or writes
   out of bounds). */
int64_t npuI_snappy_length(const uint8_t *src, size_t n);
int npuI_snappy_decompress(const uint8_t *src, size_t n, uint8_t *dst, size_t dst_len);

typedef struct npuI_bundle npuI_bundle;

/* Opens prefix.index (prefix "dir/variables/variables").  Errors: NPU_ERR_IO (the index,
   named), NPU_ERR_FORMAT (a bad footer or magic, a block checksum that does not match, a
   corrupt block or entry, a big-endian bundle; the message names the file), NPU_ERR_NOMEM. */
npu_status npuI_bundle_open(npu_context *ctx, const char *prefix, npuI_bundle **out);
void npuI_bundle_close(npuI_bundle *b);
int npuI_bundle_count(const npuI_bundle *b);
/* Key of entry i (sorted), borrowed; NULL out of range. */
const char *npuI_bundle_key(const npuI_bundle *b, int i);
/* 1 when the bundle has key. */
int npuI_bundle_has(const npuI_bundle *b, const char *key);
/* The tensor stored under key (owned by the caller).  Errors: NPU_ERR_NOT_FOUND (no such key,
   named), NPU_ERR_UNSUPPORTED (a dtype this library lacks, a partitioned tensor),
   NPU_ERR_IO (the shard), NPU_ERR_FORMAT (bytes past the shard's end, a size that does not
   match dtype and shape, a CRC-32C that does not match), NPU_ERR_NOMEM. */
npu_status npuI_bundle_read(npuI_bundle *b, const char *key, npu_tensor **out);

/* The bytes of the one-element DT_STRING tensor under key (TensorFlow keeps a checkpoint's
   object graph so, under "_CHECKPOINTABLE_OBJECT_GRAPH"): *data is the caller's (npuC_free),
   not NUL-terminated.  Errors: NPU_ERR_NOT_FOUND, NPU_ERR_IO, NPU_ERR_FORMAT (not one string,
   a bad length, a checksum that does not match), NPU_ERR_NOMEM. */
npu_status npuI_bundle_read_string(npuI_bundle *b, const char *key, char **data, size_t *len);

/* Writes prefix.index and prefix.data-00000-of-00001 with n tensors under keys (distinct,
   non-empty; any order).  Errors: NPU_ERR_ARG, NPU_ERR_UNSUPPORTED (a dtype TensorFlow has no
   DataType for here), NPU_ERR_IO (named; partial files removed), NPU_ERR_NOMEM. */
npu_status npuI_bundle_write(npu_context *ctx, const char *prefix, int n,
                             const char *const *keys, npu_tensor *const *tensors);

#endif
