/*
 * safetensors.c — checkpoints in the safetensors format (what Python's `safetensors` and
 * Hugging Face tools read and write), as npu.h's "checkpoints" section specifies.
 *
 * Layout: u64 little-endian N; N bytes of JSON (padded with spaces to a multiple of 8, as
 * Python writes it); then the data, every tensor's bytes at [begin, end) relative to the
 * byte after the header.  The data region must be covered exactly: sorted by begin, the
 * first tensor starts at 0, each starts where the previous ended, the last ends at the end of
 * the file — which is what "in range, non-overlapping and covering the buffer" means, and
 * what Python's loader checks.  Element data is little-endian; this library (like NumPy files
 * it writes) assumes a little-endian host.
 *
 * The JSON goes through cJSON (its own malloc: the header is transient); tensors, names and
 * the result come from the context allocator.  Failing calls leave nothing allocated.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/npu_int.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

#define HEADER_MAX (100u << 20) /* Python's safetensors refuses larger headers too */

static const char *const st_dtype_names[NPU_DTYPE_COUNT] = {
    [NPU_DTYPE_F32] = "F32", [NPU_DTYPE_F16] = "F16", [NPU_DTYPE_BF16] = "BF16",
    [NPU_DTYPE_F64] = "F64", [NPU_DTYPE_I8] = "I8",   [NPU_DTYPE_U8] = "U8",
    [NPU_DTYPE_I32] = "I32", [NPU_DTYPE_I64] = "I64", [NPU_DTYPE_BOOL] = "BOOL"};

/* dtypes of the format this library has no type for. */
static const char *const st_other_dtypes[] = {"I16", "U16", "U32", "U64", "F8_E4M3",
                                              "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3",
                                              "F6_E3M2", "C64"};

struct npu_safetensors {
  npu_context *ctx; /* retained */
  int n;
  char **names;
  npu_tensor **tensors;
  char *metadata; /* JSON text or NULL */
};

/* ==================================================================== save */

static bool metadata_ok(const cJSON *m) {
  if (!cJSON_IsObject(m)) return false;
  for (const cJSON *e = m->child; e; e = e->next)
    if (!cJSON_IsString(e)) return false;
  return true;
}

/* The header: JSON text (cJSON's malloc), padded later.  NULL on out of memory. */
static char *make_header(int n, const char *const *names, npu_tensor *const *tensors,
                         cJSON *metadata) {
  cJSON *root = cJSON_CreateObject();
  if (!root) return NULL;
  if (metadata) cJSON_AddItemToObject(root, "__metadata__", metadata);
  size_t offset = 0;
  bool ok = true;
  for (int i = 0; ok && i < n; i++) {
    const npu_tensor *t = tensors[i];
    cJSON *e = cJSON_CreateObject(), *shape = cJSON_CreateArray(),
          *offs = cJSON_CreateArray();
    ok = e && shape && offs;
    for (int d = 0; ok && d < t->ndim; d++)
      ok = cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
    ok = ok && cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)offset)) &&
         cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(offset + t->nbytes)));
    ok = ok && cJSON_AddStringToObject(e, "dtype", st_dtype_names[t->dtype]) &&
         cJSON_AddItemToObject(e, "shape", shape) && (shape = NULL, true) &&
         cJSON_AddItemToObject(e, "data_offsets", offs) && (offs = NULL, true) &&
         cJSON_AddItemToObject(root, names[i], e) && (e = NULL, true);
    cJSON_Delete(e);
    cJSON_Delete(shape);
    cJSON_Delete(offs);
    offset += t->nbytes;
  }
  char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  return text;
}

npu_status npu_safetensors_save(npu_context *ctx, const char *path, int n,
                                const char *const *names, npu_tensor *const *tensors,
                                const char *metadata_json) {
  static const char fn[] = "npu_safetensors_save";
  if (!ctx) return NPU_ERR_ARG;
  if (!path || n < 0 || (n > 0 && (!names || !tensors)))
    return npuC_error(ctx, NPU_ERR_ARG, "%s: bad arguments (path, count, names, tensors)", fn);
  for (int i = 0; i < n; i++) {
    if (!names[i] || !*names[i] || strcmp(names[i], "__metadata__") == 0)
      return npuC_error(ctx, NPU_ERR_ARG, "%s: name %d is %s", fn, i,
                        !names[i] ? "NULL" : *names[i] ? "the reserved '__metadata__'" : "empty");
    if (!tensors[i]) return npuC_error(ctx, NPU_ERR_ARG, "%s: tensor '%s' is NULL", fn, names[i]);
    for (int k = 0; k < i; k++)
      if (strcmp(names[k], names[i]) == 0)
        return npuC_error(ctx, NPU_ERR_ARG, "%s: name '%s' is given twice", fn, names[i]);
  }
  cJSON *metadata = NULL;
  if (metadata_json) {
    metadata = cJSON_Parse(metadata_json);
    if (!metadata_ok(metadata)) {
      cJSON_Delete(metadata);
      return npuC_error(ctx, NPU_ERR_ARG,
                        "%s: the metadata must be a JSON object of string values", fn);
    }
  }
  char *json = make_header(n, names, tensors, metadata); /* owns metadata from here */
  if (!json) return npuC_error(ctx, NPU_ERR_NOMEM, "%s: out of memory building the header", fn);
  size_t len = strlen(json), padded = (len + 7) / 8 * 8;
  unsigned char prefix[8];
  for (int b = 0; b < 8; b++) prefix[b] = (unsigned char)((uint64_t)padded >> (8 * b));

  FILE *f = fopen(path, "wb");
  if (!f) {
    int err = errno;
    free(json);
    return npuC_io_error(ctx, fn, path, err);
  }
  static const char spaces[8] = "        ";
  bool ok = fwrite(prefix, 1, 8, f) == 8 && fwrite(json, 1, len, f) == len &&
            fwrite(spaces, 1, padded - len, f) == padded - len;
  free(json);
  for (int i = 0; ok && i < n; i++)
    ok = fwrite(tensors[i]->data, 1, tensors[i]->nbytes, f) == tensors[i]->nbytes;
  int err = errno;
  if (fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    remove(path);
    return npuC_io_error(ctx, fn, path, err ? err : EIO);
  }
  return NPU_OK;
}

/* ==================================================================== load */

typedef struct entry {
  const char *name; /* in the cJSON tree */
  npu_dtype dtype;
  int ndim;
  int64_t shape[NPU_MAX_DIMS];
  uint64_t begin, end;
} entry;

static int by_begin(const void *a, const void *b) {
  const entry *x = a, *y = b;
  return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

static void st_free(npu_safetensors *st) {
  npu_context *ctx = st->ctx;
  for (int i = 0; i < st->n; i++) {
    if (st->names) npuC_free(ctx, st->names[i]);
    if (st->tensors) npu_tensor_release(st->tensors[i]);
  }
  npuC_free(ctx, st->names);
  npuC_free(ctx, st->tensors);
  npuC_free(ctx, st->metadata);
  npuC_free(ctx, st);
  npu_context_release(ctx);
}

/* A JSON number that is a non-negative integer (below 2^53, exact in a double). */
static bool get_uint(const cJSON *v, uint64_t *out) {
  if (!cJSON_IsNumber(v)) return false;
  double d = v->valuedouble;
  if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(uint64_t)d) return false;
  *out = (uint64_t)d;
  return true;
}

/* Parses one tensor's entry; the message names the file and the tensor. */
static npu_status parse_entry(npu_context *ctx, const char *path, const cJSON *e, entry *out) {
  static const char fn[] = "npu_safetensors_load";
  const char *name = e->string;
  out->name = name;
  if (!cJSON_IsObject(e))
    return npuC_error(ctx, NPU_ERR_FORMAT, "%s: '%s': tensor '%s': not a JSON object", fn, path,
                      name);
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
  const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
  if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of))
    return npuC_error(ctx, NPU_ERR_FORMAT,
                      "%s: '%s': tensor '%s': needs \"dtype\" (a string), \"shape\" and "
                      "\"data_offsets\" (arrays)", fn, path, name);
  out->dtype = NPU_DTYPE_COUNT;
  for (int t = 0; t < NPU_DTYPE_COUNT; t++)
    if (strcmp(dt->valuestring, st_dtype_names[t]) == 0) out->dtype = (npu_dtype)t;
  if (out->dtype == NPU_DTYPE_COUNT) {
    for (size_t k = 0; k < npu_countof(st_other_dtypes); k++)
      if (strcmp(dt->valuestring, st_other_dtypes[k]) == 0)
        return npuC_error(ctx, NPU_ERR_UNSUPPORTED,
                          "%s: '%s': tensor '%s': dtype %s is not supported here (supported: "
                          "F32 F16 BF16 F64 I8 U8 I32 I64 BOOL)", fn, path, name,
                          dt->valuestring);
    return npuC_error(ctx, NPU_ERR_FORMAT,
                      "%s: '%s': tensor '%s': unknown dtype \"%s\" (safetensors dtypes read "
                      "here: F32 F16 BF16 F64 I8 U8 I32 I64 BOOL)", fn, path, name,
                      dt->valuestring);
  }
  int nd = cJSON_GetArraySize(sh);
  if (nd > NPU_MAX_DIMS)
    return npuC_error(ctx, NPU_ERR_UNSUPPORTED, "%s: '%s': tensor '%s': %d dims (at most %d)",
                      fn, path, name, nd, NPU_MAX_DIMS);
  out->ndim = nd;
  int d = 0;
  for (const cJSON *v = sh->child; v; v = v->next, d++) {
    uint64_t x;
    if (!get_uint(v, &x) || x > (uint64_t)INT64_MAX)
      return npuC_error(ctx, NPU_ERR_FORMAT,
                        "%s: '%s': tensor '%s': shape entry %d is not a non-negative integer",
                        fn, path, name, d);
    out->shape[d] = (int64_t)x;
  }
  if (cJSON_GetArraySize(of) != 2 || !get_uint(of->child, &out->begin) ||
      !get_uint(of->child->next, &out->end) || out->begin > out->end)
    return npuC_error(ctx, NPU_ERR_FORMAT,
                      "%s: '%s': tensor '%s': data_offsets must be [begin, end] with "
                      "0 <= begin <= end", fn, path, name);
  int64_t numel = npuT_numel(out->ndim, out->shape);
  uint64_t size = out->end - out->begin;
  if (numel < 0 || (uint64_t)numel > UINT64_MAX / 8 ||
      (uint64_t)numel * npu_dtype_size(out->dtype) != size) {
    char sb[96];
    return npuC_error(ctx, NPU_ERR_FORMAT,
                      "%s: '%s': tensor '%s': %s %s needs %llu bytes but data_offsets [%llu, "
                      "%llu] hold %llu", fn, path, name, dt->valuestring,
                      npuC_shape_str(sb, sizeof sb, out->ndim, out->shape),
                      numel < 0 ? 0ull : (unsigned long long)numel * npu_dtype_size(out->dtype),
                      (unsigned long long)out->begin, (unsigned long long)out->end,
                      (unsigned long long)size);
  }
  return NPU_OK;
}

/* Reads the header (already positioned after the length) and builds st; the file's data
   region is data_size bytes. */
static npu_status load_body(npu_context *ctx, const char *path, FILE *f, uint64_t n_header,
                            uint64_t data_size, npu_safetensors *st) {
  static const char fn[] = "npu_safetensors_load";
  char *text = npuC_alloc(ctx, (size_t)n_header + 1);
  if (!text) return NPU_ERR_NOMEM;
  if (fread(text, 1, (size_t)n_header, f) != n_header) {
    npuC_free(ctx, text);
    return npuC_error(ctx, NPU_ERR_IO, "%s: '%s': cannot read the header", fn, path);
  }
  text[n_header] = 0;
  cJSON *root = cJSON_ParseWithLength(text, (size_t)n_header);
  npuC_free(ctx, text);
  if (!root || !cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return npuC_error(ctx, NPU_ERR_FORMAT,
                      "%s: '%s': the header is not a JSON object (corrupt or not a "
                      "safetensors file)", fn, path);
  }
  npu_status s = NPU_OK;
  int n = 0;
  for (const cJSON *e = root->child; e; e = e->next) n += strcmp(e->string, "__metadata__") != 0;
  entry *entries = npuC_calloc(ctx, n ? (size_t)n : 1, sizeof *entries);
  if (!entries) s = NPU_ERR_NOMEM;
  int k = 0;
  for (const cJSON *e = root->child; !s && e; e = e->next) {
    if (strcmp(e->string, "__metadata__") == 0) {
      if (!metadata_ok(e)) {
        s = npuC_error(ctx, NPU_ERR_FORMAT,
                       "%s: '%s': __metadata__ must be an object of string values", fn, path);
        break;
      }
      char *m = cJSON_PrintUnformatted(e);
      if (!m) {
        s = npuC_error(ctx, NPU_ERR_NOMEM, "%s: out of memory", fn);
        break;
      }
      npuC_free(ctx, st->metadata);
      st->metadata = npuC_strdup(ctx, m);
      free(m);
      if (!st->metadata) s = NPU_ERR_NOMEM;
      continue;
    }
    for (int j = 0; j < k; j++)
      if (strcmp(entries[j].name, e->string) == 0) {
        s = npuC_error(ctx, NPU_ERR_FORMAT, "%s: '%s': tensor '%s' appears twice", fn, path,
                       e->string);
        break;
      }
    if (!s) s = parse_entry(ctx, path, e, &entries[k++]);
  }
  if (!s) {
    qsort(entries, (size_t)n, sizeof *entries, by_begin);
    uint64_t at = 0;
    for (int i = 0; !s && i < n; i++) {
      if (entries[i].end > data_size)
        s = npuC_error(ctx, NPU_ERR_FORMAT,
                       "%s: '%s': tensor '%s': data_offsets [%llu, %llu] out of range (the "
                       "data region holds %llu bytes)", fn, path, entries[i].name,
                       (unsigned long long)entries[i].begin, (unsigned long long)entries[i].end,
                       (unsigned long long)data_size);
      else if (entries[i].begin != at)
        s = npuC_error(ctx, NPU_ERR_FORMAT,
                       "%s: '%s': tensor '%s': data_offsets [%llu, %llu] %s (expected to begin "
                       "at %llu)", fn, path, entries[i].name,
                       (unsigned long long)entries[i].begin, (unsigned long long)entries[i].end,
                       entries[i].begin < at ? "overlap another tensor" : "leave a gap",
                       (unsigned long long)at);
      at = entries[i].end;
    }
    if (!s && at != data_size)
      s = npuC_error(ctx, NPU_ERR_FORMAT,
                     "%s: '%s': the tensors cover %llu bytes of the %llu-byte data region",
                     fn, path, (unsigned long long)at, (unsigned long long)data_size);
  }
  if (!s) {
    st->names = npuC_calloc(ctx, n ? (size_t)n : 1, sizeof *st->names);
    st->tensors = npuC_calloc(ctx, n ? (size_t)n : 1, sizeof *st->tensors);
    if (!st->names || !st->tensors) s = NPU_ERR_NOMEM;
  }
  for (int i = 0; !s && i < n; i++) {
    st->n = i + 1;
    st->names[i] = npuC_strdup(ctx, entries[i].name);
    if (!st->names[i]) {
      s = NPU_ERR_NOMEM;
      break;
    }
    s = npu_tensor_new(ctx, entries[i].dtype, entries[i].ndim, entries[i].shape,
                       &st->tensors[i]);
    if (!s && st->tensors[i]->nbytes &&
        fread(st->tensors[i]->data, 1, st->tensors[i]->nbytes, f) != st->tensors[i]->nbytes)
      s = npuC_error(ctx, NPU_ERR_IO, "%s: '%s': cannot read tensor '%s'", fn, path,
                     entries[i].name);
    if (!s) npuT_canonical_bools(st->tensors[i]);
  }
  npuC_free(ctx, entries);
  cJSON_Delete(root);
  return s;
}

npu_status npu_safetensors_load(npu_context *ctx, const char *path, npu_safetensors **out) {
  static const char fn[] = "npu_safetensors_load";
  if (!out) return npuC_error(ctx, NPU_ERR_ARG, "%s: out is NULL", fn);
  *out = NULL;
  FILE *f;
  npu_status s = npuC_open_input(ctx, fn, path, &f);
  if (s) return s;
  long file_size = -1;
  if (fseek(f, 0, SEEK_END) == 0) file_size = ftell(f);
  if (file_size < 0 || fseek(f, 0, SEEK_SET) != 0) s = npuC_io_error(ctx, fn, path, errno);
  unsigned char prefix[8];
  uint64_t n_header = 0;
  if (!s && (file_size < 8 || fread(prefix, 1, 8, f) != 8))
    s = npuC_error(ctx, NPU_ERR_FORMAT, "%s: '%s': %ld bytes: too short for a safetensors file "
                   "(8-byte header length, then the header)", fn, path, file_size);
  if (!s) {
    for (int b = 7; b >= 0; b--) n_header = n_header << 8 | prefix[b];
    if (n_header < 2 || n_header > (uint64_t)file_size - 8 || n_header > HEADER_MAX)
      s = npuC_error(ctx, NPU_ERR_FORMAT,
                     "%s: '%s': header length %llu is impossible for a file of %ld bytes "
                     "(corrupt or not a safetensors file)", fn, path,
                     (unsigned long long)n_header, file_size);
  }
  npu_safetensors *st = NULL;
  if (!s) {
    st = npuC_calloc(ctx, 1, sizeof *st);
    if (!st) s = NPU_ERR_NOMEM;
    else st->ctx = npu_context_retain(ctx);
  }
  if (!s) s = load_body(ctx, path, f, n_header, (uint64_t)file_size - 8 - n_header, st);
  fclose(f);
  if (s) {
    if (st) st_free(st);
    return s;
  }
  *out = st;
  return NPU_OK;
}

int npu_safetensors_count(const npu_safetensors *st) { return st ? st->n : 0; }

const char *npu_safetensors_name(const npu_safetensors *st, int i) {
  return st && i >= 0 && i < st->n ? st->names[i] : NULL;
}

npu_tensor *npu_safetensors_tensor(const npu_safetensors *st, int i) {
  return st && i >= 0 && i < st->n ? st->tensors[i] : NULL;
}

int npu_safetensors_find(const npu_safetensors *st, const char *name) {
  if (!st || !name) return -1;
  for (int i = 0; i < st->n; i++)
    if (strcmp(st->names[i], name) == 0) return i;
  return -1;
}

const char *npu_safetensors_metadata(const npu_safetensors *st) {
  return st ? st->metadata : NULL;
}

void npu_safetensors_release(npu_safetensors *st) {
  if (st) st_free(st);
}
