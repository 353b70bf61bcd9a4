/*
 * dataset.c — datasets (immutable pipeline descriptions) and their iterators (a producer
 * thread filling a bounded queue), as npu.h's "datasets" section specifies.
 *
 * Producer/consumer protocol.  An iterator owns capacity + 1 element buffers ("slots": one
 * tensor per component, each of the element's largest shape), all allocated in
 * npu_iterator_new on the caller's thread, together with every stage's state.  The producer
 * thread therefore allocates nothing and never touches the context (whose message slot and
 * test counters belong to the consumer's thread): it only moves source row indices through
 * the stages and gathers rows into a free slot's buffers.  Its errors (a batch of elements of
 * different shapes) go to the iterator's own message, copied into the context by
 * npu_iterator_next.
 *
 * A slot is in exactly one of four places: the free stack (the producer may take it), the
 * producer's hands, the filled queue (FIFO; only the consumer reads it), or lent (its tensors
 * handed to the caller by the last next).  The free stack, the filled queue and the flags are
 * guarded by `mu`; buffers are written by the producer only while in its hands, and read by
 * the consumer only after it saw them in the queue under `mu` — so every access to a buffer
 * is ordered by the mutex.  A lent slot comes back at the next call: reused when the caller
 * has released its tensors (refcount 1: nobody else can reach them; the atomic decrement of
 * the caller's release orders its reads before our reuse), else given fresh tensors
 * allocated there, on the consumer's thread.
 *
 * Shutdown: release sets `stop` under mu and broadcasts; the producer checks it before taking
 * each slot (where it blocks when the queue is full) and exits; release joins it.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "exec/dataset.h"

/* The producer's queue when no prefetch says otherwise (and prefetch's AUTOTUNE): sized by
   bytes when the iterator starts (NPUE_DS_AUTO_*, see npu_iterator_new); deep enough that a
   device loop takes many elements per producer wake-up (see low_water). */
#define NPUE_DS_DEFAULT_QUEUE 16
#define NPUE_DS_AUTO_BYTES ((size_t)4 << 20)
#define NPUE_DS_AUTO_MAX 1024


_Static_assert(NPUE_DS_MAX_COMPONENTS <= 16, "components are staged in arrays of 16");

/* ==================================================================== descriptions */

static npu_status ds_alloc(npu_context *ctx, const npu_dataset *in, npuE_ds_kind kind,
                           int n_components, npu_dataset **out) {
  npu_dataset *ds = npuC_calloc(ctx, 1, sizeof *ds);
  if (!ds) return NPU_ERR_NOMEM;
  ds->spec = npuC_calloc(ctx, (size_t)n_components, sizeof *ds->spec);
  if (!ds->spec) {
    npuC_free(ctx, ds);
    return NPU_ERR_NOMEM;
  }
  atomic_init(&ds->refcount, 1);
  ds->ctx = npu_context_retain(ctx);
  ds->kind = kind;
  ds->n_components = n_components;
  ds->capacity = NPUE_DS_DEFAULT_QUEUE;
  ds->capacity_auto = true;
  if (in) {
    ds->input = npu_dataset_retain((npu_dataset *)in);
    ds->source = in->source;
    ds->depth = in->depth + 1;
    memcpy(ds->spec, in->spec, (size_t)n_components * sizeof *ds->spec);
    ds->n_batch = in->n_batch;
    memcpy(ds->max_batch, in->max_batch, sizeof ds->max_batch);
    ds->max_rows = in->max_rows;
    ds->cardinality = in->cardinality;
    ds->capacity = in->capacity;
    ds->capacity_auto = in->capacity_auto;
  }
  *out = ds;
  return NPU_OK;
}

npu_dataset *npu_dataset_retain(npu_dataset *ds) {
  if (ds) atomic_fetch_add(&ds->refcount, 1);
  return ds;
}

void npu_dataset_release(npu_dataset *ds) {
  while (ds && atomic_fetch_sub(&ds->refcount, 1) == 1) {
    npu_context *ctx = ds->ctx;
    npu_dataset *in = ds->input;
    if (ds->components) {
      for (int i = 0; i < ds->n_components; i++) npu_tensor_release(ds->components[i]);
      npuC_free(ctx, ds->components);
    }
    npuC_free(ctx, ds->spec);
    npuC_free(ctx, ds);
    npu_context_release(ctx);
    ds = in; /* iteratively: long chains need no deep recursion */
  }
}

npu_status npu_dataset_from_tensors(npu_context *ctx, int n_components,
                                    npu_tensor *const *components, npu_dataset **out) {
  static const char fn[] = "npu_dataset_from_tensors";
  if (!out) return npuC_error(ctx, NPU_ERR_ARG, "%s: out is NULL", fn);
  *out = NULL;
  if (!ctx) return NPU_ERR_ARG;
  if (n_components < 1 || n_components > NPUE_DS_MAX_COMPONENTS || !components)
    return npuC_error(ctx, NPU_ERR_ARG, "%s: need 1 to %d components, got %d", fn,
                      NPUE_DS_MAX_COMPONENTS, n_components);
  char sa[96], sb[96];
  for (int i = 0; i < n_components; i++) {
    const npu_tensor *t = components[i];
    if (!t) return npuC_error(ctx, NPU_ERR_ARG, "%s: component %d is NULL", fn, i);
    if (t->ndim < 1)
      return npuC_error(ctx, NPU_ERR_SHAPE,
                        "%s: component %d is a scalar: slicing needs a dim 0", fn, i);
    if (t->shape[0] != components[0]->shape[0])
      return npuC_error(ctx, NPU_ERR_SHAPE,
                        "%s: components must have the same dim 0: component 0 is %s, "
                        "component %d is %s", fn,
                        npuC_shape_str(sa, sizeof sa, components[0]->ndim, components[0]->shape),
                        i, npuC_shape_str(sb, sizeof sb, t->ndim, t->shape));
  }
  npu_dataset *ds;
  npu_status st = ds_alloc(ctx, NULL, NPUE_DS_SOURCE, n_components, &ds);
  if (st) return st;
  ds->components = npuC_calloc(ctx, (size_t)n_components, sizeof *ds->components);
  if (!ds->components) {
    npu_dataset_release(ds);
    return NPU_ERR_NOMEM;
  }
  ds->source = ds;
  ds->n_rows = components[0]->shape[0];
  ds->max_rows = 1;
  ds->cardinality = ds->n_rows;
  for (int i = 0; i < n_components; i++) {
    const npu_tensor *t = components[i];
    ds->components[i] = npu_tensor_retain(components[i]);
    ds->spec[i].dtype = t->dtype;
    ds->spec[i].ndim = t->ndim - 1;
    memcpy(ds->spec[i].shape, t->shape + 1, (size_t)(t->ndim - 1) * sizeof(int64_t));
  }
  *out = ds;
  return NPU_OK;
}

npu_status npu_dataset_shuffle(const npu_dataset *in, int64_t buffer_size, uint64_t seed,
                               int reshuffle_each_iteration, npu_dataset **out) {
  if (out) *out = NULL;
  if (!in) return NPU_ERR_ARG;
  if (!out) return npuC_error(in->ctx, NPU_ERR_ARG, "npu_dataset_shuffle: out is NULL");
  if (buffer_size < 1)
    return npuC_error(in->ctx, NPU_ERR_ARG,
                      "npu_dataset_shuffle: buffer_size must be >= 1, got %lld",
                      (long long)buffer_size);
  npu_dataset *ds;
  npu_status st = ds_alloc(in->ctx, in, NPUE_DS_SHUFFLE, in->n_components, &ds);
  if (st) return st;
  /* A buffer larger than everything the input yields behaves as one of that size. */
  if (in->cardinality >= 0 && buffer_size > in->cardinality)
    buffer_size = in->cardinality > 0 ? in->cardinality : 1;
  ds->n = buffer_size;
  ds->seed = seed;
  ds->flag = reshuffle_each_iteration != 0;
  *out = ds;
  return NPU_OK;
}

npu_status npu_dataset_batch(const npu_dataset *in, int64_t batch_size, int drop_remainder,
                             npu_dataset **out) {
  static const char fn[] = "npu_dataset_batch";
  if (out) *out = NULL;
  if (!in) return NPU_ERR_ARG;
  if (!out) return npuC_error(in->ctx, NPU_ERR_ARG, "%s: out is NULL", fn);
  if (batch_size < 1)
    return npuC_error(in->ctx, NPU_ERR_ARG, "%s: batch_size must be >= 1, got %lld", fn,
                      (long long)batch_size);
  for (int i = 0; i < in->n_components; i++)
    if (in->spec[i].ndim + 1 > NPU_MAX_DIMS)
      return npuC_error(in->ctx, NPU_ERR_SHAPE,
                        "%s: component %d would have %d dims (at most %d)", fn, i,
                        in->spec[i].ndim + 1, NPU_MAX_DIMS);
  if (batch_size > INT64_MAX / 16 / in->max_rows)
    return npuC_error(in->ctx, NPU_ERR_SHAPE, "%s: batch_size %lld is too large", fn,
                      (long long)batch_size);
  npu_dataset *ds;
  npu_status st = ds_alloc(in->ctx, in, NPUE_DS_BATCH, in->n_components, &ds);
  if (st) return st;
  ds->n = batch_size;
  ds->flag = drop_remainder != 0;
  for (int i = 0; i < ds->n_components; i++) {
    npuE_ds_spec *s = &ds->spec[i];
    memmove(s->shape + 1, s->shape, (size_t)s->ndim * sizeof(int64_t));
    s->shape[0] = ds->flag ? batch_size : -1;
    s->ndim++;
  }
  memmove(ds->max_batch + 1, ds->max_batch, (size_t)ds->n_batch * sizeof(int64_t));
  ds->max_batch[0] = batch_size;
  ds->n_batch++;
  ds->max_rows *= batch_size;
  if (in->cardinality >= 0)
    ds->cardinality = ds->flag ? in->cardinality / batch_size
                               : in->cardinality / batch_size + (in->cardinality % batch_size != 0);
  *out = ds;
  return NPU_OK;
}

npu_status npu_dataset_repeat(const npu_dataset *in, int64_t count, npu_dataset **out) {
  if (out) *out = NULL;
  if (!in) return NPU_ERR_ARG;
  if (!out) return npuC_error(in->ctx, NPU_ERR_ARG, "npu_dataset_repeat: out is NULL");
  if (count < -1)
    return npuC_error(in->ctx, NPU_ERR_ARG,
                      "npu_dataset_repeat: count must be >= 0 or -1 (forever), got %lld",
                      (long long)count);
  npu_dataset *ds;
  npu_status st = ds_alloc(in->ctx, in, NPUE_DS_REPEAT, in->n_components, &ds);
  if (st) return st;
  ds->n = count;
  int64_t c = in->cardinality;
  if (count == 0 || c == 0)
    ds->cardinality = 0;
  else if (count < 0 || c < 0 || c > INT64_MAX / count)
    ds->cardinality = -1;
  else
    ds->cardinality = c * count;
  *out = ds;
  return NPU_OK;
}

npu_status npu_dataset_prefetch(const npu_dataset *in, int64_t buffer_size, npu_dataset **out) {
  if (out) *out = NULL;
  if (!in) return NPU_ERR_ARG;
  if (!out) return npuC_error(in->ctx, NPU_ERR_ARG, "npu_dataset_prefetch: out is NULL");
  if (buffer_size < 1 && buffer_size != -1)
    return npuC_error(in->ctx, NPU_ERR_ARG,
                      "npu_dataset_prefetch: buffer_size must be >= 1 or -1 (AUTOTUNE), got %lld",
                      (long long)buffer_size);
  if (buffer_size > 1 << 20)
    return npuC_error(in->ctx, NPU_ERR_ARG,
                      "npu_dataset_prefetch: buffer_size %lld is too large (at most %d)",
                      (long long)buffer_size, 1 << 20);
  npu_dataset *ds;
  npu_status st = ds_alloc(in->ctx, in, NPUE_DS_PREFETCH, in->n_components, &ds);
  if (st) return st;
  ds->n = ds->capacity = buffer_size < 0 ? NPUE_DS_DEFAULT_QUEUE : buffer_size;
  ds->capacity_auto = buffer_size < 0;
  *out = ds;
  return NPU_OK;
}

npu_status npu_dataset_shard(const npu_dataset *in, int64_t num_shards, int64_t index,
                             npu_dataset **out) {
  static const char fn[] = "npu_dataset_shard";
  if (out) *out = NULL;
  if (!in) return NPU_ERR_ARG;
  if (!out) return npuC_error(in->ctx, NPU_ERR_ARG, "%s: out is NULL", fn);
  if (num_shards < 1)
    return npuC_error(in->ctx, NPU_ERR_ARG, "%s: num_shards must be >= 1, got %lld", fn,
                      (long long)num_shards);
  if (index < 0 || index >= num_shards)
    return npuC_error(in->ctx, NPU_ERR_ARG,
                      "%s: index must be in [0, num_shards): index %lld, num_shards %lld", fn,
                      (long long)index, (long long)num_shards);
  npu_dataset *ds;
  npu_status st = ds_alloc(in->ctx, in, NPUE_DS_SHARD, in->n_components, &ds);
  if (st) return st;
  ds->n = num_shards;
  ds->index = index;
  int64_t c = in->cardinality;
  if (c >= 0) ds->cardinality = c / num_shards + (index < c % num_shards);
  *out = ds;
  return NPU_OK;
}

int npu_dataset_n_components(const npu_dataset *ds) { return ds ? ds->n_components : 0; }

npu_dtype npu_dataset_dtype(const npu_dataset *ds, int i) {
  return ds && i >= 0 && i < ds->n_components ? ds->spec[i].dtype : NPU_DTYPE_COUNT;
}

int npu_dataset_ndim(const npu_dataset *ds, int i) {
  return ds && i >= 0 && i < ds->n_components ? ds->spec[i].ndim : -1;
}

const int64_t *npu_dataset_shape(const npu_dataset *ds, int i) {
  return ds && i >= 0 && i < ds->n_components ? ds->spec[i].shape : NULL;
}

int64_t npu_dataset_cardinality(const npu_dataset *ds) { return ds ? ds->cardinality : 0; }

/* ==================================================================== graphs */

static void release_dataset(void *ds) { npu_dataset_release(ds); }

npu_status npu_graph_add_dataset(npu_graph *g, npu_dataset *ds, int *dataset_id) {
  if (dataset_id) *dataset_id = -1;
  if (!g) return NPU_ERR_ARG;
  if (!ds || !dataset_id)
    return npuC_error(g->ctx, NPU_ERR_ARG, "npu_graph_add_dataset: %s is NULL",
                      ds ? "dataset_id" : "the dataset");
  npu_status st = npuG_check_growable(g, "a dataset");
  if (st) return st;
  void **list = npuC_realloc(g->ctx, g->datasets, (size_t)(g->n_datasets + 1) * sizeof *list);
  if (!list) return NPU_ERR_NOMEM;
  g->datasets = list;
  g->dataset_release = release_dataset;
  list[g->n_datasets] = npu_dataset_retain(ds);
  *dataset_id = g->n_datasets++;
  return NPU_OK;
}

npu_dataset *npu_graph_dataset(const npu_graph *g, int dataset_id) {
  return g && dataset_id >= 0 && dataset_id < g->n_datasets ? g->datasets[dataset_id] : NULL;
}

/* ==================================================================== iterators */

/* What flows between stages: source rows (row-major over the batch dims) and those dims. */
typedef struct elem {
  int64_t *rows;
  int64_t n;                    /* rows */
  int64_t dims[NPU_MAX_DIMS];   /* the stage's n_batch batch dims */
} elem;

typedef struct stage {
  const npu_dataset *ds;
  struct stage *input;
  elem out;          /* source, shuffle, batch: their output (rows: max_rows entries) */
  /* source */
  int64_t pos;
  /* shuffle: a buffer of `count` elements of the input, each max_rows(input) rows + dims */
  int64_t count;
  int64_t *buf_rows, *buf_dims;
  bool started, input_done;
  uint64_t epoch;
  npuC_rng rng;
  /* repeat */
  int64_t passes;
  bool produced, finished;
} stage;

typedef struct slot {
  npu_tensor *t[NPUE_DS_MAX_COMPONENTS]; /* the element's largest shape */
  int64_t n;                             /* rows filled */
  int64_t dims[NPU_MAX_DIMS];            /* batch dims filled */
} slot;

struct npu_iterator {
  npu_context *ctx;      /* retained; used on the consumer's thread only */
  npu_dataset *ds;       /* retained */
  int n_components;
  int n_stages;
  stage *stages;         /* source first; the producer's alone once started */
  int n_slots;           /* capacity + 1 */
  int64_t capacity;
  int64_t low_water;     /* the producer, once the queue is full, sleeps until it drains to
                            this: one wake-up per capacity/2 elements instead of one per
                            element, which is what a tight device loop pays for */
  slot *slots;
  int *free_stack;       /* n_slots */
  int *queue;            /* n_slots, a ring */
  int lent;              /* the slot whose tensors the last next handed out, or -1 */
  size_t row_bytes[NPUE_DS_MAX_COMPONENTS];
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mu;
  pthread_cond_t filled_cv, free_cv;
  /* guarded by mu */
  int n_free, q_head, q_count;
  bool stop, done;
  bool producer_waiting; /* asleep until the queue drains to low_water */
  npu_status error;      /* the producer's, sticky */
  /* written by the producer before it sets error (under mu), read after */
  char errmsg[NPU_ERRMSG_SIZE];
};

/* ---- the producer's side (runs on the producer thread) ---- */

static int stage_next(npu_iterator *it, stage *s, elem **out);

static int64_t dims_rows(int nb, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < nb; i++) n *= dims[i];
  return n;
}

static void stage_reset(stage *s) {
  for (; s; s = s->input) {
    switch (s->ds->kind) {
    case NPUE_DS_SOURCE: s->pos = 0; break;
    case NPUE_DS_SHUFFLE:
      s->count = 0;
      s->started = s->input_done = false;
      s->epoch++;
      break;
    case NPUE_DS_REPEAT:
      s->passes = 0;
      s->produced = false;
      s->finished = s->ds->n == 0;
      break;
    case NPUE_DS_SHARD: s->pos = 0; break;
    case NPUE_DS_BATCH:
    case NPUE_DS_PREFETCH: break;
    }
  }
}

/* Pulls one input element into buffer slot j; 1, 0 (input done) or -1. */
static int shuffle_pull(npu_iterator *it, stage *s, int64_t j) {
  elem *e;
  int r = stage_next(it, s->input, &e);
  if (r != 1) return r;
  const npu_dataset *in = s->ds->input;
  memcpy(s->buf_rows + j * in->max_rows, e->rows, (size_t)e->n * sizeof(int64_t));
  memcpy(s->buf_dims + j * in->n_batch, e->dims, (size_t)in->n_batch * sizeof(int64_t));
  return 1;
}

static int shuffle_next(npu_iterator *it, stage *s, elem **out) {
  const npu_dataset *ds = s->ds, *in = ds->input;
  int nb = in->n_batch;
  int64_t width = in->max_rows;
  if (!s->started) {
    s->started = true;
    npuC_rng_seed(&s->rng, ds->flag ? npuC_random_stream_seed(ds->seed, s->epoch) : ds->seed);
    while (s->count < ds->n) {
      int r = shuffle_pull(it, s, s->count);
      if (r < 0) return r;
      if (r == 0) {
        s->input_done = true;
        break;
      }
      s->count++;
    }
  }
  if (s->count == 0) return 0;
  int64_t j = (int64_t)(npuC_rng_next(&s->rng) % (uint64_t)s->count);
  memcpy(s->out.dims, s->buf_dims + j * nb, (size_t)nb * sizeof(int64_t));
  s->out.n = dims_rows(nb, s->out.dims);
  memcpy(s->out.rows, s->buf_rows + j * width, (size_t)s->out.n * sizeof(int64_t));
  int r = s->input_done ? 0 : shuffle_pull(it, s, j);
  if (r < 0) return r;
  if (r == 0) { /* no refill: the last buffered element takes slot j */
    s->input_done = true;
    int64_t last = --s->count;
    if (j != last) {
      memcpy(s->buf_dims + j * nb, s->buf_dims + last * nb, (size_t)nb * sizeof(int64_t));
      memcpy(s->buf_rows + j * width, s->buf_rows + last * width,
             (size_t)dims_rows(nb, s->buf_dims + j * nb) * sizeof(int64_t));
    }
  }
  *out = &s->out;
  return 1;
}

static int producer_error(npu_iterator *it, const char *msg) {
  snprintf(it->errmsg, sizeof it->errmsg, "%s", msg);
  return -1;
}

static int batch_next(npu_iterator *it, stage *s, elem **out) {
  const npu_dataset *ds = s->ds;
  int nb_in = ds->input->n_batch;
  int64_t k = 0, n_in = 0;
  while (k < ds->n) {
    elem *e;
    int r = stage_next(it, s->input, &e);
    if (r < 0) return r;
    if (r == 0) break;
    if (k == 0) {
      memcpy(s->out.dims + 1, e->dims, (size_t)nb_in * sizeof(int64_t));
      n_in = e->n;
    } else if (memcmp(s->out.dims + 1, e->dims, (size_t)nb_in * sizeof(int64_t)) != 0) {
      char sa[96], sb[96], msg[320];
      snprintf(msg, sizeof msg,
               "batch: cannot batch elements of different shapes: batch dims %s and %s (a "
               "partial inner batch: give the inner batch drop_remainder=true)",
               npuC_shape_str(sa, sizeof sa, nb_in, s->out.dims + 1),
               npuC_shape_str(sb, sizeof sb, nb_in, e->dims));
      return producer_error(it, msg);
    }
    memcpy(s->out.rows + k * n_in, e->rows, (size_t)n_in * sizeof(int64_t));
    k++;
  }
  if (k == 0 || (k < ds->n && ds->flag)) return 0;
  s->out.dims[0] = k;
  s->out.n = k * n_in;
  *out = &s->out;
  return 1;
}

/* The input's elements i with i % num_shards == index, passed through as they are. */
static int shard_next(npu_iterator *it, stage *s, elem **out) {
  for (;;) {
    int r = stage_next(it, s->input, out);
    if (r != 1) return r;
    if (s->pos++ % s->ds->n == s->ds->index) return 1;
  }
}

static int repeat_next(npu_iterator *it, stage *s, elem **out) {
  for (;;) {
    if (s->finished) return 0;
    int r = stage_next(it, s->input, out);
    if (r != 0) {
      if (r > 0) s->produced = true;
      return r;
    }
    s->passes++;
    if (!s->produced || (s->ds->n >= 0 && s->passes >= s->ds->n)) {
      s->finished = true; /* done, or a pass yielded nothing: repeating it cannot help */
      return 0;
    }
    s->produced = false;
    stage_reset(s->input);
  }
}

/* 1: *out is the stage's next element (valid until its next call); 0: end; -1: error
   (it->errmsg set). */
static int stage_next(npu_iterator *it, stage *s, elem **out) {
  switch (s->ds->kind) {
  case NPUE_DS_SOURCE:
    if (s->pos >= s->ds->n_rows) return 0;
    s->out.rows[0] = s->pos++;
    s->out.n = 1;
    *out = &s->out;
    return 1;
  case NPUE_DS_SHUFFLE: return shuffle_next(it, s, out);
  case NPUE_DS_BATCH: return batch_next(it, s, out);
  case NPUE_DS_REPEAT: return repeat_next(it, s, out);
  case NPUE_DS_PREFETCH: return stage_next(it, s->input, out);
  case NPUE_DS_SHARD: return shard_next(it, s, out);
  }
  return producer_error(it, "internal error: unknown dataset stage");
}

/* Gathers e's source rows into the slot's buffers (row-major: row k at k * row_bytes). */
static void fill_slot(npu_iterator *it, slot *sl, const elem *e) {
  const npu_dataset *src = it->ds->source;
  for (int c = 0; c < it->n_components; c++) {
    size_t rb = it->row_bytes[c];
    const char *from = src->components[c]->data;
    char *to = sl->t[c]->data;
    for (int64_t k = 0; k < e->n; k++)
      memcpy(to + (size_t)k * rb, from + (size_t)e->rows[k] * rb, rb);
  }
  sl->n = e->n;
  memcpy(sl->dims, e->dims, (size_t)it->ds->n_batch * sizeof(int64_t));
}

static void *producer_main(void *arg) {
  npu_iterator *it = arg;
  stage *top = &it->stages[it->n_stages - 1];
  for (;;) {
    pthread_mutex_lock(&it->mu);
    if (!it->stop && (it->n_free == 0 || it->q_count >= it->capacity)) {
      it->producer_waiting = true;
      while (!it->stop && (it->n_free == 0 || it->q_count > it->low_water))
        pthread_cond_wait(&it->free_cv, &it->mu);
      it->producer_waiting = false;
    }
    if (it->stop) {
      pthread_mutex_unlock(&it->mu);
      return NULL;
    }
    int s = it->free_stack[--it->n_free];
    pthread_mutex_unlock(&it->mu);

    elem *e = NULL;
    int r = stage_next(it, top, &e);
    if (r == 1) fill_slot(it, &it->slots[s], e);

    pthread_mutex_lock(&it->mu);
    if (r == 1) {
      it->queue[(it->q_head + it->q_count) % it->n_slots] = s;
      it->q_count++;
    } else {
      it->free_stack[it->n_free++] = s;
      if (r == 0) it->done = true;
      else it->error = NPU_ERR_SHAPE; /* the only error a stage makes */
    }
    pthread_cond_signal(&it->filled_cv);
    pthread_mutex_unlock(&it->mu);
    if (r != 1) return NULL;
  }
}

/* ---- the consumer's side ---- */

/* Wakes a sleeping producer once the queue has drained to the low-water mark (under mu). */
static void wake_producer(npu_iterator *it) {
  if (it->producer_waiting && it->n_free > 0 && it->q_count <= it->low_water)
    pthread_cond_signal(&it->free_cv);
}

/* The element's largest shape for component c: the batch sizes, then the slice's shape. */
static int full_shape(const npu_iterator *it, int c, const int64_t *batch_dims, int64_t *shape) {
  const npu_dataset *ds = it->ds, *src = ds->source;
  const npu_tensor *t = src->components[c];
  memcpy(shape, batch_dims, (size_t)ds->n_batch * sizeof(int64_t));
  memcpy(shape + ds->n_batch, t->shape + 1, (size_t)(t->ndim - 1) * sizeof(int64_t));
  return ds->n_batch + t->ndim - 1;
}

static void iterator_free(npu_iterator *it) {
  npu_context *ctx = it->ctx;
  if (it->slots)
    for (int s = 0; s < it->n_slots; s++)
      for (int c = 0; c < it->n_components; c++) npu_tensor_release(it->slots[s].t[c]);
  if (it->stages)
    for (int i = 0; i < it->n_stages; i++) {
      npuC_free(ctx, it->stages[i].out.rows);
      npuC_free(ctx, it->stages[i].buf_rows);
      npuC_free(ctx, it->stages[i].buf_dims);
    }
  npuC_free(ctx, it->stages);
  npuC_free(ctx, it->slots);
  npuC_free(ctx, it->free_stack);
  npuC_free(ctx, it->queue);
  npu_dataset_release(it->ds);
  npuC_free(ctx, it);
  npu_context_release(ctx);
}

static npu_status build_stages(npu_iterator *it) {
  npu_context *ctx = it->ctx;
  it->n_stages = it->ds->depth + 1;
  it->stages = npuC_calloc(ctx, (size_t)it->n_stages, sizeof *it->stages);
  if (!it->stages) return NPU_ERR_NOMEM;
  const npu_dataset *d = it->ds;
  for (int i = it->n_stages - 1; i >= 0; i--, d = d->input) {
    stage *s = &it->stages[i];
    s->ds = d;
    s->input = i > 0 ? &it->stages[i - 1] : NULL;
    s->finished = d->kind == NPUE_DS_REPEAT && d->n == 0;
    if (d->kind == NPUE_DS_SOURCE || d->kind == NPUE_DS_SHUFFLE || d->kind == NPUE_DS_BATCH) {
      s->out.rows = npuC_calloc(ctx, (size_t)d->max_rows, sizeof(int64_t));
      if (!s->out.rows) return NPU_ERR_NOMEM;
    }
    if (d->kind == NPUE_DS_SHUFFLE) {
      const npu_dataset *in = d->input;
      if (d->n > INT64_MAX / 8 / in->max_rows)
        return npuC_error(ctx, NPU_ERR_NOMEM, "npu_iterator_new: a shuffle buffer of %lld "
                          "elements of %lld rows is too large", (long long)d->n,
                          (long long)in->max_rows);
      s->buf_rows = npuC_calloc(ctx, (size_t)(d->n * in->max_rows), sizeof(int64_t));
      if (!s->buf_rows) return NPU_ERR_NOMEM;
      /* one entry at least, so that no pointer arithmetic ever starts from NULL */
      size_t n_dims = (size_t)d->n * (size_t)(in->n_batch ? in->n_batch : 1);
      s->buf_dims = npuC_calloc(ctx, n_dims, sizeof(int64_t));
      if (!s->buf_dims) return NPU_ERR_NOMEM;
    }
  }
  return NPU_OK;
}

npu_status npu_iterator_new(npu_context *ctx, const npu_dataset *ds, npu_iterator **out) {
  static const char fn[] = "npu_iterator_new";
  if (!out) return npuC_error(ctx, NPU_ERR_ARG, "%s: out is NULL", fn);
  *out = NULL;
  if (!ctx) return NPU_ERR_ARG;
  if (!ds) return npuC_error(ctx, NPU_ERR_ARG, "%s: the dataset is NULL", fn);
  npu_iterator *it = npuC_calloc(ctx, 1, sizeof *it);
  if (!it) return NPU_ERR_NOMEM;
  it->ctx = npu_context_retain(ctx);
  it->ds = npu_dataset_retain((npu_dataset *)ds);
  it->n_components = ds->n_components;
  it->lent = -1;
  const npu_dataset *src = ds->source;
  size_t element_bytes = 0;
  for (int c = 0; c < it->n_components; c++) {
    const npu_tensor *t = src->components[c];
    it->row_bytes[c] = npu_dtype_size(t->dtype) * (size_t)npuT_numel(t->ndim - 1, t->shape + 1);
    element_bytes += it->row_bytes[c] * (size_t)ds->max_rows;
  }
  /* Without an explicit prefetch the queue is sized by bytes: about NPUE_DS_AUTO_BYTES ahead,
     between 2 and NPUE_DS_AUTO_MAX elements, so small elements (a tight device loop) cost
     few producer wake-ups and large ones little memory. */
  it->capacity = ds->capacity;
  if (ds->capacity_auto) {
    size_t n = element_bytes ? NPUE_DS_AUTO_BYTES / element_bytes : NPUE_DS_AUTO_MAX;
    it->capacity = n < 2 ? 2 : n > NPUE_DS_AUTO_MAX ? NPUE_DS_AUTO_MAX : (int64_t)n;
  }
  it->low_water = it->capacity / 2;
  it->n_slots = (int)it->capacity + 1;
  npu_status st = build_stages(it);
  if (!st) {
    it->slots = npuC_calloc(ctx, (size_t)it->n_slots, sizeof *it->slots);
    it->free_stack = npuC_calloc(ctx, (size_t)it->n_slots, sizeof(int));
    it->queue = npuC_calloc(ctx, (size_t)it->n_slots, sizeof(int));
    if (!it->slots || !it->free_stack || !it->queue) st = NPU_ERR_NOMEM;
  }
  for (int s = 0; !st && s < it->n_slots; s++) {
    for (int c = 0; !st && c < it->n_components; c++) {
      int64_t shape[NPU_MAX_DIMS];
      int ndim = full_shape(it, c, ds->max_batch, shape);
      st = npu_tensor_new(ctx, src->components[c]->dtype, ndim, shape, &it->slots[s].t[c]);
    }
    it->free_stack[s] = it->n_slots - 1 - s; /* slot 0 on top */
  }
  if (st) {
    iterator_free(it);
    return st;
  }
  it->n_free = it->n_slots;
  if (pthread_mutex_init(&it->mu, NULL) != 0) {
    iterator_free(it);
    return npuC_error(ctx, NPU_ERR_NOMEM, "%s: cannot create a mutex", fn);
  }
  /* the consumer's waits are timed (wait_filled): on the monotonic clock */
  pthread_condattr_t monotonic;
  bool attr = pthread_condattr_init(&monotonic) == 0;
  if (attr) pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
  int cv_err = pthread_cond_init(&it->filled_cv, attr ? &monotonic : NULL);
  if (attr) pthread_condattr_destroy(&monotonic);
  if (cv_err != 0) {
    pthread_mutex_destroy(&it->mu);
    iterator_free(it);
    return npuC_error(ctx, NPU_ERR_NOMEM, "%s: cannot create a condition variable", fn);
  }
  if (pthread_cond_init(&it->free_cv, NULL) != 0) {
    pthread_cond_destroy(&it->filled_cv);
    pthread_mutex_destroy(&it->mu);
    iterator_free(it);
    return npuC_error(ctx, NPU_ERR_NOMEM, "%s: cannot create a condition variable", fn);
  }
  if (pthread_create(&it->thread, NULL, producer_main, it) != 0) {
    pthread_cond_destroy(&it->free_cv);
    pthread_cond_destroy(&it->filled_cv);
    pthread_mutex_destroy(&it->mu);
    iterator_free(it);
    return npuC_error(ctx, NPU_ERR_NOMEM, "%s: cannot start the producer thread", fn);
  }
  it->thread_started = true;
  *out = it;
  return NPU_OK;
}

int npu_iterator_n_components(const npu_iterator *it) { return it ? it->n_components : 0; }

/* Gives the lent slot back to the producer: its tensors reused when the caller has released
   them, else replaced by fresh ones (allocated here, on the consumer's thread). */
static npu_status reclaim_lent(npu_iterator *it) {
  if (it->lent < 0) return NPU_OK;
  slot *sl = &it->slots[it->lent];
  npu_tensor *fresh[NPUE_DS_MAX_COMPONENTS] = {0};
  for (int c = 0; c < it->n_components; c++) {
    if (atomic_load(&sl->t[c]->refcount) == 1) continue;
    const npu_tensor *t = sl->t[c];
    npu_status st = npu_tensor_new(it->ctx, t->dtype, t->ndim, t->shape, &fresh[c]);
    if (st) {
      for (int k = 0; k < c; k++) npu_tensor_release(fresh[k]);
      return st;
    }
  }
  for (int c = 0; c < it->n_components; c++) {
    if (!fresh[c]) continue;
    npu_tensor_release(sl->t[c]);
    sl->t[c] = fresh[c];
  }
  pthread_mutex_lock(&it->mu);
  it->free_stack[it->n_free++] = it->lent;
  wake_producer(it);
  pthread_mutex_unlock(&it->mu);
  it->lent = -1;
  return NPU_OK;
}

/* Waits, it->mu held, until an element is queued, the data ends or the producer failed.  With
   a watch (the executor's run), in slices of a millisecond, polling it: NPU_ERR_CANCELLED or
   NPU_ERR_TIMEOUT with no message when the run must stop (the executor names the step); and
   NPU_ERR_TIMEOUT with the message when wait_ms > 0 (op_wait_timeout) passes first. */
static npu_status wait_filled(npu_iterator *it, npuC_watch *w, int64_t wait_ms) {
  if (!w && wait_ms <= 0) {
    while (it->q_count == 0 && !it->done && !it->error)
      pthread_cond_wait(&it->filled_cv, &it->mu);
    return NPU_OK;
  }
  int64_t give_up = wait_ms > 0 ? npuC_now_ns() + wait_ms * 1000000 : 0;
  while (it->q_count == 0 && !it->done && !it->error) {
    npuC_stop why = npuC_watch_check(w);
    if (why) return why == NPUC_STOP_DEADLINE || why == NPUC_STOP_OP ? NPU_ERR_TIMEOUT
                                                                     : NPU_ERR_CANCELLED;
    int64_t now = npuC_now_ns();
    if (give_up && now >= give_up)
      return npuC_error(it->ctx, NPU_ERR_TIMEOUT, "no element within op_wait_timeout (%lld s)",
                        (long long)(wait_ms / 1000));
    int64_t until = now + 1000000;
    if (give_up && until > give_up) until = give_up;
    struct timespec ts = {.tv_sec = until / 1000000000, .tv_nsec = until % 1000000000};
    pthread_cond_timedwait(&it->filled_cv, &it->mu, &ts);
  }
  return NPU_OK;
}

npu_status npu_iterator_next(npu_iterator *it, npu_tensor **components_out) {
  return npuE_iterator_next(it, components_out, NULL, 0);
}

npu_status npuE_iterator_next(npu_iterator *it, npu_tensor **components_out, npuC_watch *w,
                              int64_t wait_ms) {
  if (!it) return NPU_ERR_ARG;
  if (!components_out)
    return npuC_error(it->ctx, NPU_ERR_ARG, "npu_iterator_next: components_out is NULL");
  for (int c = 0; c < it->n_components; c++) components_out[c] = NULL;
  npu_status st = reclaim_lent(it);
  if (st) return st;

  pthread_mutex_lock(&it->mu);
  if ((st = wait_filled(it, w, wait_ms))) {
    pthread_mutex_unlock(&it->mu);
    return st;
  }
  if (it->q_count == 0) {
    st = it->error;
    pthread_mutex_unlock(&it->mu);
    if (st) return npuC_error(it->ctx, st, "%s", it->errmsg);
    return npuC_error(it->ctx, NPU_ERR_OUT_OF_RANGE, "end of data");
  }
  int s = it->queue[it->q_head]; /* only this thread pops: it stays at the head */
  pthread_mutex_unlock(&it->mu);

  slot *sl = &it->slots[s];
  const npu_dataset *ds = it->ds;
  bool full = memcmp(sl->dims, ds->max_batch, (size_t)ds->n_batch * sizeof(int64_t)) == 0;
  if (full) {
    for (int c = 0; c < it->n_components; c++) components_out[c] = npu_tensor_retain(sl->t[c]);
  } else { /* a partial batch: a copy of the rows filled */
    for (int c = 0; c < it->n_components; c++) {
      int64_t shape[NPU_MAX_DIMS];
      int ndim = full_shape(it, c, sl->dims, shape);
      st = npu_tensor_new(it->ctx, sl->t[c]->dtype, ndim, shape, &components_out[c]);
      if (st) {
        for (int k = 0; k < c; k++) {
          npu_tensor_release(components_out[k]);
          components_out[k] = NULL;
        }
        return st; /* the element stays queued */
      }
      memcpy(components_out[c]->data, sl->t[c]->data, (size_t)sl->n * it->row_bytes[c]);
    }
  }
  pthread_mutex_lock(&it->mu);
  it->q_head = (it->q_head + 1) % it->n_slots;
  it->q_count--;
  if (full) {
    it->lent = s;
  } else {
    it->free_stack[it->n_free++] = s;
  }
  wake_producer(it); /* the queue has room again */
  pthread_mutex_unlock(&it->mu);
  return NPU_OK;
}

/* The shapes of the element the next npu_iterator_next will hand out, without taking it
   (exec/iterators.c: a plan is compiled for, and chosen by, the shapes of the element its
   get_next will bind).  Waits like next; *has is false at the end of the data. */
npu_status npuE_iterator_peek(npu_iterator *it, int *ndims, int64_t (*shapes)[NPU_MAX_DIMS],
                              bool *has, npuC_watch *w, int64_t wait_ms) {
  *has = false;
  pthread_mutex_lock(&it->mu);
  npu_status st = wait_filled(it, w, wait_ms);
  if (st) {
    pthread_mutex_unlock(&it->mu);
    return st;
  }
  if (it->q_count == 0) {
    st = it->error;
    pthread_mutex_unlock(&it->mu);
    return st ? npuC_error(it->ctx, st, "%s", it->errmsg) : NPU_OK;
  }
  int s = it->queue[it->q_head]; /* queued: the producer no longer writes it */
  pthread_mutex_unlock(&it->mu);
  for (int c = 0; c < it->n_components; c++)
    ndims[c] = full_shape(it, c, it->slots[s].dims, shapes[c]);
  *has = true;
  return NPU_OK;
}

void npu_iterator_release(npu_iterator *it) {
  if (!it) return;
  pthread_mutex_lock(&it->mu);
  it->stop = true;
  pthread_cond_broadcast(&it->free_cv);
  pthread_mutex_unlock(&it->mu);
  pthread_join(it->thread, NULL);
  pthread_cond_destroy(&it->free_cv);
  pthread_cond_destroy(&it->filled_cv);
  pthread_mutex_destroy(&it->mu);
  iterator_free(it);
}
