/*
 * serve.h — what npu-serve's files share: host tensors (sv_buffer: the HTTP threads hold no
 * npu_context, so requests carry plain buffers and workers make tensors), a string builder,
 * and the JSON conversions of tensor_json.c.
 */
#ifndef NPU_SERVE_H
#define NPU_SERVE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "include/npu.h"

typedef struct sv_buffer {
  npu_dtype dtype;
  int ndim;
  int64_t shape[NPU_MAX_DIMS];
  void *data; /* malloc'd, row-major */
  size_t nbytes;
} sv_buffer;

typedef struct sv_strbuf {
  char *buf;
  size_t n, cap;
  bool failed;
} sv_strbuf;

int sv_buffer_from_json(sv_buffer *b, const cJSON *v, npu_dtype dt, char *err, size_t err_size);
int sv_buffer_stack(sv_buffer *out, sv_buffer *parts, int n, char *err, size_t err_size);
void sv_buffer_free(sv_buffer *b);

void sb_putn(sv_strbuf *s, const char *p, size_t n);
void sb_puts(sv_strbuf *s, const char *p);
void sb_printf(sv_strbuf *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_json_string(sv_strbuf *s, const char *str);
void sb_put_buffer(sv_strbuf *s, const sv_buffer *b, int64_t row);

#endif
