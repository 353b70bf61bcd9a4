/*
 * file.c — reading a whole file through the context's allocator: model files, weight shards,
 * and the configuration files options name (fusion switches, mix lists, .ini files).  One
 * place, so every such error reads the same: "cannot open <what> '<path>': <reason>".  And
 * making the directories that files written (fusion results, dumps, profiles) go into.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/npu_int.h"

/* what NULL: a quiet try (NPU_ERR_IO without a message), for files that may well be absent. */
#define FAIL(...) (what ? npuC_error(ctx, NPU_ERR_IO, __VA_ARGS__) : NPU_ERR_IO)

FILE *npuC_fopen_regular(const char *path, const char **why) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *why = strerror(errno);
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    *why = strerror(errno);
    close(fd);
    return NULL;
  }
  if (!S_ISREG(st.st_mode)) {
    *why = S_ISDIR(st.st_mode) ? "a directory, not a file" : "not a regular file";
    close(fd);
    return NULL;
  }
  /* regular files ignore O_NONBLOCK: nothing to clear */
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    *why = strerror(errno);
    close(fd);
  }
  return f;
}

npu_status npuC_open_input(npu_context *ctx, const char *fn, const char *path, FILE **f) {
  *f = NULL;
  if (!ctx) return NPU_ERR_ARG;
  if (!path) return npuC_error(ctx, NPU_ERR_ARG, "%s: path is NULL", fn);
  const char *why;
  *f = npuC_fopen_regular(path, &why);
  if (!*f) return npuC_error(ctx, NPU_ERR_IO, "%s: '%s': %s", fn, path, why);
  return NPU_OK;
}

npu_status npuC_io_error(npu_context *ctx, const char *fn, const char *path, int err) {
  return npuC_error(ctx, NPU_ERR_IO, "%s: '%s': %s", fn, path, strerror(err));
}

npu_status npuC_read_file(npu_context *ctx, const char *path, const char *what, char **out,
                          size_t *len) {
  *out = NULL;
  if (len) *len = 0;
  const char *why;
  FILE *f = npuC_fopen_regular(path, &why);
  if (!f)
    return FAIL("cannot open %s '%s': %s", what, path, why);
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

npu_status npuC_make_dirs(npu_context *ctx, const char *dir, const char *what) {
  char buf[4096];
  if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
    return npuC_error(ctx, NPU_ERR_IO, "%s: path '%s' is too long", what, dir);
  for (char *p = buf + 1;; p++) {
    bool last = *p == 0;
    if (*p != '/' && !last) continue;
    *p = 0;
    if (mkdir(buf, 0777) != 0) {
      struct stat st;
      if (errno != EEXIST)
        return npuC_error(ctx, NPU_ERR_IO, "%s: cannot create directory '%s': %s", what, buf,
                          strerror(errno));
      /* (a file further up fails the next mkdir: ENOTDIR, named above) */
      if (last && (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)))
        return npuC_error(ctx, NPU_ERR_IO, "%s: '%s' exists and is not a directory", what, buf);
    }
    if (last) return NPU_OK;
    *p = '/';
  }
}

npu_status npuC_make_parent_dirs(npu_context *ctx, const char *path, const char *what) {
  char dir[4096];
  if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
    return npuC_error(ctx, NPU_ERR_IO, "%s: path '%s' is too long", what, path);
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) return NPU_OK; /* the working directory, or / */
  *slash = 0;
  return npuC_make_dirs(ctx, dir, what);
}

void npuC_csv_field(FILE *f, const char *s) {
  if (!strpbrk(s, ",\"\r\n")) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

npu_status npuC_make_unique_dir(npu_context *ctx, const char *path, const char *what, char *out,
                                size_t size) {
  npu_status s = npuC_make_parent_dirs(ctx, path, what);
  if (s) return s;
  for (int n = 0; n < 10000; n++) {
    int len = n ? snprintf(out, size, "%s_%d", path, n) : snprintf(out, size, "%s", path);
    if (len < 0 || (size_t)len >= size) {
      if (size) out[0] = 0;
      return npuC_error(ctx, NPU_ERR_IO, "%s: path '%s' is too long", what, path);
    }
    if (mkdir(out, 0777) == 0) return NPU_OK;
    if (errno != EEXIST) break;
  }
  return npuC_error(ctx, NPU_ERR_IO, "%s: cannot create directory '%s': %s", what, out,
                    strerror(errno));
}
