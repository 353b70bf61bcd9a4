/* ksummary.h: TensorBoard's Summary protocol buffer written by the summary ops (ops/op_*_summary.c)
 * and the checksums of the event files (io/events.c).  Pure, like the rest of kernels/: no
 * allocation, no context.
 *
 * Every encoder has the shape `size_t f(uint8_t *out, ...)`: it returns the size of the
 * serialized message in bytes and writes it into out when out != NULL, so a caller sizes its
 * buffer with out NULL and fills it with a second call.  The messages are
 * tensorflow/core/framework/summary.proto's, written as a proto3 serializer writes them
 * (fields in number order, zero scalars outside a oneof left out, repeated doubles packed):
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; Image image = 4; HistogramProto histo = 5;
 *             TensorProto tensor = 8; SummaryMetadata metadata = 9; }
 *   Image   { int32 height = 1; int32 width = 2; int32 colorspace = 3;
 *             bytes encoded_image_string = 4; }                (a PNG: npuK_png)
 *   HistogramProto { double min = 1, max = 2, num = 3, sum = 4, sum_squares = 5;
 *                    repeated double bucket_limit = 6 [packed]; repeated double bucket = 7; }
 * A serialized Summary is a sequence of `value` fields, so concatenating several is their merge
 * (tf.summary.merge).
 */
#ifndef NPU_KERNELS_KSUMMARY_H
#define NPU_KERNELS_KSUMMARY_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* CRC-32 (zlib, PNG: reflected polynomial 0xEDB88320) and CRC-32C (Castagnoli, reflected
   0x82F63B78: TFRecord), continuing crc (0 to start).  npuK_crc32c_masked: TFRecord's mask,
   ((c >> 15) | (c << 17)) + 0xa282ead8, of the CRC-32C of data.  npuK_crc32c uses SSE 4.2's
   crc32 instruction where the CPU has it; its twin _ref, a table a byte at a time, is the
   reference. */
uint32_t npuK_crc32(uint32_t crc, const void *data, size_t n);
uint32_t npuK_crc32c(uint32_t crc, const void *data, size_t n);
uint32_t npuK_crc32c_ref(uint32_t crc, const void *data, size_t n);
uint32_t npuK_crc32c_masked(const void *data, size_t n);

/* tf.summary.scalar: one value {tag, simple_value}. */
size_t npuK_summary_scalar(uint8_t *out, const char *tag, float value);

/* tf.summary.histogram with TensorFlow's default buckets (histogram.cc): limits 1e-12 * 1.1^k
   below 1e20 (k = 0, 1, ...), their negatives, 0 and -DBL_MAX / DBL_MAX, ascending:
   NPUK_HISTOGRAM_N_LIMITS of them (npuK_histogram_limits computes them by that rule).  A value
   v counts in bucket i, the first whose limit is > v (so bucket i holds [limit[i-1],
   limit[i])), DBL_MAX in the last.  The proto lists each non-empty bucket, a run of empty
   buckets collapsed into one entry (the run's last limit, count 0), and one (DBL_MAX, 0)
   entry when there is nothing else. */
enum { NPUK_HISTOGRAM_N_LIMITS = 1551 };
void npuK_histogram_limits(double *limits);
typedef struct npuK_histo {
  double min, max, num, sum, sum_squares; /* min DBL_MAX and max -DBL_MAX when empty */
  int first, last; /* the buckets of min and max (first > last when empty): those outside
                      [first, last] are empty, which the encoder does not walk */
  int n_entries;   /* the buckets the proto lists (at least 1) */
} npuK_histo;
/* Fills h and counts (NPUK_HISTOGRAM_N_LIMITS of them) from the n values x of dtype (any
   npuK_dtype, read as float64).  Returns the index of the first value that is not finite (h
   and counts are then unspecified), or -1.  One pass: each value is read once, its bucket
   found without a branch through constant tables (kernels/histogram_table.h: the limits, and
   the number of them below each slice of the values' binary exponents, then one compare);
   float32 and float64 are read in place, the other dtypes widened 256 at a time into a buffer
   on the stack; a value that is not finite shows in the sum, and only then are the values
   searched for it.  Nothing is computed per call but the counts.  The twin _ref takes float64
   values and the limits (npuK_histogram_limits), checks the values first, then bisects the
   limits for each (nothing is counted when a value is not finite). */
int64_t npuK_histogram(int64_t n, npuK_dtype dtype, const void *x, npuK_histo *h,
                       uint64_t *counts);
int64_t npuK_histogram_ref(int64_t n, const double *x, const double *limits, npuK_histo *h,
                           uint64_t *counts);
/* The proto of h and counts (either kernel's): sized without reading the counts (h->n_entries),
   written in one walk of the buckets from h->first to h->last (empty runs crossed four buckets
   at a time; the limits read from the table) filling both packed fields. */
size_t npuK_summary_histogram(uint8_t *out, const char *tag, const npuK_histo *h,
                              const uint64_t *counts);
/* For tests: 1 when kernels/histogram_table.h holds what its rule gives (the limits of
   npuK_histogram_limits, bit for bit, and each slice's count of the limits below it, a slice
   holding at most one), else 0. */
int npuK_histogram_check_tables(void);

/* A PNG of an 8-bit image, pixels (h, w, c) row-major, c 1 (gray), 3 (RGB) or 4 (RGBA): one
   IDAT whose zlib stream holds stored (uncompressed) deflate blocks, so no compressor is
   needed; every row uses filter 0. */
size_t npuK_png(uint8_t *out, int64_t h, int64_t w, int c, const uint8_t *pixels);
/* tf.summary.image's normalisation of one float image to 8 bits: x is (n_pixels, c); with a
   negative finite value, scale = 127 / max |finite value| and offset 128, else scale = 255 /
   the largest finite value and offset 0 (scale 0 when that is below 1e-6); y = (uint8)(x *
   scale + offset).  A pixel with a non-finite channel takes bad_color (c entries). */
void npuK_image_to_u8(int64_t n_pixels, int c, const double *x, const uint8_t *bad_color,
                      uint8_t *y);
/* n images (n, h, w, c) of 8 bits: one value each, {tag "<tag>/image" when max_outputs is 1,
   else "<tag>/image/<i>", image {h, w, colorspace c, PNG}}. */
size_t npuK_summary_images(uint8_t *out, const char *tag, int max_outputs, int64_t n, int64_t h,
                           int64_t w, int c, const uint8_t *pixels);

/* tf.summary.text: {tag, metadata {plugin_data {plugin_name "text"}}, tensor {dtype DT_STRING,
   tensor_shape {} (a scalar), string_val text}}. */
size_t npuK_summary_text(uint8_t *out, const char *tag, const uint8_t *text, size_t n);

/* Walks the values of a serialized Summary: *pos (0 to start) moves past the next value and
   *tag / *tag_len receive its tag.  1: a value was read; 0: the end; -1: not a Summary. */
int npuK_summary_next_tag(const uint8_t *s, size_t n, size_t *pos, const uint8_t **tag,
                          size_t *tag_len);

#endif
