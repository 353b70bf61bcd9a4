/*
 * tensor.c — dense row-major tensors with atomic reference counts.
 *
 * A tensor and its data are one allocation from its context (the data 64-byte offset inside
 * the block), except reshape views, which point into a retained base, and file-backed
 * tensors (npuT_map_file, for external_weight): a header from the context and a read-only
 * mapping of a file, unmapped on the last release.  Tensors are immutable once shared; the
 * executor writes only into tensors whose refcount it knows to be 1.
 */
#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/mman.h>

#include "core/half.h"
#include "core/npu_int.h"
#include "kernels/kernels.h"

#define DATA_OFFSET ((sizeof(npu_tensor) + 63) & ~(size_t)63)

int64_t npuT_numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] != 0 && n > INT64_MAX / shape[i]) return -1;
    n *= shape[i];
  }
  return n;
}

/* An unknown rank (ndim < 0: a value shaped at run time) is the same as nothing. */
bool npuT_same_shape(int ndim_a, const int64_t *a, int ndim_b, const int64_t *b) {
  return ndim_a == ndim_b && ndim_a >= 0 &&
         (ndim_a == 0 || memcmp(a, b, (size_t)ndim_a * sizeof *a) == 0);
}

npu_status npuT_check_shape(npu_context *ctx, const char *what, int ndim, const int64_t *shape) {
  if (ndim < 0 || ndim > NPU_MAX_DIMS)
    return npuC_error(ctx, NPU_ERR_SHAPE, "%s: rank %d is outside [0, %d]", what, ndim,
                      NPU_MAX_DIMS);
  if (ndim > 0 && !shape) return npuC_error(ctx, NPU_ERR_ARG, "%s: shape is NULL", what);
  for (int i = 0; i < ndim; i++)
    if (shape[i] < 0)
      return npuC_error(ctx, NPU_ERR_SHAPE, "%s: dimension %d is %lld (must be >= 0)", what, i,
                        (long long)shape[i]);
  if (npuT_numel(ndim, shape) < 0 ||
      (uint64_t)npuT_numel(ndim, shape) > (uint64_t)(SIZE_MAX / 16))
    return npuC_error(ctx, NPU_ERR_SHAPE, "%s: too many elements", what);
  return NPU_OK;
}

/* The checks of a new tensor (what names the caller in messages); its byte size in *nbytes. */
static npu_status tensor_check(npu_context *ctx, const char *what, npu_dtype dtype, int ndim,
                               const int64_t *shape, size_t *nbytes) {
  if ((unsigned)dtype >= NPU_DTYPE_COUNT)
    return npuC_error(ctx, NPU_ERR_DTYPE, "%s: invalid dtype %d", what, (int)dtype);
  npu_status st = npuT_check_shape(ctx, what, ndim, shape);
  if (st) return st;
  *nbytes = (size_t)npuT_numel(ndim, shape) * npu_dtype_size(dtype);
  return NPU_OK;
}

/* A new header t (refcount 1, retaining ctx) over data: in its own block, or mapped
   (mapped_bytes, unmapped on the last release). */
static void tensor_init(npu_tensor *t, npu_context *ctx, npu_dtype dtype, int ndim,
                        const int64_t *shape, size_t nbytes, void *data, size_t mapped_bytes) {
  *t = (npu_tensor){.dtype = dtype, .ndim = ndim, .numel = npuT_numel(ndim, shape),
                    .nbytes = nbytes, .data = data, .mapped_bytes = mapped_bytes};
  atomic_init(&t->refcount, 1);
  if (ndim) memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
  t->ctx = npu_context_retain(ctx);
}

static npu_status tensor_alloc(npu_context *ctx, npu_dtype dtype, int ndim, const int64_t *shape,
                               npu_tensor **out) {
  *out = NULL;
  if (!ctx) return NPU_ERR_ARG;
  size_t nbytes;
  npu_status st = tensor_check(ctx, "npu_tensor_new", dtype, ndim, shape, &nbytes);
  if (st) return st;
  npu_tensor *t = npuC_alloc(ctx, DATA_OFFSET + nbytes);
  if (!t) return NPU_ERR_NOMEM;
  tensor_init(t, ctx, dtype, ndim, shape, nbytes, (char *)t + DATA_OFFSET, 0);
  *out = t;
  return NPU_OK;
}

npu_status npu_tensor_new(npu_context *ctx, npu_dtype dtype, int ndim, const int64_t *shape,
                          npu_tensor **out) {
  if (!out) return npuC_error(ctx, NPU_ERR_ARG, "npu_tensor_new: out is NULL");
  npu_status st = tensor_alloc(ctx, dtype, ndim, shape, out);
  if (st == NPU_OK) memset((*out)->data, 0, (*out)->nbytes);
  return st;
}

npu_status npu_tensor_from_data(npu_context *ctx, npu_dtype dtype, int ndim,
                                const int64_t *shape, const void *data, size_t nbytes,
                                npu_tensor **out) {
  if (!out) return npuC_error(ctx, NPU_ERR_ARG, "npu_tensor_from_data: out is NULL");
  *out = NULL;
  npu_tensor *t;
  npu_status st = tensor_alloc(ctx, dtype, ndim, shape, &t);
  if (st) return st;
  if (nbytes != t->nbytes || (nbytes && !data)) {
    size_t want = t->nbytes;
    npu_tensor_release(t);
    return npuC_error(ctx, NPU_ERR_SHAPE,
                      "npu_tensor_from_data: %zu bytes given, the shape needs %zu", nbytes, want);
  }
  if (nbytes) memcpy(t->data, data, nbytes);
  *out = t;
  return NPU_OK;
}

npu_status npu_tensor_cast(npu_context *ctx, const npu_tensor *src, npu_dtype dtype,
                           npu_tensor **out) {
  if (!out || !src) return npuC_error(ctx, NPU_ERR_ARG, "npu_tensor_cast: NULL argument");
  npu_tensor *t;
  npu_status st = tensor_alloc(ctx, dtype, src->ndim, src->shape, &t);
  if (st) {
    *out = NULL;
    return st;
  }
  npuK_cast(NULL, src->numel, (npuK_dtype)src->dtype, src->data, (npuK_dtype)dtype, t->data);
  *out = t;
  return NPU_OK;
}

npu_status npu_dtype_convert(npu_dtype from, const void *src, npu_dtype to, void *dst, int64_t n) {
  if ((unsigned)from >= NPU_DTYPE_COUNT || (unsigned)to >= NPU_DTYPE_COUNT) return NPU_ERR_DTYPE;
  if (n < 0 || (n > 0 && (!src || !dst))) return NPU_ERR_ARG;
  if (n > 0) npuK_cast(NULL, n, (npuK_dtype)from, src, (npuK_dtype)to, dst);
  return NPU_OK;
}

npu_status npu_tensor_reshape(npu_context *ctx, npu_tensor *src, int ndim, const int64_t *shape,
                              npu_tensor **out) {
  if (!out || !src) return npuC_error(ctx, NPU_ERR_ARG, "npu_tensor_reshape: NULL argument");
  *out = NULL;
  npu_status st = npuT_check_shape(ctx, "npu_tensor_reshape", ndim, shape);
  if (st) return st;
  if (npuT_numel(ndim, shape) != src->numel) {
    char a[96], b[96];
    return npuC_error(ctx, NPU_ERR_SHAPE, "npu_tensor_reshape: cannot reshape %s into %s",
                      npuC_shape_str(a, sizeof a, src->ndim, src->shape),
                      npuC_shape_str(b, sizeof b, ndim, shape));
  }
  npu_tensor *t = npuC_alloc(ctx, sizeof *t);
  if (!t) return NPU_ERR_NOMEM;
  *t = (npu_tensor){.dtype = src->dtype, .ndim = ndim, .numel = src->numel,
                    .nbytes = src->nbytes, .data = src->data};
  atomic_init(&t->refcount, 1);
  if (ndim) memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
  t->ctx = npu_context_retain(ctx);
  t->base = npu_tensor_retain(src->base ? src->base : src);
  *out = t;
  return NPU_OK;
}

npu_status npuT_map_file(npu_context *ctx, npu_dtype dtype, int ndim, const int64_t *shape,
                         int fd, const char *path, npu_tensor **out) {
  *out = NULL;
  size_t nbytes;
  npu_status st = tensor_check(ctx, "npuT_map_file", dtype, ndim, shape, &nbytes);
  if (st) return st;
  if (!nbytes) return npuC_error(ctx, NPU_ERR_ARG, "npuT_map_file: '%s': nothing to map", path);
  npu_tensor *t = npuC_alloc(ctx, sizeof *t);
  if (!t) return NPU_ERR_NOMEM;
  void *data = mmap(NULL, nbytes, PROT_READ, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    int err = errno;
    npuC_free(ctx, t);
    return npuC_error(ctx, NPU_ERR_IO, "cannot map '%s': %s", path, strerror(err));
  }
  tensor_init(t, ctx, dtype, ndim, shape, nbytes, data, nbytes);
  *out = t;
  return NPU_OK;
}

void npuT_canonical_bools(npu_tensor *t) {
  if (t->dtype != NPU_DTYPE_BOOL) return;
  unsigned char *b = t->data;
  for (int64_t i = 0; i < t->numel; i++) b[i] = b[i] != 0;
}

npu_tensor *npu_tensor_retain(npu_tensor *t) {
  if (t) atomic_fetch_add(&t->refcount, 1);
  return t;
}

void npu_tensor_release(npu_tensor *t) {
  if (!t || atomic_fetch_sub(&t->refcount, 1) != 1) return;
  npu_context *ctx = t->ctx;
  npu_tensor_release(t->base);
  if (t->mapped_bytes) munmap(t->data, t->mapped_bytes);
  npuC_free(ctx, t);
  npu_context_release(ctx);
}

npu_dtype npu_tensor_dtype(const npu_tensor *t) { return t->dtype; }
int npu_tensor_ndim(const npu_tensor *t) { return t->ndim; }
const int64_t *npu_tensor_shape(const npu_tensor *t) { return t->shape; }
int64_t npu_tensor_numel(const npu_tensor *t) { return t->numel; }
size_t npu_tensor_nbytes(const npu_tensor *t) { return t->nbytes; }
void *npu_tensor_data(const npu_tensor *t) { return t->data; }

double npu_tensor_get(const npu_tensor *t, int64_t i) {
  const void *d = t->data;
  switch (t->dtype) {
  case NPU_DTYPE_F32: return ((const float *)d)[i];
  case NPU_DTYPE_F16: return npu_f16_to_f32(((const uint16_t *)d)[i]);
  case NPU_DTYPE_BF16: return npu_bf16_to_f32(((const uint16_t *)d)[i]);
  case NPU_DTYPE_F64: return ((const double *)d)[i];
  case NPU_DTYPE_I8: return ((const int8_t *)d)[i];
  case NPU_DTYPE_U8: return ((const uint8_t *)d)[i];
  case NPU_DTYPE_I32: return ((const int32_t *)d)[i];
  case NPU_DTYPE_I64: return (double)((const int64_t *)d)[i];
  case NPU_DTYPE_BOOL: return ((const uint8_t *)d)[i] != 0;
  default: return NAN;
  }
}
