/*
 * external_weight.c — external_weight (000): a session's constants live in files, read through
 * read-only mappings.
 *
 * Right after a plan compiles (session.c: compile_plan), every constant it holds of at least
 * NPUP_EXTERNAL_MIN_BYTES — the graph's Const values and the constants the compiler made
 * (folded values, float16-rounded weights under force_fp16, batch-norm-folded filters) — is
 * written once to <dir>/weight_<hash> and replaced, in the plan's slot and for a Const node in
 * the graph itself, by a tensor over a read-only MAP_SHARED mapping of that file
 * (npuT_map_file).  <dir> is <out>/tmp_weight_<pid>_<session>, <out> being $ASCEND_WORK_PATH,
 * else ./npu_out (npuO_output_dir; made when missing), made at the first file and the session's
 * alone: session ids count per context, so two contexts of a process (or a directory left by
 * a crashed process of the same pid) may want the same name; then the session makes
 * <dir>_1, <dir>_2, ... (npuC_make_unique_dir).  Files are created exclusively (O_EXCL,
 * O_NOFOLLOW): a session never truncates a file another one has mapped, nor follows a link.
 *
 * The hash (64 bits, the mix below) covers dtype, shape and bytes; a file is reused only when
 * dtype, shape and bytes are equal (a hash collision gets weight_<hash>_<k>), so identical
 * constants of the session's plans share one file and one mapping: the "reuse" of 000.
 *
 * Why the graph's Const tensors are replaced too: a plan retains the Const tensors it reads
 * (plan.c), so as long as the graph holds the in-memory copy nothing drops.  Replacing the
 * node's value is safe: the content is identical, other sessions' plans retain the old tensor
 * (it is freed with its last holder), and a mapping outlives the unlinked file, so the graph
 * stays valid after this session closes.  A constant already file-backed (by an earlier plan
 * or session) is left as it is.  Smaller constants stay in memory: a mapping costs a whole
 * page (4 KiB) and a header, more than it saves.
 *
 * When the session closes (npuP_weights_free) the files are unlinked and the directory
 * removed; mappings held by tensors (the graph, fetched results) stay valid until released.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compile/compile.h"
#include "options/options_int.h"

typedef struct weight_file {
  uint64_t hash;
  int suffix;         /* 0: weight_<hash>; k > 0: weight_<hash>_<k> (a collision) */
  npu_tensor *tensor; /* its mapping (retained) */
} weight_file;

struct npuP_weights {
  char *want; /* the directory's name, before a suffix */
  char *dir;  /* the directory made (want, or want_<k>), when made */
  size_t dir_size;
  bool made;  /* dir exists (made at the first file) */
  weight_file *files;
  int n_files, cap_files;
};

npu_status npuP_weights_new(npu_context *ctx, const npu_options *o, int session_id,
                            npuP_weights **out) {
  *out = NULL;
  /* 000: with compile_hybrid_mode 1, "if weight externalization ... is not enabled via
     external_weight, the system automatically enables this function to share weight files":
     the profiles' plans and the dynamic-shape plan then share one mapping per constant */
  if (!npuO_bool(o, NPUO_external_weight) && npuO_int(o, NPUO_compile_hybrid_mode) != 1)
    return NPU_OK;
  const char *base = npuO_output_dir(o, NULL);
  char name[64];
  snprintf(name, sizeof name, "tmp_weight_%ld_%d", (long)getpid(), session_id);
  size_t n = strlen(base) + strlen(name) + 2;
  size_t dir_size = n + 16; /* room for "_<k>" */
  npuP_weights *w = npuC_calloc(ctx, 1, sizeof *w);
  char *want = w ? npuC_alloc(ctx, n) : NULL;
  char *dir = want ? npuC_calloc(ctx, dir_size, 1) : NULL;
  if (!dir) {
    npuC_free(ctx, want);
    npuC_free(ctx, w);
    return NPU_ERR_NOMEM;
  }
  snprintf(want, n, "%s/%s", base, name);
  w->want = want;
  w->dir = dir;
  w->dir_size = dir_size;
  *out = w;
  return NPU_OK;
}

static void file_path(const npuP_weights *w, const weight_file *f, char *buf, size_t size) {
  if (f->suffix)
    snprintf(buf, size, "%s/weight_%016llx_%d", w->dir, (unsigned long long)f->hash, f->suffix);
  else
    snprintf(buf, size, "%s/weight_%016llx", w->dir, (unsigned long long)f->hash);
}

void npuP_weights_free(npu_context *ctx, npuP_weights *w) {
  if (!w) return;
  char path[4200];
  for (int i = 0; i < w->n_files; i++) {
    file_path(w, &w->files[i], path, sizeof path);
    unlink(path);
    npu_tensor_release(w->files[i].tensor);
  }
  if (w->made) rmdir(w->dir); /* fails, harmlessly, when someone else put files there */
  npuC_free(ctx, w->files);
  npuC_free(ctx, w->dir);
  npuC_free(ctx, w->want);
  npuC_free(ctx, w);
}

static uint64_t mix(uint64_t h, uint64_t x) {
  h ^= x;
  h *= 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 29);
}

/* dtype, shape and bytes: 8 bytes at a time, then the tail, then a final avalanche. */
static uint64_t weight_hash(const npu_tensor *t) {
  uint64_t h = mix(0x6A09E667F3BCC908ull, (uint64_t)t->dtype);
  h = mix(h, (uint64_t)t->ndim);
  for (int i = 0; i < t->ndim; i++) h = mix(h, (uint64_t)t->shape[i]);
  const unsigned char *d = t->data;
  size_t n = t->nbytes, i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x;
    memcpy(&x, d + i, 8);
    h = mix(h, x);
  }
  uint64_t tail = 0;
  if (i < n) memcpy(&tail, d + i, n - i);
  h = mix(h, tail ^ ((uint64_t)n << 56));
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  return h ^ (h >> 33);
}

static bool same_weight(const npu_tensor *a, const npu_tensor *b) {
  return a->dtype == b->dtype && npuT_same_shape(a->ndim, a->shape, b->ndim, b->shape) &&
         memcmp(a->data, b->data, a->nbytes) == 0;
}

static npu_status write_all(int fd, const void *data, size_t n) {
  const char *p = data;
  while (n) {
    ssize_t k = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return NPU_ERR_IO;
    p += k;
    n -= (size_t)k;
  }
  return NPU_OK;
}

/* The file-backed twin of constant t (a new reference): the session's mapping of an equal
   weight, else a new file and its mapping. */
static npu_status map_weight(npuP_weights *w, npu_context *ctx, const npu_tensor *t,
                             npu_tensor **out) {
  *out = NULL;
  uint64_t hash = weight_hash(t);
  int suffix = 0;
  for (int i = 0; i < w->n_files; i++) {
    if (w->files[i].hash != hash) continue;
    if (same_weight(w->files[i].tensor, t)) {
      *out = npu_tensor_retain(w->files[i].tensor);
      return NPU_OK;
    }
    suffix++;
  }
  if (w->n_files == w->cap_files) {
    int cap = w->cap_files ? 2 * w->cap_files : 16;
    weight_file *f = npuC_realloc(ctx, w->files, (size_t)cap * sizeof *f);
    if (!f) return NPU_ERR_NOMEM;
    w->files = f;
    w->cap_files = cap;
  }
  if (!w->made) {
    npu_status st = npuC_make_unique_dir(ctx, w->want, "external_weight", w->dir, w->dir_size);
    if (st) return st;
    w->made = true;
  }
  weight_file *f = &w->files[w->n_files];
  *f = (weight_file){.hash = hash, .suffix = suffix};
  char path[4200];
  file_path(w, f, path, sizeof path);
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0)
    return npuC_error(ctx, NPU_ERR_IO, "external_weight: cannot write '%s': %s", path,
                      strerror(errno));
  npu_status st = write_all(fd, t->data, t->nbytes);
  if (st) {
    int err = errno;
    close(fd);
    unlink(path);
    return npuC_error(ctx, NPU_ERR_IO, "external_weight: cannot write '%s': %s", path,
                      err ? strerror(err) : "short write");
  }
  st = npuT_map_file(ctx, t->dtype, t->ndim, t->shape, fd, path, &f->tensor);
  close(fd);
  if (st) {
    unlink(path);
    return st;
  }
  w->n_files++;
  *out = npu_tensor_retain(f->tensor);
  return NPU_OK;
}

/* The Const node whose value tensor is slot v's, or NULL. */
static npuG_attr *const_attr(npu_graph *g, const npuE_plan *p, int v) {
  int id = p->values[v].node;
  if (id < 0 || id >= g->n_nodes) return NULL;
  npuG_node *node = &g->nodes[id];
  if (npuX_op(node->op)->kind != NPUX_KIND_CONST || node->first_output != v) return NULL;
  npuG_attr *a = (npuG_attr *)npuG_attr_find(node, "value");
  return a && a->type == NPU_ATTR_TENSOR && a->u.tensor == p->slots[v] ? a : NULL;
}

npu_status npuP_weights_externalize(npuP_weights *w, npu_graph *g, npuE_plan *p) {
  if (!w) return NPU_OK;
  npu_context *ctx = g->ctx;
  /* what is left with a tensor bound at compile time once the steps' outputs are set aside
     (arena views): constants and folded values (explain.c classifies them the same way) */
  uint8_t *written = npuC_calloc(ctx, (size_t)(p->n_values ? p->n_values : 1), 1);
  if (!written) return NPU_ERR_NOMEM;
  for (int k = 0; k < p->n_steps; k++)
    for (int i = 0; i < p->steps[k].n_out; i++) written[p->steps[k].out[i]] = 1;
  npu_status st = NPU_OK;
  for (int v = 0; v < p->n_values && !st; v++) {
    npu_tensor *t = p->slots[v];
    if (!t || written[v] || t->mapped_bytes || t->nbytes < NPUP_EXTERNAL_MIN_BYTES) continue;
    npu_tensor *m;
    if ((st = map_weight(w, ctx, t, &m))) break;
    npuG_attr *a = const_attr(g, p, v);
    if (a) { /* the graph holds the file-backed twin from now on */
      a->u.tensor = npu_tensor_retain(m);
      npu_tensor_release(t); /* the graph's reference; the plan's keeps t alive below */
    }
    /* every slot of the plan holding t (a value may be bound in more than one) */
    bool owned = p->owned[v];
    for (int u = v + 1; u < p->n_values; u++) {
      if (p->slots[u] != t || written[u]) continue;
      npuG_attr *b = const_attr(g, p, u); /* two Const nodes sharing one tensor */
      if (b) {
        b->u.tensor = npu_tensor_retain(m);
        npu_tensor_release(t);
      }
      if (p->owned[u]) npu_tensor_release(t);
      p->slots[u] = npu_tensor_retain(m);
      p->owned[u] = 1;
    }
    if (owned) npu_tensor_release(t);
    p->slots[v] = m;
    p->owned[v] = 1;
  }
  npuC_free(ctx, written);
  return st;
}
