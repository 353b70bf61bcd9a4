/*
 * file.c — reading a whole file through the context's allocator: model files, weight shards,
 * and the configuration files options name (fusion switches, mix lists, .ini files).  One
 * place, so every such error reads the same: "cannot open <what> '<path>': <reason>".
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/npu_int.h"

/* what NULL: a quiet try (NPU_ERR_IO without a message), for files that may well be absent. */
#define FAIL(...) (what ? npuC_error(ctx, NPU_ERR_IO, __VA_ARGS__) : NPU_ERR_IO)

npu_status npuC_read_file(npu_context *ctx, const char *path, const char *what, char **out,
                          size_t *len) {
  *out = NULL;
  if (len) *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f)
    return FAIL("cannot open %s '%s': %s", what, path, strerror(errno));
  long size = -1;
  if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
  if (size < 0 || fseek(f, 0, SEEK_SET) != 0) { /* a directory, a pipe */
    int err = errno;
    fclose(f);
    return FAIL("cannot read %s '%s': %s", what, path, err ? strerror(err) : "not a regular file");
  }
  char *buf = npuC_alloc(ctx, (size_t)size + 1);
  if (!buf) {
    fclose(f);
    return NPU_ERR_NOMEM;
  }
  size_t got = size ? fread(buf, 1, (size_t)size, f) : 0;
  int err = ferror(f) ? errno : 0;
  fclose(f);
  if (got != (size_t)size) {
    npuC_free(ctx, buf);
    return FAIL("cannot read %s '%s': %s", what, path, err ? strerror(err) : "short read");
  }
  buf[size] = 0;
  *out = buf;
  if (len) *len = (size_t)size;
  return NPU_OK;
}
