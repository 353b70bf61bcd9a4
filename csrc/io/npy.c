/*
 * npy.c — NumPy .npy files: npu_tensor_load_npy / npu_tensor_save_npy.
 *
 * Layout (NumPy's format.py): "\x93NUMPY", major and minor version bytes, the header length
 * (2 bytes little-endian in 1.0, 4 bytes in 2.0/3.0), then the header: a Python dict literal
 * {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces and ended by
 * '\n', then the raw elements.
 *
 * Reading: versions 1.0, 2.0 and 3.0; descr one of f2 f4 f8 i1 u1 i4 i8 b1 with byte order
 * '<', '|', '=' or '>' ('>' is byte-swapped on load); fortran_order True only where the memory
 * layout is the same as C order (at most one dimension larger than 1), else
 * NPU_ERR_UNSUPPORTED.  Bytes after the data are ignored, as numpy.load ignores them.  Bool
 * bytes are normalised to 0/1.
 * Writing: exactly what numpy.save writes for the same array (version 1.0, keys sorted, the
 * growth-axis spare spaces, padding so the data starts at a multiple of 64 bytes), so files
 * compare byte for byte.  bfloat16 has no NumPy dtype and is refused (NPU_ERR_UNSUPPORTED);
 * convert it first.  A failed write removes the partial file.
 *
 * Invariants: every message names the file; the only allocations are the header buffer and
 * the tensor, both freed on failure; failing calls leave *out NULL.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/npu_int.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_ALIGN 64
#define NPY_GROWTH_AXIS_MAX_DIGITS 21 /* numpy's spare room for growing the first axis */
#define NPY_MAX_HEADER (1u << 24)     /* far above any real header; guards allocation */

static const struct {
  char kind; /* NumPy type character */
  int size;
  npu_dtype dtype;
} npy_types[] = {
    {'f', 4, NPU_DTYPE_F32}, {'f', 2, NPU_DTYPE_F16}, {'f', 8, NPU_DTYPE_F64},
    {'i', 1, NPU_DTYPE_I8},  {'u', 1, NPU_DTYPE_U8},  {'i', 4, NPU_DTYPE_I32},
    {'i', 8, NPU_DTYPE_I64}, {'b', 1, NPU_DTYPE_BOOL},
};

static int host_is_little_endian(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

/* ---- header parsing: a small reader for the Python literals numpy writes ---------------- */

typedef struct parser {
  const char *p, *end;
} parser;

static void skip_ws(parser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' ||
                             *ps->p == '\r'))
    ps->p++;
}

static int accept(parser *ps, char c) {
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == c) {
    ps->p++;
    return 1;
  }
  return 0;
}

/* A quoted string without escapes (numpy never writes any in these fields). */
static int parse_str(parser *ps, const char **s, size_t *n) {
  skip_ws(ps);
  if (ps->p >= ps->end || (*ps->p != '\'' && *ps->p != '"')) return 0;
  char q = *ps->p++;
  const char *start = ps->p;
  while (ps->p < ps->end && *ps->p != q) {
    if (*ps->p == '\\') return 0;
    ps->p++;
  }
  if (ps->p >= ps->end) return 0;
  *s = start;
  *n = (size_t)(ps->p - start);
  ps->p++;
  return 1;
}

static int accept_word(parser *ps, const char *w) {
  skip_ws(ps);
  size_t n = strlen(w);
  if ((size_t)(ps->end - ps->p) >= n && memcmp(ps->p, w, n) == 0) {
    ps->p += n;
    return 1;
  }
  return 0;
}

typedef struct npy_header {
  int have_descr, have_fortran, have_shape;
  char descr[16];
  int fortran;
  int ndim;
  int64_t shape[NPU_MAX_DIMS];
} npy_header;

/* Parses (d0, d1, ...) with an optional trailing comma and Python 2's 'L' suffix. */
static npu_status parse_shape(npu_context *ctx, const char *path, parser *ps, npy_header *h) {
  if (!accept(ps, '('))
    return npuC_error(ctx, NPU_ERR_FORMAT, "npu_tensor_load_npy: '%s': bad header: 'shape' is "
                      "not a tuple", path);
  h->ndim = 0;
  for (;;) {
    if (accept(ps, ')')) break;
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
      return npuC_error(ctx, NPU_ERR_FORMAT, "npu_tensor_load_npy: '%s': bad header: 'shape' "
                        "must hold non-negative integers", path);
    int64_t v = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
      if (v > (INT64_MAX - 9) / 10)
        return npuC_error(ctx, NPU_ERR_FORMAT, "npu_tensor_load_npy: '%s': bad header: a "
                          "dimension does not fit in 64 bits", path);
      v = v * 10 + (*ps->p++ - '0');
    }
    if (ps->p < ps->end && (*ps->p == 'L' || *ps->p == 'l')) ps->p++;
    if (h->ndim == NPU_MAX_DIMS)
      return npuC_error(ctx, NPU_ERR_UNSUPPORTED, "npu_tensor_load_npy: '%s': more than %d "
                        "dimensions", path, NPU_MAX_DIMS);
    h->shape[h->ndim++] = v;
    if (accept(ps, ')')) break;
    if (!accept(ps, ','))
      return npuC_error(ctx, NPU_ERR_FORMAT, "npu_tensor_load_npy: '%s': bad header: malformed "
                        "'shape' tuple", path);
  }
  return NPU_OK;
}

static npu_status parse_header(npu_context *ctx, const char *path, const char *text, size_t len,
                               npy_header *h) {
  parser ps = {text, text + len};
  memset(h, 0, sizeof *h);
  if (!accept(&ps, '{'))
    return npuC_error(ctx, NPU_ERR_FORMAT, "npu_tensor_load_npy: '%s': bad header: expected a "
                      "dict literal", path);
  for (;;) {
    if (accept(&ps, '}')) break;
    const char *key;
    size_t klen;
    if (!parse_str(&ps, &key, &klen) || !accept(&ps, ':'))
      return npuC_error(ctx, NPU_ERR_FORMAT, "npu_tensor_load_npy: '%s': bad header: expected "
                        "'key': value", path);
    if (klen == 5 && memcmp(key, "descr", 5) == 0) {
      const char *s;
      size_t n;
      skip_ws(&ps);
      if (ps.p < ps.end && *ps.p == '[') {
        return npuC_error(ctx, NPU_ERR_UNSUPPORTED, "npu_tensor_load_npy: '%s': structured "
                          "dtypes (record arrays) are not supported", path);
      }
      if (!parse_str(&ps, &s, &n))
        return npuC_error(ctx, NPU_ERR_FORMAT, "npu_tensor_load_npy: '%s': bad header: 'descr' "
                          "is not a string", path);
      if (n >= sizeof h->descr) n = sizeof h->descr - 1;
      memcpy(h->descr, s, n);
      h->descr[n] = '\0';
      h->have_descr = 1;
    } else if (klen == 13 && memcmp(key, "fortran_order", 13) == 0) {
      if (accept_word(&ps, "True")) h->fortran = 1;
      else if (accept_word(&ps, "False")) h->fortran = 0;
      else
        return npuC_error(ctx, NPU_ERR_FORMAT, "npu_tensor_load_npy: '%s': bad header: "
                          "'fortran_order' is not True or False", path);
      h->have_fortran = 1;
    } else if (klen == 5 && memcmp(key, "shape", 5) == 0) {
      npu_status st = parse_shape(ctx, path, &ps, h);
      if (st) return st;
      h->have_shape = 1;
    } else {
      return npuC_error(ctx, NPU_ERR_FORMAT, "npu_tensor_load_npy: '%s': bad header: unexpected "
                        "key '%.*s'", path, (int)(klen > 40 ? 40 : klen), key);
    }
    if (accept(&ps, '}')) break;
    if (!accept(&ps, ','))
      return npuC_error(ctx, NPU_ERR_FORMAT, "npu_tensor_load_npy: '%s': bad header: expected "
                        "',' or '}'", path);
  }
  skip_ws(&ps);
  if (ps.p != ps.end)
    return npuC_error(ctx, NPU_ERR_FORMAT, "npu_tensor_load_npy: '%s': bad header: text after "
                      "the dict", path);
  if (!h->have_descr || !h->have_fortran || !h->have_shape)
    return npuC_error(ctx, NPU_ERR_FORMAT, "npu_tensor_load_npy: '%s': bad header: missing key "
                      "'%s'", path,
                      !h->have_descr ? "descr" : !h->have_fortran ? "fortran_order" : "shape");
  return NPU_OK;
}

/* Maps a descr to a dtype; *swap set when the file's byte order differs from the host's. */
static npu_status descr_dtype(npu_context *ctx, const char *path, const char *descr,
                              npu_dtype *dtype, int *swap) {
  char order = descr[0];
  if (order != '<' && order != '>' && order != '|' && order != '=')
    return npuC_error(ctx, NPU_ERR_FORMAT, "npu_tensor_load_npy: '%s': bad header: descr '%s' "
                      "has no byte-order character", path, descr);
  char kind = descr[1];
  char *end = (char *)descr;
  long size = kind ? strtol(descr + 2, &end, 10) : 0;
  if (kind == '?' && descr[2] == '\0') {
    kind = 'b';
    size = 1;
    end = (char *)descr + 2;
  }
  if (kind && *end == '\0' && size > 0)
    for (size_t i = 0; i < npu_countof(npy_types); i++)
      if (npy_types[i].kind == kind && npy_types[i].size == size) {
        *dtype = npy_types[i].dtype;
        int file_big = order == '>';
        int host_big = !host_is_little_endian();
        *swap = size > 1 && order != '|' && order != '=' && file_big != host_big;
        return NPU_OK;
      }
  return npuC_error(ctx, NPU_ERR_UNSUPPORTED, "npu_tensor_load_npy: '%s': dtype '%s' is not "
                    "supported (supported: <f4 <f2 <f8 |i1 |u1 <i4 <i8 |b1; convert with "
                    "numpy's astype before saving)", path, descr);
}

static void byteswap(void *data, int64_t n, size_t esize) {
  unsigned char *p = data;
  for (int64_t i = 0; i < n; i++, p += esize)
    for (size_t a = 0, b = esize - 1; a < b; a++, b--) {
      unsigned char c = p[a];
      p[a] = p[b];
      p[b] = c;
    }
}

static size_t read_le(const unsigned char *b, int n) {
  size_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = (v << 8) | b[i];
  return v;
}

npu_status npu_tensor_load_npy(npu_context *ctx, const char *path, npu_tensor **out) {
  static const char fn[] = "npu_tensor_load_npy";
  if (!out) return npuC_error(ctx, NPU_ERR_ARG, "%s: out is NULL", fn);
  *out = NULL;
  FILE *f;
  npu_status st = npuC_open_input(ctx, fn, path, &f);
  if (st) return st;

  char *text = NULL;
  npu_tensor *t = NULL;
  unsigned char pre[12];
  size_t got = fread(pre, 1, 8, f);
  if (got < 8) {
    if (ferror(f)) st = npuC_io_error(ctx, fn, path, errno);
    else if (got >= NPY_MAGIC_LEN && memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) == 0)
      st = npuC_error(ctx, NPU_ERR_FORMAT, "%s: '%s': truncated: the file ends inside the .npy "
                      "preamble", fn, path);
    else
      st = npuC_error(ctx, NPU_ERR_FORMAT, "%s: '%s': not a .npy file (%zu bytes, too short for "
                      "the magic string)", fn, path, got);
    goto done;
  }
  if (memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0) {
    st = npuC_error(ctx, NPU_ERR_FORMAT, "%s: '%s': not a .npy file (bad magic: expected "
                    "\\x93NUMPY)", fn, path);
    goto done;
  }
  int major = pre[6], minor = pre[7];
  int len_bytes = major == 1 ? 2 : (major == 2 || major == 3) ? 4 : 0;
  if (!len_bytes || minor != 0) {
    st = npuC_error(ctx, NPU_ERR_FORMAT, "%s: '%s': unknown .npy format version %d.%d (1.0, 2.0 "
                    "and 3.0 are read)", fn, path, major, minor);
    goto done;
  }
  if (fread(pre + 8, 1, (size_t)len_bytes, f) != (size_t)len_bytes) {
    st = ferror(f) ? npuC_io_error(ctx, fn, path, errno)
                   : npuC_error(ctx, NPU_ERR_FORMAT, "%s: '%s': truncated: the file ends inside "
                                "the header length", fn, path);
    goto done;
  }
  size_t hlen = read_le(pre + 8, len_bytes);
  if (hlen == 0 || hlen > NPY_MAX_HEADER) {
    st = npuC_error(ctx, NPU_ERR_FORMAT, "%s: '%s': bad header: implausible header length %zu",
                    fn, path, hlen);
    goto done;
  }
  text = npuC_alloc(ctx, hlen);
  if (!text) {
    st = NPU_ERR_NOMEM;
    goto done;
  }
  got = fread(text, 1, hlen, f);
  if (got != hlen) {
    st = ferror(f) ? npuC_io_error(ctx, fn, path, errno)
                   : npuC_error(ctx, NPU_ERR_FORMAT, "%s: '%s': truncated: the header needs %zu "
                                "bytes, the file has %zu", fn, path, hlen, got);
    goto done;
  }
  npy_header h;
  st = parse_header(ctx, path, text, hlen, &h);
  if (st) goto done;
  npu_dtype dtype = NPU_DTYPE_F32;
  int swap = 0;
  st = descr_dtype(ctx, path, h.descr, &dtype, &swap);
  if (st) goto done;
  if (h.fortran) {
    int big = 0;
    for (int i = 0; i < h.ndim; i++) big += h.shape[i] > 1;
    if (big > 1) {
      char sb[96];
      st = npuC_error(ctx, NPU_ERR_UNSUPPORTED, "%s: '%s': fortran_order=True arrays (shape %s) "
                      "are not supported; save with numpy.ascontiguousarray(a)", fn, path,
                      npuC_shape_str(sb, sizeof sb, h.ndim, h.shape));
      goto done;
    }
  }
  if (npuT_numel(h.ndim, h.shape) < 0) {
    st = npuC_error(ctx, NPU_ERR_FORMAT, "%s: '%s': bad header: the shape's element count "
                    "overflows", fn, path);
    goto done;
  }
  /* the data must be in the file before anything is allocated for it: a 100-byte file may
     declare a shape of terabytes */
  long here = ftell(f), file_end = -1;
  if (here >= 0 && fseek(f, 0, SEEK_END) == 0) file_end = ftell(f);
  if (here < 0 || file_end < here || fseek(f, here, SEEK_SET) != 0) {
    st = npuC_io_error(ctx, fn, path, errno ? errno : EIO);
    goto done;
  }
  int64_t numel = npuT_numel(h.ndim, h.shape);
  size_t avail = (size_t)(file_end - here), esize = npu_dtype_size(dtype);
  if ((uint64_t)numel > avail / esize) {
    char sb[96], need[32];
    if ((uint64_t)numel > UINT64_MAX / esize) snprintf(need, sizeof need, "more than 2^64");
    else snprintf(need, sizeof need, "%llu", (unsigned long long)numel * esize);
    st = npuC_error(ctx, NPU_ERR_FORMAT, "%s: '%s': truncated: %s %s needs %s bytes of data, "
                    "the file has %zu", fn, path, h.descr,
                    npuC_shape_str(sb, sizeof sb, h.ndim, h.shape), need, avail);
    goto done;
  }
  st = npu_tensor_new(ctx, dtype, h.ndim, h.shape, &t);
  if (st) {
    if (st != NPU_ERR_NOMEM) npuC_error_prefix(ctx, st, "%s: '%s'", fn, path);
    goto done;
  }
  got = t->nbytes ? fread(t->data, 1, t->nbytes, f) : 0;
  if (got != t->nbytes) {
    char sb[96];
    st = ferror(f) ? npuC_io_error(ctx, fn, path, errno)
                   : npuC_error(ctx, NPU_ERR_FORMAT, "%s: '%s': truncated: %s %s needs %zu bytes "
                                "of data, the file has %zu", fn, path, h.descr,
                                npuC_shape_str(sb, sizeof sb, h.ndim, h.shape), t->nbytes, got);
    goto done;
  }
  if (swap) byteswap(t->data, t->numel, npu_dtype_size(dtype));
  npuT_canonical_bools(t);

done:
  npuC_free(ctx, text);
  fclose(f);
  if (st) {
    npu_tensor_release(t);
    return st;
  }
  *out = t;
  return NPU_OK;
}

/* ---- writing ---------------------------------------------------------------------------- */

static const char *npy_descr(npu_dtype t) {
  switch (t) {
  case NPU_DTYPE_F32: return "<f4";
  case NPU_DTYPE_F16: return "<f2";
  case NPU_DTYPE_F64: return "<f8";
  case NPU_DTYPE_I8: return "|i1";
  case NPU_DTYPE_U8: return "|u1";
  case NPU_DTYPE_I32: return "<i4";
  case NPU_DTYPE_I64: return "<i8";
  case NPU_DTYPE_BOOL: return "|b1";
  default: return NULL;
  }
}

/* Builds the full preamble + header as numpy.save does; returns its length. */
static size_t build_header(char *buf, const char *descr, int ndim,
                           const int64_t *shape) {
  char dict[512];
  size_t n = (size_t)snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, "
                              "'shape': (", descr);
  for (int i = 0; i < ndim; i++)
    n += (size_t)snprintf(dict + n, sizeof dict - n, i ? ", %lld" : "%lld",
                          (long long)shape[i]);
  n += (size_t)snprintf(dict + n, sizeof dict - n, "%s), }", ndim == 1 ? "," : "");
  if (ndim > 0) { /* numpy's spare room for growing axis 0 in place */
    char d0[24];
    int digits = snprintf(d0, sizeof d0, "%lld", (long long)shape[0]);
    for (int i = digits; i < NPY_GROWTH_AXIS_MAX_DIGITS; i++) dict[n++] = ' ';
  }
  size_t hlen = n + 1; /* + '\n' */
  size_t pad = NPY_ALIGN - (NPY_MAGIC_LEN + 2 + 2 + hlen) % NPY_ALIGN;
  size_t total_len = hlen + pad; /* the header length field */
  size_t k = 0;
  memcpy(buf, NPY_MAGIC, NPY_MAGIC_LEN);
  k = NPY_MAGIC_LEN;
  buf[k++] = 1;
  buf[k++] = 0;
  buf[k++] = (char)(total_len & 0xff);
  buf[k++] = (char)((total_len >> 8) & 0xff);
  memcpy(buf + k, dict, n);
  k += n;
  memset(buf + k, ' ', pad);
  k += pad;
  buf[k++] = '\n';
  return k;
}

npu_status npu_tensor_save_npy(npu_context *ctx, const npu_tensor *t, const char *path) {
  static const char fn[] = "npu_tensor_save_npy";
  if (!ctx) return NPU_ERR_ARG;
  if (!t || !path) return npuC_error(ctx, NPU_ERR_ARG, "%s: NULL argument", fn);
  const char *descr = npy_descr(t->dtype);
  if (!descr)
    return npuC_error(ctx, NPU_ERR_UNSUPPORTED, "%s: '%s': %s has no NumPy dtype; save "
                      "t:astype(\"float32\") instead (exact for %s)", fn, path,
                      npu_dtype_name(t->dtype), npu_dtype_name(t->dtype));
  if (!host_is_little_endian())
    return npuC_error(ctx, NPU_ERR_UNSUPPORTED, "%s: big-endian hosts are not supported", fn);
  /* 8 dims of <= 20 digits: the dict is < 300 bytes, so version 1.0 always fits. */
  char header[640];
  size_t hn = build_header(header, descr, t->ndim, t->shape);
  FILE *f = fopen(path, "wb");
  if (!f) return npuC_io_error(ctx, fn, path, errno);
  int ok = fwrite(header, 1, hn, f) == hn;
  if (ok && t->nbytes) ok = fwrite(t->data, 1, t->nbytes, f) == t->nbytes;
  int err = errno;
  if (fclose(f) != 0 && ok) {
    ok = 0;
    err = errno;
  }
  if (!ok) {
    remove(path);
    return npuC_io_error(ctx, fn, path, err);
  }
  return NPU_OK;
}
