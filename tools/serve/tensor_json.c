/*
 * tensor_json.c — TF Serving's REST tensors: JSON values (nested arrays of numbers or
 * booleans) into host buffers of a dtype and shape, and host buffers back into JSON text.
 * Buffers are plain malloc'd memory: the HTTP threads own no npu_context, so tensors are
 * made on the worker that runs them.  Floats print as the shortest text that reads back to
 * the same float32 (or float64) value, NaN and Infinity as TF Serving writes them.
 */
#include "serve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- JSON -> buffer ----------------------------------------------------------------------- */

/* The shape of a JSON value (nested arrays; a scalar has rank 0); -1 on a ragged or too deep
   value.  Only the first element of each level is walked: the fill checks the rest. */
static int json_shape(const cJSON *v, int64_t *shape, char *err, size_t err_size) {
  int nd = 0;
  while (cJSON_IsArray(v)) {
    if (nd == NPU_MAX_DIMS) {
      snprintf(err, err_size, "more than %d dimensions", NPU_MAX_DIMS);
      return -1;
    }
    shape[nd++] = cJSON_GetArraySize(v);
    v = v->child;
    if (!v) break;
  }
  return nd;
}

static int store(void *data, npu_dtype dt, int64_t k, const cJSON *v, char *err, size_t err_size) {
  double d;
  if (cJSON_IsBool(v)) d = cJSON_IsTrue(v) ? 1 : 0;
  else if (cJSON_IsNumber(v)) d = v->valuedouble;
  else if (cJSON_IsString(v) && (!strcmp(v->valuestring, "NaN") || !strcmp(v->valuestring, "Infinity") ||
                                 !strcmp(v->valuestring, "-Infinity")))
    d = v->valuestring[0] == 'N' ? NAN : v->valuestring[0] == '-' ? -INFINITY : INFINITY;
  else {
    snprintf(err, err_size, "expected a number%s, got %s", dt == NPU_DTYPE_BOOL ? " or a boolean" : "",
             cJSON_IsString(v) ? "a string (string tensors are not supported)" :
             cJSON_IsObject(v) ? "an object" : cJSON_IsNull(v) ? "null" : "an array");
    return -1;
  }
  bool integral = dt == NPU_DTYPE_I8 || dt == NPU_DTYPE_U8 || dt == NPU_DTYPE_I32 || dt == NPU_DTYPE_I64;
  if (integral && (d != floor(d) || !isfinite(d))) {
    snprintf(err, err_size, "expected an integer for %s, got %g", npu_dtype_name(dt), d);
    return -1;
  }
  switch (dt) {
  case NPU_DTYPE_F32: ((float *)data)[k] = (float)d; break;
  case NPU_DTYPE_F64: ((double *)data)[k] = d; break;
  case NPU_DTYPE_I32: ((int32_t *)data)[k] = (int32_t)d; break;
  case NPU_DTYPE_I64: ((int64_t *)data)[k] = (int64_t)d; break;
  case NPU_DTYPE_I8: ((int8_t *)data)[k] = (int8_t)d; break;
  case NPU_DTYPE_U8: ((uint8_t *)data)[k] = (uint8_t)d; break;
  case NPU_DTYPE_BOOL: ((uint8_t *)data)[k] = d != 0; break;
  default:
    snprintf(err, err_size, "inputs of dtype %s cannot be given in JSON here", npu_dtype_name(dt));
    return -1;
  }
  return 0;
}

/* Fills data (row-major) from v, checking every level against shape. */
static int fill(const cJSON *v, int level, int nd, const int64_t *shape, void *data, npu_dtype dt,
                int64_t *k, char *err, size_t err_size) {
  if (level == nd) {
    if (cJSON_IsArray(v)) {
      snprintf(err, err_size, "ragged value: an array where a scalar was expected at depth %d", level);
      return -1;
    }
    return store(data, dt, (*k)++, v, err, err_size);
  }
  if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != shape[level]) {
    snprintf(err, err_size, "ragged value: dimension %d is not %lld everywhere", level,
             (long long)shape[level]);
    return -1;
  }
  const cJSON *e;
  cJSON_ArrayForEach(e, v) if (fill(e, level + 1, nd, shape, data, dt, k, err, err_size)) return -1;
  return 0;
}

int sv_buffer_from_json(sv_buffer *b, const cJSON *v, npu_dtype dt, char *err, size_t err_size) {
  memset(b, 0, sizeof *b);
  b->dtype = dt;
  b->ndim = json_shape(v, b->shape, err, err_size);
  if (b->ndim < 0) return -1;
  int64_t n = 1;
  for (int i = 0; i < b->ndim; i++) n *= b->shape[i];
  size_t es = npu_dtype_size(dt);
  b->nbytes = (size_t)n * es;
  b->data = malloc(b->nbytes ? b->nbytes : 1);
  if (!b->data) {
    snprintf(err, err_size, "out of memory");
    return -1;
  }
  int64_t k = 0;
  if (fill(v, 0, b->ndim, b->shape, b->data, dt, &k, err, err_size)) {
    sv_buffer_free(b);
    return -1;
  }
  return 0;
}

/* Stacks n buffers of one shape into one with a new leading dim (row-format instances). */
int sv_buffer_stack(sv_buffer *out, sv_buffer *parts, int n, char *err, size_t err_size) {
  memset(out, 0, sizeof *out);
  if (n < 1) {
    snprintf(err, err_size, "no instances");
    return -1;
  }
  if (parts[0].ndim + 1 > NPU_MAX_DIMS) {
    snprintf(err, err_size, "more than %d dimensions", NPU_MAX_DIMS);
    return -1;
  }
  for (int i = 1; i < n; i++)
    if (parts[i].ndim != parts[0].ndim ||
        memcmp(parts[i].shape, parts[0].shape, sizeof(int64_t) * (size_t)parts[0].ndim) != 0) {
      snprintf(err, err_size, "the shape of each instance must be the same: instance %d differs from "
               "instance 0", i);
      return -1;
    }
  out->dtype = parts[0].dtype;
  out->ndim = parts[0].ndim + 1;
  out->shape[0] = n;
  memcpy(out->shape + 1, parts[0].shape, sizeof(int64_t) * (size_t)parts[0].ndim);
  out->nbytes = parts[0].nbytes * (size_t)n;
  out->data = malloc(out->nbytes ? out->nbytes : 1);
  if (!out->data) {
    snprintf(err, err_size, "out of memory");
    return -1;
  }
  for (int i = 0; i < n; i++) memcpy((char *)out->data + parts[0].nbytes * (size_t)i, parts[i].data, parts[0].nbytes);
  return 0;
}

void sv_buffer_free(sv_buffer *b) {
  free(b->data);
  b->data = NULL;
}

/* ---- buffer -> JSON text ------------------------------------------------------------------ */

void sb_putn(sv_strbuf *s, const char *p, size_t n) {
  if (s->failed) return;
  if (s->n + n + 1 > s->cap) {
    size_t cap = s->cap ? s->cap : 256;
    while (cap < s->n + n + 1) cap *= 2;
    char *q = realloc(s->buf, cap);
    if (!q) {
      s->failed = true;
      return;
    }
    s->buf = q, s->cap = cap;
  }
  memcpy(s->buf + s->n, p, n);
  s->n += n;
  s->buf[s->n] = 0;
}

void sb_puts(sv_strbuf *s, const char *p) { sb_putn(s, p, strlen(p)); }

void sb_printf(sv_strbuf *s, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof tmp) {
    sb_putn(s, tmp, (size_t)n);
    return;
  }
  char *big = malloc((size_t)n + 1);
  if (!big) {
    s->failed = true;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  sb_putn(s, big, (size_t)n);
  free(big);
}

/* A JSON string literal. */
void sb_json_string(sv_strbuf *s, const char *str) {
  sb_putn(s, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)str; *p; p++) {
    if (*p == '"' || *p == '\\') {
      char e[2] = {'\\', (char)*p};
      sb_putn(s, e, 2);
    } else if (*p < 0x20) {
      sb_printf(s, "\\u%04x", *p);
    } else {
      sb_putn(s, (const char *)p, 1);
    }
  }
  sb_putn(s, "\"", 1);
}

static void put_float(sv_strbuf *s, double v, bool single) {
  if (isnan(v)) return sb_puts(s, "NaN");
  if (isinf(v)) return sb_puts(s, v > 0 ? "Infinity" : "-Infinity");
  char tmp[40];
  for (int prec = single ? 6 : 15; prec <= 17; prec++) { /* the shortest that reads back */
    snprintf(tmp, sizeof tmp, "%.*g", prec, v);
    double back = strtod(tmp, NULL);
    if (single ? (float)back == (float)v : back == v) break;
  }
  sb_puts(s, tmp);
}

static void put_element(sv_strbuf *s, const void *data, npu_dtype dt, int64_t k) {
  switch (dt) {
  case NPU_DTYPE_F32: put_float(s, ((const float *)data)[k], true); break;
  case NPU_DTYPE_F64: put_float(s, ((const double *)data)[k], false); break;
  case NPU_DTYPE_I32: sb_printf(s, "%d", ((const int32_t *)data)[k]); break;
  case NPU_DTYPE_I64: sb_printf(s, "%lld", (long long)((const int64_t *)data)[k]); break;
  case NPU_DTYPE_I8: sb_printf(s, "%d", ((const int8_t *)data)[k]); break;
  case NPU_DTYPE_U8: sb_printf(s, "%u", ((const uint8_t *)data)[k]); break;
  case NPU_DTYPE_BOOL: sb_puts(s, ((const uint8_t *)data)[k] ? "true" : "false"); break;
  default: sb_puts(s, "null"); break;
  }
}

static void put_level(sv_strbuf *s, const sv_buffer *b, int level, int64_t *k) {
  if (level == b->ndim) return put_element(s, b->data, b->dtype, (*k)++);
  sb_putn(s, "[", 1);
  for (int64_t i = 0; i < b->shape[level]; i++) {
    if (i) sb_putn(s, ", ", 2);
    put_level(s, b, level + 1, k);
  }
  sb_putn(s, "]", 1);
}

/* The whole buffer as nested arrays; or only row `row` (its dim 0 dropped) when row >= 0. */
void sb_put_buffer(sv_strbuf *s, const sv_buffer *b, int64_t row) {
  if (row < 0) {
    int64_t k = 0;
    return put_level(s, b, 0, &k);
  }
  int64_t per_row = 1;
  for (int i = 1; i < b->ndim; i++) per_row *= b->shape[i];
  int64_t k = row * per_row;
  put_level(s, b, 1, &k);
}
