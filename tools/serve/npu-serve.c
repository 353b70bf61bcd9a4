/*
 * npu-serve — a TensorFlow-Serving-compatible REST server over the public C API (npu.h).
 *
 *   npu-serve --model_name=m --model_base_path=/models/m [--rest_api_port=8501] ...
 *   npu-serve --model_config_file=models.config --platform_config_file=config.cfg ...
 *
 * Layout of the program:
 *   - models: each has a base path whose numeric subdirectories are versions (each holding
 *     whatever npu_graph_import_file reads: a SavedModel, a TF.js model.json, one .pb); a
 *     manager thread polls them every --file_system_poll_wait_seconds, loads the versions the
 *     policy asks for (latest N, all, specific) and only then unloads the others: a request
 *     holds a reference to the version it was routed to, and a version unloads once its queue
 *     is drained and no request holds it, so a swap loses no request;
 *   - a loaded version (servable) has num_batch_threads workers, each with its own
 *     npu_context, graphs and sessions (one per signature), fed by one queue.  Without
 *     batching a worker runs one request at a time; with --enable_batching it merges queued
 *     requests of one signature whose inputs agree past dim 0 into one run of at most
 *     max_batch_size rows, waiting up to batch_timeout_micros for more, padded up to the
 *     next allowed_batch_sizes entry, and splits the outputs back by rows;
 *   - HTTP is libmicrohttpd (a thread per connection: handlers block while their request
 *     runs); JSON is cJSON in, text built here out (tensor_json.c);
 *   - operations: /v1/models/... (predict, status, metadata), /healthz, Prometheus text at
 *     /monitoring/prometheus/metrics, a body size limit (413), a per-request deadline (504),
 *     SIGTERM/SIGINT: stop accepting, finish what is in flight, unload, exit 0.
 * Errors answer with TF Serving's body {"error": "..."} and the server goes on.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <microhttpd.h>

#include "serve.h"
#include "textproto.h"

#define MAX_IO 32
#define MAX_SIGS 16
#define MAX_PARAMS 128
#define MAX_ALLOWED 32

/* ---- configuration -------------------------------------------------------------------------- */

typedef struct param {
  char name[96];
  char kind; /* b i s f */
  char value[512];
} param;

typedef struct config {
  int rest_port, grpc_port;
  const char *address;
  int poll_seconds;
  int rest_threads_unused;
  long timeout_ms;
  size_t max_body_bytes;
  int session_parallelism;
  bool batching;
  int max_batch_size;
  long batch_timeout_micros;
  int num_batch_threads;
  long max_enqueued_batches;
  int allowed[MAX_ALLOWED], n_allowed;
  param params[MAX_PARAMS];
  int n_params;
} config;

static config C = {.rest_port = 8501, .grpc_port = 8500, .address = "0.0.0.0", .poll_seconds = 1,
                   .timeout_ms = 30000, .max_body_bytes = 64u << 20, .session_parallelism = 0,
                   .max_batch_size = 32, .batch_timeout_micros = 1000, .num_batch_threads = 1,
                   .max_enqueued_batches = 1000};

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...) {
  char ts[32];
  time_t t = time(NULL);
  struct tm tm;
  localtime_r(&t, &tm);
  strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", &tm);
  va_list ap;
  va_start(ap, fmt);
  flockfile(stderr);
  fprintf(stderr, "%s npu-serve: ", ts);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  funlockfile(stderr);
  va_end(ap);
}

/* ---- models and versions ------------------------------------------------------------------ */

typedef struct io_def {
  char *key, *name;
  npu_dtype dtype;
  int ndim;
  int64_t shape[NPU_MAX_DIMS];
} io_def;

typedef struct sig_def {
  char *key, *method;
  int n_in, n_out;
  io_def in[MAX_IO], out[MAX_IO];
} sig_def;

typedef struct job {
  int sig;
  sv_buffer in[MAX_IO];
  int64_t rows; /* dim 0 of every input (batching), -1 when they differ */
  sv_buffer out[MAX_IO];
  int http;     /* 0 ok, else the HTTP status of the failure */
  char err[600];
  bool taken, done;
  struct timespec deadline;
  struct job *next;
} job;

typedef enum { ST_START, ST_LOADING, ST_AVAILABLE, ST_UNLOADING, ST_END } sv_state;
static const char *const STATE_NAMES[] = {"START", "LOADING", "AVAILABLE", "UNLOADING", "END"};

struct model;

typedef struct servable {
  struct model *m;
  int64_t version;
  char path[4200];
  sv_state state;  /* under S.mu */
  char error[600];
  int refs;        /* under S.mu: requests routed here and not yet answered */
  int n_sigs;
  sig_def sigs[MAX_SIGS];
  pthread_mutex_t mu; /* the queue */
  pthread_cond_t work, done;
  job *head, *tail;
  int64_t queued_rows;
  int n_workers, n_ready, n_failed;
  pthread_t *threads;
  bool stopping;
  struct servable *next;
} servable;

typedef enum { POLICY_LATEST, POLICY_ALL, POLICY_SPECIFIC } policy_kind;

typedef struct model {
  char name[256], base_path[4096];
  policy_kind policy;
  int num_versions;
  int64_t specific[64];
  int n_specific;
  char label_names[16][64];
  int64_t label_versions[16];
  int n_labels;
  servable *versions; /* under S.mu */
  struct model *next;
} model;

typedef struct metric_count {
  char model[256], api[32], status[32];
  long count;
  struct metric_count *next;
} metric_count;

static const double LAT_BUCKETS_US[] = {250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 1e6, 5e6};
#define N_LAT (sizeof LAT_BUCKETS_US / sizeof LAT_BUCKETS_US[0])
static const int BATCH_BUCKETS[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
#define N_BATCH (sizeof BATCH_BUCKETS / sizeof BATCH_BUCKETS[0])

typedef struct model_metrics {
  char model[256];
  long lat_bucket[N_LAT + 1];
  double lat_sum_us;
  long lat_count;
  long batch_bucket[N_BATCH + 1];
  long batch_sum, batch_count;
  struct model_metrics *next;
} model_metrics;

static struct {
  pthread_mutex_t mu;  /* models' version lists, servable states and refs */
  pthread_cond_t refs_cv;
  model *models;
  pthread_mutex_t metrics_mu;
  metric_count *counts;
  model_metrics *mm;
  atomic_int in_flight;
  atomic_bool stopping;
  pthread_mutex_t stop_mu;
  pthread_cond_t stop_cv;
} S = {.mu = PTHREAD_MUTEX_INITIALIZER, .refs_cv = PTHREAD_COND_INITIALIZER,
       .metrics_mu = PTHREAD_MUTEX_INITIALIZER, .stop_mu = PTHREAD_MUTEX_INITIALIZER,
       .stop_cv = PTHREAD_COND_INITIALIZER};

/* ---- metrics -------------------------------------------------------------------------------- */

static model_metrics *metrics_of(const char *name) { /* under metrics_mu */
  for (model_metrics *m = S.mm; m; m = m->next)
    if (strcmp(m->model, name) == 0) return m;
  model_metrics *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  snprintf(m->model, sizeof m->model, "%s", name);
  m->next = S.mm, S.mm = m;
  return m;
}

static void count_request(const char *model_name, const char *api, const char *status, double us) {
  pthread_mutex_lock(&S.metrics_mu);
  metric_count *c = S.counts;
  while (c && (strcmp(c->model, model_name) || strcmp(c->api, api) || strcmp(c->status, status))) c = c->next;
  if (!c && (c = calloc(1, sizeof *c))) {
    snprintf(c->model, sizeof c->model, "%s", model_name);
    snprintf(c->api, sizeof c->api, "%s", api);
    snprintf(c->status, sizeof c->status, "%s", status);
    c->next = S.counts, S.counts = c;
  }
  if (c) c->count++;
  model_metrics *m = us >= 0 ? metrics_of(model_name) : NULL;
  if (m) {
    size_t b = 0;
    while (b < N_LAT && us > LAT_BUCKETS_US[b]) b++;
    m->lat_bucket[b]++;
    m->lat_sum_us += us;
    m->lat_count++;
  }
  pthread_mutex_unlock(&S.metrics_mu);
}

static void count_batch(const char *model_name, int rows) {
  pthread_mutex_lock(&S.metrics_mu);
  model_metrics *m = metrics_of(model_name);
  if (m) {
    size_t b = 0;
    while (b < N_BATCH && rows > BATCH_BUCKETS[b]) b++;
    m->batch_bucket[b]++;
    m->batch_sum += rows;
    m->batch_count++;
  }
  pthread_mutex_unlock(&S.metrics_mu);
}

static void metrics_text(sv_strbuf *s) {
  pthread_mutex_lock(&S.metrics_mu);
  sb_puts(s, "# TYPE :tensorflow:serving:request_count counter\n");
  for (metric_count *c = S.counts; c; c = c->next)
    sb_printf(s, ":tensorflow:serving:request_count{model_name=\"%s\",API=\"%s\",entrypoint=\"REST\",status=\"%s\"} %ld\n",
              c->model, c->api, c->status, c->count);
  sb_puts(s, "# TYPE :tensorflow:serving:request_latency histogram\n");
  for (model_metrics *m = S.mm; m; m = m->next) {
    long cum = 0;
    for (size_t b = 0; b <= N_LAT; b++) {
      cum += m->lat_bucket[b];
      if (b < N_LAT)
        sb_printf(s, ":tensorflow:serving:request_latency_bucket{model_name=\"%s\",entrypoint=\"REST\",le=\"%g\"} %ld\n",
                  m->model, LAT_BUCKETS_US[b], cum);
      else
        sb_printf(s, ":tensorflow:serving:request_latency_bucket{model_name=\"%s\",entrypoint=\"REST\",le=\"+Inf\"} %ld\n",
                  m->model, cum);
    }
    sb_printf(s, ":tensorflow:serving:request_latency_sum{model_name=\"%s\",entrypoint=\"REST\"} %.0f\n", m->model, m->lat_sum_us);
    sb_printf(s, ":tensorflow:serving:request_latency_count{model_name=\"%s\",entrypoint=\"REST\"} %ld\n", m->model, m->lat_count);
  }
  sb_puts(s, "# TYPE :tensorflow:serving:batching_session:processed_batch_size histogram\n");
  for (model_metrics *m = S.mm; m; m = m->next) {
    if (!m->batch_count) continue;
    long cum = 0;
    for (size_t b = 0; b <= N_BATCH; b++) {
      cum += m->batch_bucket[b];
      if (b < N_BATCH)
        sb_printf(s, ":tensorflow:serving:batching_session:processed_batch_size_bucket{model_name=\"%s\",le=\"%d\"} %ld\n",
                  m->model, BATCH_BUCKETS[b], cum);
      else
        sb_printf(s, ":tensorflow:serving:batching_session:processed_batch_size_bucket{model_name=\"%s\",le=\"+Inf\"} %ld\n",
                  m->model, cum);
    }
    sb_printf(s, ":tensorflow:serving:batching_session:processed_batch_size_sum{model_name=\"%s\"} %ld\n", m->model, m->batch_sum);
    sb_printf(s, ":tensorflow:serving:batching_session:processed_batch_size_count{model_name=\"%s\"} %ld\n", m->model, m->batch_count);
  }
  pthread_mutex_unlock(&S.metrics_mu);
  sb_puts(s, "# TYPE :tensorflow:serving:model_version_state gauge\n");
  pthread_mutex_lock(&S.mu);
  for (model *m = S.models; m; m = m->next)
    for (servable *v = m->versions; v; v = v->next)
      sb_printf(s, ":tensorflow:serving:model_version_state{model_name=\"%s\",version=\"%lld\",state=\"%s\"} 1\n",
                m->name, (long long)v->version, STATE_NAMES[v->state]);
  pthread_mutex_unlock(&S.mu);
  sb_printf(s, "# TYPE npu_serve_requests_in_flight gauge\nnpu_serve_requests_in_flight %d\n",
            atomic_load(&S.in_flight));
}

/* ---- sessions: options, signatures, workers -------------------------------------------------- */

static npu_status apply_params(npu_context *ctx, npu_options *o, char *err, size_t err_size) {
  for (int i = 0; i < C.n_params; i++) {
    const param *p = &C.params[i];
    npu_status st;
    char *end;
    switch (p->kind) {
    case 'b': st = npu_options_set_bool(o, p->name, strcmp(p->value, "true") == 0 || strcmp(p->value, "1") == 0); break;
    case 'i': st = npu_options_set_int(o, p->name, strtoll(p->value, &end, 10)); break;
    case 'f': st = npu_options_set_float(o, p->name, strtod(p->value, &end)); break;
    default: st = npu_options_set_string(o, p->name, p->value); break;
    }
    if (st) {
      snprintf(err, err_size, "parameter_map '%s': %s", p->name, npu_context_errmsg(ctx));
      return st;
    }
  }
  return NPU_OK;
}

static bool is_saved_model(const char *dir) {
  char p[4300];
  struct stat st;
  snprintf(p, sizeof p, "%s/saved_model.pb", dir);
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Imports signature `key` of the version at path (key NULL for models without signature
   defs: TF.js, .pb). */
static npu_status import_sig(npu_context *ctx, const char *path, const char *key, npu_graph **g,
                             npu_model_info **info) {
  if (is_saved_model(path)) return npu_graph_import_savedmodel(ctx, path, NULL, key, g, info);
  return npu_graph_import_file(ctx, path, g, info);
}

static void copy_io(io_def *d, const npu_model_io *e) {
  d->key = strdup(e->key);
  d->name = strdup(e->name);
  d->dtype = e->dtype;
  d->ndim = e->ndim;
  memcpy(d->shape, e->shape, sizeof d->shape);
}

static void free_sigs(servable *sv) {
  for (int i = 0; i < sv->n_sigs; i++) {
    sig_def *s = &sv->sigs[i];
    free(s->key), free(s->method);
    for (int k = 0; k < s->n_in; k++) free(s->in[k].key), free(s->in[k].name);
    for (int k = 0; k < s->n_out; k++) free(s->out[k].key), free(s->out[k].name);
  }
  sv->n_sigs = 0;
}

/* Reads the version's signatures (those this device can run) into sv->sigs. */
static int discover_sigs(servable *sv) {
  npu_context *ctx;
  if (npu_context_new(&(npu_context_config){.n_threads = 1}, &ctx)) {
    snprintf(sv->error, sizeof sv->error, "cannot create a context");
    return -1;
  }
  npu_graph *g;
  npu_model_info *info;
  npu_status st = import_sig(ctx, sv->path, NULL, &g, &info);
  if (st) {
    snprintf(sv->error, sizeof sv->error, "%s: %s", npu_status_name(st), npu_context_errmsg(ctx));
    npu_context_release(ctx);
    return -1;
  }
  npu_graph_release(g);
  int n_keys = npu_model_info_n_signatures(info);
  for (int k = 0; k < (n_keys ? n_keys : 1) && sv->n_sigs < MAX_SIGS; k++) {
    const char *key = n_keys ? npu_model_info_signature_at(info, k) : NULL;
    npu_model_info *si = NULL;
    npu_graph *sg = NULL;
    if (key && import_sig(ctx, sv->path, key, &sg, &si)) {
      logf_("model %s version %lld: signature '%s' is not served: %s", sv->m->name,
            (long long)sv->version, key, npu_context_errmsg(ctx));
      continue;
    }
    const npu_model_info *use = si ? si : info;
    sig_def *s = &sv->sigs[sv->n_sigs++];
    s->key = strdup(key ? key : "serving_default");
    s->method = strdup(npu_model_info_method_name(use) ? npu_model_info_method_name(use) : "tensorflow/serving/predict");
    s->n_in = npu_model_info_n_inputs(use) < MAX_IO ? npu_model_info_n_inputs(use) : MAX_IO;
    s->n_out = npu_model_info_n_outputs(use) < MAX_IO ? npu_model_info_n_outputs(use) : MAX_IO;
    for (int i = 0; i < s->n_in; i++) copy_io(&s->in[i], npu_model_info_input(use, i));
    for (int i = 0; i < s->n_out; i++) copy_io(&s->out[i], npu_model_info_output(use, i));
    npu_model_info_release(si);
    npu_graph_release(sg);
  }
  npu_model_info_release(info);
  npu_context_release(ctx);
  if (!sv->n_sigs) {
    snprintf(sv->error, sizeof sv->error, "no signature of the model can be served here");
    return -1;
  }
  return 0;
}

typedef struct worker {
  servable *sv;
  npu_context *ctx;
  npu_graph *g[MAX_SIGS];
  npu_session *s[MAX_SIGS];
  int in_ids[MAX_SIGS][MAX_IO], out_ids[MAX_SIGS][MAX_IO];
} worker;

static int worker_open(worker *w, char *err, size_t err_size) {
  servable *sv = w->sv;
  npu_context_config cfg = {.n_threads = C.session_parallelism};
  if (npu_context_new(&cfg, &w->ctx)) return snprintf(err, err_size, "cannot create a context"), -1;
  for (int k = 0; k < sv->n_sigs; k++) {
    sig_def *s = &sv->sigs[k];
    npu_options *o = NULL;
    npu_status st = import_sig(w->ctx, sv->path, is_saved_model(sv->path) ? s->key : NULL, &w->g[k], NULL);
    if (!st) st = npu_options_new(w->ctx, &o);
    if (!st) st = apply_params(w->ctx, o, err, err_size);
    if (!st) st = npu_session_new(w->ctx, w->g[k], o, &w->s[k]);
    npu_options_release(o);
    for (int i = 0; !st && i < s->n_in; i++) st = npu_graph_find_value(w->g[k], s->in[i].name, &w->in_ids[k][i]);
    for (int i = 0; !st && i < s->n_out; i++) st = npu_graph_find_value(w->g[k], s->out[i].name, &w->out_ids[k][i]);
    if (st) {
      if (!*err) snprintf(err, err_size, "%s: %s", npu_status_name(st), npu_context_errmsg(w->ctx));
      return -1;
    }
  }
  return 0;
}

static void worker_close(worker *w) {
  for (int k = 0; k < MAX_SIGS; k++) {
    npu_session_release(w->s[k]);
    npu_graph_release(w->g[k]);
  }
  npu_context_release(w->ctx);
}

static bool row_compatible(const job *a, const job *b, const sig_def *s) {
  if (a->sig != b->sig || a->rows < 0 || b->rows < 0) return false;
  for (int i = 0; i < s->n_in; i++)
    if (a->in[i].ndim != b->in[i].ndim ||
        memcmp(a->in[i].shape + 1, b->in[i].shape + 1, sizeof(int64_t) * (size_t)(a->in[i].ndim - 1)) != 0)
      return false;
  return true;
}

static void fail_jobs(job **jobs, int n, int http, const char *msg) {
  for (int j = 0; j < n; j++) {
    jobs[j]->http = http;
    snprintf(jobs[j]->err, sizeof jobs[j]->err, "%s", msg);
  }
}

/* Runs jobs[0..n) (one signature, compatible rows) as one session run and splits the outputs. */
static void run_batch(worker *w, job **jobs, int n) {
  servable *sv = w->sv;
  const int k = jobs[0]->sig;
  const sig_def *s = &sv->sigs[k];
  int64_t total = 0;
  for (int j = 0; j < n; j++) total += jobs[j]->rows;
  int64_t padded = total;
  if (n > 1 || C.batching) {
    for (int a = 0; a < C.n_allowed; a++)
      if (C.allowed[a] >= total) {
        padded = C.allowed[a];
        break;
      }
    count_batch(sv->m->name, (int)padded);
  }
  npu_tensor *in[MAX_IO] = {0}, *out[MAX_IO] = {0};
  npu_status st = NPU_OK;
  for (int i = 0; i < s->n_in && !st; i++) {
    const sv_buffer *b0 = &jobs[0]->in[i];
    if (n == 1 && padded == total) {
      st = npu_tensor_from_data(w->ctx, b0->dtype, b0->ndim, b0->shape, b0->data, b0->nbytes, &in[i]);
      continue;
    }
    int64_t shape[NPU_MAX_DIMS];
    memcpy(shape, b0->shape, sizeof shape);
    shape[0] = padded;
    if ((st = npu_tensor_new(w->ctx, b0->dtype, b0->ndim, shape, &in[i]))) break;
    char *dst = npu_tensor_data(in[i]);
    for (int j = 0; j < n; j++) {
      memcpy(dst, jobs[j]->in[i].data, jobs[j]->in[i].nbytes);
      dst += jobs[j]->in[i].nbytes;
    } /* padding rows stay zero */
  }
  if (!st) st = npu_session_run(w->s[k], s->n_in, w->in_ids[k], in, s->n_out, w->out_ids[k], out, 0, NULL);
  if (st) {
    char msg[600];
    snprintf(msg, sizeof msg, "%s: %s", npu_status_name(st), npu_context_errmsg(w->ctx));
    fail_jobs(jobs, n, st == NPU_ERR_NOMEM || st == NPU_ERR_INTERNAL ? 500 : 400, msg);
  }
  for (int i = 0; i < s->n_out && !st; i++) {
    int nd = npu_tensor_ndim(out[i]);
    const int64_t *shape = npu_tensor_shape(out[i]);
    bool whole = n == 1 && padded == total;
    if (!whole && (nd < 1 || shape[0] != padded)) {
      char msg[600];
      snprintf(msg, sizeof msg, "output '%s' is not batched along dim 0 (batch of %lld rows); "
               "run this model with batching off", s->out[i].key, (long long)padded);
      fail_jobs(jobs, n, 500, msg);
      break;
    }
    size_t row_bytes = whole || shape[0] == 0 ? 0 : npu_tensor_nbytes(out[i]) / (size_t)shape[0];
    const char *src = npu_tensor_data(out[i]);
    for (int j = 0; j < n; j++) {
      sv_buffer *b = &jobs[j]->out[i];
      b->dtype = npu_tensor_dtype(out[i]);
      b->ndim = nd;
      memcpy(b->shape, shape, sizeof(int64_t) * (size_t)nd);
      if (!whole) b->shape[0] = jobs[j]->rows;
      b->nbytes = whole ? npu_tensor_nbytes(out[i]) : row_bytes * (size_t)jobs[j]->rows;
      b->data = malloc(b->nbytes ? b->nbytes : 1);
      if (!b->data) {
        fail_jobs(jobs + j, 1, 500, "out of memory");
        continue;
      }
      memcpy(b->data, src, b->nbytes);
      src += b->nbytes;
    }
  }
  for (int i = 0; i < MAX_IO; i++) {
    npu_tensor_release(in[i]);
    npu_tensor_release(out[i]);
  }
}

static void add_usec(struct timespec *t, long us) {
  t->tv_nsec += (us % 1000000) * 1000;
  t->tv_sec += us / 1000000 + t->tv_nsec / 1000000000;
  t->tv_nsec %= 1000000000;
}

static bool before(const struct timespec *a, const struct timespec *b) {
  return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* Takes the next batch off the queue (under sv->mu); 0 when stopping and empty. */
static int take_batch(servable *sv, job **batch, int cap) {
  while (!sv->head && !sv->stopping) pthread_cond_wait(&sv->work, &sv->mu);
  if (!sv->head) return 0;
  job *first = sv->head;
  sv->head = first->next;
  if (!sv->head) sv->tail = NULL;
  first->taken = true;
  sv->queued_rows -= first->rows > 0 ? first->rows : 0;
  int n = 1;
  batch[0] = first;
  if (!C.batching || first->rows < 0) return n;
  int64_t rows = first->rows;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  add_usec(&until, C.batch_timeout_micros);
  for (;;) {
    job **pp = &sv->head, *prev = NULL;
    while (*pp && n < cap && rows < C.max_batch_size) {
      job *j = *pp;
      if (row_compatible(first, j, &sv->sigs[first->sig]) && rows + j->rows <= C.max_batch_size) {
        *pp = j->next;
        if (sv->tail == j) sv->tail = prev;
        j->taken = true;
        sv->queued_rows -= j->rows;
        batch[n++] = j;
        rows += j->rows;
      } else {
        prev = j;
        pp = &j->next;
      }
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (rows >= C.max_batch_size || n >= cap || sv->stopping || !before(&now, &until)) break;
    pthread_cond_timedwait(&sv->work, &sv->mu, &until);
  }
  return n;
}

static void *worker_main(void *arg) {
  worker w = {.sv = arg};
  servable *sv = w.sv;
  char err[600] = "";
  int ok = worker_open(&w, err, sizeof err) == 0;
  pthread_mutex_lock(&sv->mu);
  if (ok) sv->n_ready++;
  else {
    sv->n_failed++;
    snprintf(sv->error, sizeof sv->error, "%s", err);
  }
  pthread_cond_broadcast(&sv->done);
  job *batch[1024];
  for (int n; ok && (n = take_batch(sv, batch, 1024)) > 0;) {
    pthread_mutex_unlock(&sv->mu);
    run_batch(&w, batch, n);
    pthread_mutex_lock(&sv->mu);
    for (int j = 0; j < n; j++) batch[j]->done = true;
    pthread_cond_broadcast(&sv->done);
  }
  pthread_mutex_unlock(&sv->mu);
  worker_close(&w);
  return NULL;
}

/* ---- loading and unloading versions --------------------------------------------------------- */

/* The directory of version v: its numeric name as written ("00000123", as TF Serving's own
   test models are), else "<v>". */
static void version_path(const model *m, int64_t v, char *buf, size_t size) {
  snprintf(buf, size, "%s/%lld", m->base_path, (long long)v);
  DIR *d = opendir(m->base_path);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!e->d_name[0] || strspn(e->d_name, "0123456789") != strlen(e->d_name) ||
        strtoll(e->d_name, NULL, 10) != v)
      continue;
    int n = snprintf(buf, size, "%s/%s", m->base_path, e->d_name);
    if (n < 0 || (size_t)n >= size) /* too long a path: the plain "<v>" form, which fails to open */
      snprintf(buf, size, "%s/%lld", m->base_path, (long long)v);
    break;
  }
  closedir(d);
}

static servable *load_version(model *m, int64_t version) {
  servable *sv = calloc(1, sizeof *sv);
  if (!sv) return NULL;
  sv->m = m;
  sv->version = version;
  sv->state = ST_LOADING;
  version_path(m, version, sv->path, sizeof sv->path);
  pthread_mutex_init(&sv->mu, NULL);
  pthread_cond_init(&sv->work, NULL);
  pthread_cond_init(&sv->done, NULL);
  pthread_mutex_lock(&S.mu);
  sv->next = m->versions, m->versions = sv;
  pthread_mutex_unlock(&S.mu);
  logf_("model %s: loading version %lld from %s", m->name, (long long)version, sv->path);
  int ok = discover_sigs(sv) == 0;
  if (ok) {
    sv->n_workers = C.batching ? C.num_batch_threads : C.num_batch_threads > 0 ? C.num_batch_threads : 1;
    sv->threads = calloc((size_t)sv->n_workers, sizeof *sv->threads);
    if (!sv->threads) ok = 0, sv->n_workers = 0;
    for (int i = 0; i < sv->n_workers; i++)
      if (pthread_create(&sv->threads[i], NULL, worker_main, sv)) {
        sv->n_workers = i;
        ok = 0;
        break;
      }
    pthread_mutex_lock(&sv->mu);
    while (sv->n_ready + sv->n_failed < sv->n_workers) pthread_cond_wait(&sv->done, &sv->mu);
    ok = ok && sv->n_failed == 0;
    pthread_mutex_unlock(&sv->mu);
  }
  pthread_mutex_lock(&S.mu);
  sv->state = ok ? ST_AVAILABLE : ST_END;
  pthread_mutex_unlock(&S.mu);
  if (ok) logf_("model %s: version %lld available (%d signature(s), %d worker(s))", m->name,
                (long long)version, sv->n_sigs, sv->n_workers);
  else logf_("model %s: version %lld failed to load: %s", m->name, (long long)version, sv->error);
  return sv;
}

static void stop_workers(servable *sv) {
  pthread_mutex_lock(&sv->mu);
  sv->stopping = true;
  pthread_cond_broadcast(&sv->work);
  pthread_mutex_unlock(&sv->mu);
  for (int i = 0; i < sv->n_workers; i++) pthread_join(sv->threads[i], NULL);
  free(sv->threads);
  sv->threads = NULL;
  sv->n_workers = 0;
}

/* Unloads sv once no request holds it (they drain through its workers first). */
static void unload_version(servable *sv) {
  pthread_mutex_lock(&S.mu);
  sv->state = ST_UNLOADING;
  while (sv->refs > 0) pthread_cond_wait(&S.refs_cv, &S.mu);
  pthread_mutex_unlock(&S.mu);
  stop_workers(sv);
  free_sigs(sv);
  pthread_mutex_lock(&S.mu);
  sv->state = ST_END;
  pthread_mutex_unlock(&S.mu);
  logf_("model %s: version %lld unloaded", sv->m->name, (long long)sv->version);
}

static int cmp_i64_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* The numeric subdirectories of the base path, newest first. */
static int list_versions(const model *m, int64_t *out, int cap) {
  DIR *d = opendir(m->base_path);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < cap) {
    char *end;
    if (!e->d_name[0] || strspn(e->d_name, "0123456789") != strlen(e->d_name)) continue;
    long long v = strtoll(e->d_name, &end, 10);
    char p[4400];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", m->base_path, e->d_name);
    if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) out[n++] = v;
  }
  closedir(d);
  qsort(out, (size_t)n, sizeof *out, cmp_i64_desc);
  return n;
}

static bool aspired(const model *m, int64_t v, const int64_t *have, int n) {
  switch (m->policy) {
  case POLICY_ALL: return true;
  case POLICY_SPECIFIC:
    for (int i = 0; i < m->n_specific; i++)
      if (m->specific[i] == v) return true;
    return false;
  default:
    for (int i = 0; i < n && i < m->num_versions; i++)
      if (have[i] == v) return true;
    return false;
  }
}

static servable *find_version(model *m, int64_t v, bool live_only) { /* under S.mu */
  for (servable *s = m->versions; s; s = s->next)
    if (s->version == v && (!live_only || s->state == ST_LOADING || s->state == ST_AVAILABLE)) return s;
  return NULL;
}

/* One poll of one model: load what is aspired and missing, then unload what is not. */
static void poll_model(model *m) {
  int64_t have[256];
  int n = list_versions(m, have, 256);
  if (n < 0) {
    static int warned; /* one warning per process is enough for a missing base path */
    if (!warned++) logf_("model %s: cannot read base path %s", m->name, m->base_path);
    return;
  }
  for (int i = 0; i < n; i++) {
    if (!aspired(m, have[i], have, n)) continue;
    pthread_mutex_lock(&S.mu);
    servable *s = find_version(m, have[i], false);
    pthread_mutex_unlock(&S.mu);
    if (!s) load_version(m, have[i]);
  }
  for (;;) {
    servable *victim = NULL;
    pthread_mutex_lock(&S.mu);
    bool any_new_available = false;
    for (servable *s = m->versions; s; s = s->next)
      if (s->state == ST_AVAILABLE && aspired(m, s->version, have, n)) any_new_available = true;
    for (servable *s = m->versions; s && !victim; s = s->next) {
      bool gone = true;
      for (int i = 0; i < n; i++) gone = gone && have[i] != s->version;
      if (s->state == ST_AVAILABLE && (gone || !aspired(m, s->version, have, n)) &&
          (any_new_available || gone))
        victim = s;
    }
    pthread_mutex_unlock(&S.mu);
    if (!victim) break;
    unload_version(victim);
  }
}

static void *manager_main(void *arg) {
  (void)arg;
  while (!atomic_load(&S.stopping)) {
    for (model *m = S.models; m && !atomic_load(&S.stopping); m = m->next) poll_model(m);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    add_usec(&until, (long)(C.poll_seconds > 0 ? C.poll_seconds : 1) * 1000000L);
    pthread_mutex_lock(&S.stop_mu);
    if (!atomic_load(&S.stopping)) pthread_cond_timedwait(&S.stop_cv, &S.stop_mu, &until);
    pthread_mutex_unlock(&S.stop_mu);
    if (C.poll_seconds <= 0) { /* 0: load once, never poll again */
      pthread_mutex_lock(&S.stop_mu);
      while (!atomic_load(&S.stopping)) pthread_cond_wait(&S.stop_cv, &S.stop_mu);
      pthread_mutex_unlock(&S.stop_mu);
    }
  }
  return NULL;
}

/* ---- requests ------------------------------------------------------------------------------- */

typedef struct reply {
  int http;
  sv_strbuf body;
  const char *status; /* for the metrics: "OK", "INVALID_ARGUMENT", ... */
} reply;

static const char *status_of(int http) {
  switch (http) {
  case 200: return "OK";
  case 400: return "INVALID_ARGUMENT";
  case 404: return "NOT_FOUND";
  case 413: return "RESOURCE_EXHAUSTED";
  case 503: return "UNAVAILABLE";
  case 504: return "DEADLINE_EXCEEDED";
  default: return "INTERNAL";
  }
}

static void error_reply(reply *r, int http, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void error_reply(reply *r, int http, const char *fmt, ...) {
  char msg[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  r->http = http;
  r->status = status_of(http);
  r->body.n = 0;
  sb_puts(&r->body, "{ \"error\": ");
  sb_json_string(&r->body, msg);
  sb_puts(&r->body, " }");
}

static const char *tf_dtype_name(npu_dtype t) {
  static const char *const names[] = {
      [NPU_DTYPE_F32] = "DT_FLOAT", [NPU_DTYPE_F16] = "DT_HALF",   [NPU_DTYPE_BF16] = "DT_BFLOAT16",
      [NPU_DTYPE_F64] = "DT_DOUBLE", [NPU_DTYPE_I8] = "DT_INT8",   [NPU_DTYPE_U8] = "DT_UINT8",
      [NPU_DTYPE_I32] = "DT_INT32", [NPU_DTYPE_I64] = "DT_INT64", [NPU_DTYPE_BOOL] = "DT_BOOL"};
  return (unsigned)t < NPU_DTYPE_COUNT ? names[t] : "DT_INVALID";
}

typedef struct route {
  char model[256];
  bool has_version, has_label;
  int64_t version;
  char label[64];
  char verb[32]; /* "predict", "metadata", "" (status) */
} route;

/* /v1/models/{name}[/versions/{v}|/labels/{l}][:predict|:classify|:regress|/metadata] */
static int parse_route(const char *url, route *rt) {
  memset(rt, 0, sizeof *rt);
  const char *p = url;
  if (strncmp(p, "/v1/models/", 11) != 0) return -1;
  p += 11;
  size_t n = strcspn(p, "/:");
  if (n == 0 || n >= sizeof rt->model) return -1;
  memcpy(rt->model, p, n);
  p += n;
  if (strncmp(p, "/versions/", 10) == 0) {
    p += 10;
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p) return -1;
    rt->has_version = true, rt->version = v, p = end;
  } else if (strncmp(p, "/labels/", 8) == 0) {
    p += 8;
    n = strcspn(p, "/:");
    if (n == 0 || n >= sizeof rt->label) return -1;
    memcpy(rt->label, p, n);
    rt->has_label = true, p += n;
  }
  if (*p == ':' || *p == '/') {
    snprintf(rt->verb, sizeof rt->verb, "%s", p + 1);
    if (*p == '/' && strcmp(rt->verb, "metadata") != 0) return -1;
  } else if (*p) {
    return -1;
  }
  return 0;
}

static model *find_model(const char *name) {
  for (model *m = S.models; m; m = m->next)
    if (strcmp(m->name, name) == 0) return m;
  return NULL;
}

/* The servable a request goes to, with a reference taken; NULL with a 404 reply. */
static servable *acquire(const route *rt, reply *r) {
  model *m = find_model(rt->model);
  pthread_mutex_lock(&S.mu);
  servable *best = NULL;
  int64_t want = rt->version;
  bool specific = rt->has_version;
  if (m && rt->has_label) {
    specific = false;
    for (int i = 0; i < m->n_labels; i++)
      if (strcmp(m->label_names[i], rt->label) == 0) specific = true, want = m->label_versions[i];
    if (!specific) {
      pthread_mutex_unlock(&S.mu);
      error_reply(r, 404, "Unrecognized servable version label: %s", rt->label);
      return NULL;
    }
  }
  for (servable *s = m ? m->versions : NULL; s; s = s->next) {
    if (s->state != ST_AVAILABLE) continue;
    if (specific ? s->version == want : !best || s->version > best->version) best = s;
  }
  if (best) best->refs++;
  pthread_mutex_unlock(&S.mu);
  if (!best) {
    if (specific)
      error_reply(r, 404, "Servable not found for request: Specific(%s, %lld)", rt->model, (long long)want);
    else
      error_reply(r, 404, "Servable not found for request: Latest(%s)", rt->model);
  }
  return best;
}

static void release(servable *sv) {
  pthread_mutex_lock(&S.mu);
  if (--sv->refs == 0) pthread_cond_broadcast(&S.refs_cv);
  pthread_mutex_unlock(&S.mu);
}

static void put_shape_json(sv_strbuf *b, const io_def *e) {
  sb_puts(b, "{\"dim\": [");
  for (int d = 0; d < e->ndim; d++)
    sb_printf(b, "%s{\"size\": \"%lld\", \"name\": \"\"}", d ? ", " : "", (long long)e->shape[d]);
  sb_printf(b, "], \"unknown_rank\": %s}", e->ndim < 0 ? "true" : "false");
}

static void put_io_map(sv_strbuf *b, const io_def *ios, int n) {
  sb_puts(b, "{");
  for (int i = 0; i < n; i++) {
    if (i) sb_puts(b, ", ");
    sb_json_string(b, ios[i].key);
    sb_printf(b, ": {\"dtype\": \"%s\", \"tensor_shape\": ", tf_dtype_name(ios[i].dtype));
    put_shape_json(b, &ios[i]);
    sb_puts(b, ", \"name\": ");
    sb_json_string(b, ios[i].name);
    sb_puts(b, "}");
  }
  sb_puts(b, "}");
}

static void metadata_reply(servable *sv, reply *r) {
  sv_strbuf *b = &r->body;
  sb_puts(b, "{\"model_spec\": {\"name\": ");
  sb_json_string(b, sv->m->name);
  sb_printf(b, ", \"signature_name\": \"\", \"version\": \"%lld\"}, \"metadata\": {\"signature_def\": "
               "{\"signature_def\": {", (long long)sv->version);
  for (int k = 0; k < sv->n_sigs; k++) {
    const sig_def *s = &sv->sigs[k];
    if (k) sb_puts(b, ", ");
    sb_json_string(b, s->key);
    sb_puts(b, ": {\"inputs\": ");
    put_io_map(b, s->in, s->n_in);
    sb_puts(b, ", \"outputs\": ");
    put_io_map(b, s->out, s->n_out);
    sb_puts(b, ", \"method_name\": ");
    sb_json_string(b, s->method);
    sb_puts(b, "}");
  }
  sb_puts(b, "}}}}");
  r->http = 200, r->status = "OK";
}

static void status_reply(const route *rt, reply *r) {
  model *m = find_model(rt->model);
  if (!m) return error_reply(r, 404, "Servable not found for request: Latest(%s)", rt->model);
  sv_strbuf *b = &r->body;
  int n = 0;
  sb_puts(b, "{\"model_version_status\": [");
  pthread_mutex_lock(&S.mu);
  for (servable *s = m->versions; s; s = s->next) {
    if (rt->has_version && s->version != rt->version) continue;
    if (s->state == ST_END && !s->error[0] && !rt->has_version) continue; /* unloaded long ago */
    sb_printf(b, "%s{\"version\": \"%lld\", \"state\": \"%s\", \"status\": {\"error_code\": \"%s\", "
                 "\"error_message\": ", n++ ? ", " : "", (long long)s->version, STATE_NAMES[s->state],
              s->error[0] && s->state == ST_END ? "UNKNOWN" : "OK");
    sb_json_string(b, s->state == ST_END ? s->error : "");
    sb_puts(b, "}}");
  }
  pthread_mutex_unlock(&S.mu);
  sb_puts(b, "]}");
  if (!n) {
    if (rt->has_version)
      return error_reply(r, 404, "Could not find version %lld of model %s", (long long)rt->version, rt->model);
    return error_reply(r, 404, "Could not find any versions of model %s", rt->model);
  }
  r->http = 200, r->status = "OK";
}

/* The request's inputs (row or columnar) into j->in in the signature's order. */
static int parse_inputs(const sig_def *s, const cJSON *root, job *j, bool *row, reply *r) {
  const cJSON *inst = cJSON_GetObjectItemCaseSensitive(root, "instances");
  const cJSON *cols = cJSON_GetObjectItemCaseSensitive(root, "inputs");
  char err[512] = "";
  if ((inst != NULL) == (cols != NULL))
    return error_reply(r, 400, "Missing 'inputs' or 'instances' key"), -1;
  *row = inst != NULL;
  if (*row) {
    if (!cJSON_IsArray(inst) || cJSON_GetArraySize(inst) == 0)
      return error_reply(r, 400, "Expecting 'instances' to be a non-empty list"), -1;
    int n = cJSON_GetArraySize(inst);
    sv_buffer *parts = calloc((size_t)n, sizeof *parts);
    if (!parts) return error_reply(r, 500, "out of memory"), -1;
    int rc = 0;
    for (int i = 0; i < s->n_in && !rc; i++) {
      int k = 0;
      const cJSON *e;
      cJSON_ArrayForEach(e, inst) {
        const cJSON *v = e;
        if (cJSON_IsObject(e)) {
          v = cJSON_GetObjectItemCaseSensitive(e, s->in[i].key);
          if (!v || cJSON_GetArraySize(e) != s->n_in) {
            error_reply(r, 400, "instance %d: expected the inputs %s%s (as an object with every "
                        "input's key)", k, s->in[i].key, s->n_in > 1 ? " and the others" : "");
            rc = -1;
            break;
          }
        } else if (s->n_in > 1) {
          error_reply(r, 400, "instance %d: the signature has %d inputs: each instance must be an "
                      "object keyed by input name", k, s->n_in);
          rc = -1;
          break;
        }
        if (sv_buffer_from_json(&parts[k], v, s->in[i].dtype, err, sizeof err)) {
          error_reply(r, 400, "instance %d, input '%s': %s", k, s->in[i].key, err);
          rc = -1;
          break;
        }
        k++;
      }
      if (!rc && sv_buffer_stack(&j->in[i], parts, n, err, sizeof err))
        error_reply(r, 400, "input '%s': %s", s->in[i].key, err), rc = -1;
      for (int q = 0; q < k; q++) sv_buffer_free(&parts[q]);
    }
    free(parts);
    return rc;
  }
  if (s->n_in > 1 || cJSON_IsObject(cols)) { /* an object is never a tensor value */
    if (!cJSON_IsObject(cols))
      return error_reply(r, 400, "the signature has %d inputs: 'inputs' must be an object keyed by input name", s->n_in), -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, cols) {
      bool known = false;
      for (int i = 0; i < s->n_in; i++) known = known || strcmp(e->string, s->in[i].key) == 0;
      if (!known) return error_reply(r, 400, "input '%s' is not in the signature", e->string), -1;
    }
  }
  for (int i = 0; i < s->n_in; i++) {
    const cJSON *v = cJSON_IsObject(cols) ? cJSON_GetObjectItemCaseSensitive(cols, s->in[i].key) : cols;
    if (!v) return error_reply(r, 400, "Missing input '%s'", s->in[i].key), -1;
    if (sv_buffer_from_json(&j->in[i], v, s->in[i].dtype, err, sizeof err))
      return error_reply(r, 400, "input '%s': %s", s->in[i].key, err), -1;
  }
  return 0;
}

static int check_inputs(const sig_def *s, job *j, reply *r) {
  j->rows = -1;
  for (int i = 0; i < s->n_in; i++) {
    const io_def *e = &s->in[i];
    const sv_buffer *b = &j->in[i];
    bool ok = e->ndim < 0 || e->ndim == b->ndim;
    for (int d = 0; ok && e->ndim >= 0 && d < e->ndim; d++) ok = e->shape[d] < 0 || e->shape[d] == b->shape[d];
    if (!ok) {
      char want[128] = "", got[128] = "";
      for (int d = 0, a = 0; d < e->ndim; d++) a += snprintf(want + a, sizeof want - (size_t)a, "%s%lld", d ? "," : "", (long long)e->shape[d]);
      for (int d = 0, a = 0; d < b->ndim; d++) a += snprintf(got + a, sizeof got - (size_t)a, "%s%lld", d ? "," : "", (long long)b->shape[d]);
      return error_reply(r, 400, "input '%s' expects shape [%s], got [%s]", e->key, want, got), -1;
    }
    int64_t rows = b->ndim >= 1 ? b->shape[0] : -1;
    j->rows = i == 0 ? rows : j->rows == rows ? rows : -1;
  }
  if (s->n_in == 0) j->rows = -1;
  return 0;
}

static void predictions_reply(const sig_def *s, job *j, bool row, reply *r) {
  sv_strbuf *b = &r->body;
  if (row) {
    int64_t n = -1;
    for (int i = 0; i < s->n_out; i++) {
      int64_t d0 = j->out[i].ndim >= 1 ? j->out[i].shape[0] : -2;
      if (d0 < 0 || (n >= 0 && d0 != n))
        return error_reply(r, 400, "the outputs do not share a batch size (output '%s'): use the "
                           "columnar 'inputs' form", s->out[i].key);
      n = d0;
    }
    sb_puts(b, "{\n    \"predictions\": [");
    for (int64_t k = 0; k < n; k++) {
      sb_puts(b, k ? ", " : "");
      if (s->n_out == 1) {
        sb_put_buffer(b, &j->out[0], k);
        continue;
      }
      sb_puts(b, "{");
      for (int i = 0; i < s->n_out; i++) {
        if (i) sb_puts(b, ", ");
        sb_json_string(b, s->out[i].key);
        sb_puts(b, ": ");
        sb_put_buffer(b, &j->out[i], k);
      }
      sb_puts(b, "}");
    }
    sb_puts(b, "\n    ]\n}");
  } else {
    sb_puts(b, "{\n    \"outputs\": ");
    if (s->n_out == 1) sb_put_buffer(b, &j->out[0], -1);
    else {
      sb_puts(b, "{");
      for (int i = 0; i < s->n_out; i++) {
        if (i) sb_puts(b, ", ");
        sb_json_string(b, s->out[i].key);
        sb_puts(b, ": ");
        sb_put_buffer(b, &j->out[i], -1);
      }
      sb_puts(b, "}");
    }
    sb_puts(b, "\n}");
  }
  r->http = 200, r->status = "OK";
}

/* Queues j on sv and waits for it (or its deadline while still queued). */
static void run_job(servable *sv, job *j, reply *r) {
  clock_gettime(CLOCK_REALTIME, &j->deadline);
  add_usec(&j->deadline, C.timeout_ms * 1000);
  pthread_mutex_lock(&sv->mu);
  int64_t limit = C.batching ? C.max_enqueued_batches * C.max_batch_size : C.max_enqueued_batches;
  int64_t rows = j->rows > 0 ? j->rows : 1;
  if (sv->queued_rows + rows > limit) {
    pthread_mutex_unlock(&sv->mu);
    return error_reply(r, 503, "The batch scheduling queue to which this task was submitted is full");
  }
  j->next = NULL;
  if (sv->tail) sv->tail->next = j;
  else sv->head = j;
  sv->tail = j;
  sv->queued_rows += j->rows > 0 ? j->rows : 0;
  pthread_cond_signal(&sv->work);
  while (!j->done) {
    if (!j->taken) {
      if (pthread_cond_timedwait(&sv->done, &sv->mu, &j->deadline) == ETIMEDOUT && !j->taken) {
        job **pp = &sv->head, *prev = NULL; /* still queued: take it back */
        while (*pp && *pp != j) prev = *pp, pp = &(*pp)->next;
        if (*pp) *pp = j->next;
        if (sv->tail == j) sv->tail = prev;
        sv->queued_rows -= j->rows > 0 ? j->rows : 0;
        pthread_mutex_unlock(&sv->mu);
        return error_reply(r, 504, "Deadline exceeded: the request waited %ld ms in the queue", C.timeout_ms);
      }
    } else {
      pthread_cond_wait(&sv->done, &sv->mu); /* running: a run cannot be cut short */
    }
  }
  pthread_mutex_unlock(&sv->mu);
}

static void predict(const route *rt, const char *body, size_t len, reply *r) {
  servable *sv = acquire(rt, r);
  if (!sv) return;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
  job *j = calloc(1, sizeof *j);
  bool row = true;
  if (!j) error_reply(r, 500, "out of memory");
  else if (!root || !cJSON_IsObject(root))
    error_reply(r, 400, "JSON Parse error: %s at offset: %zu", root ? "the body is not an object" : "Invalid value.",
                end && end >= body ? (size_t)(end - body) : 0);
  else {
    const cJSON *sn = cJSON_GetObjectItemCaseSensitive(root, "signature_name");
    const char *want = cJSON_IsString(sn) ? sn->valuestring : "serving_default";
    int k = -1;
    for (int i = 0; i < sv->n_sigs; i++)
      if (strcmp(sv->sigs[i].key, want) == 0) k = i;
    if (k < 0 && !cJSON_IsString(sn) && sv->n_sigs == 1) k = 0;
    if (k < 0) error_reply(r, 400, "Serving signature name: \"%s\" not found in signature def", want);
    else {
      j->sig = k;
      if (!parse_inputs(&sv->sigs[k], root, j, &row, r) && !check_inputs(&sv->sigs[k], j, r)) {
        run_job(sv, j, r);
        if (!r->http) {
          if (j->http) error_reply(r, j->http, "%s", j->err);
          else predictions_reply(&sv->sigs[k], j, row, r);
        }
      }
    }
  }
  if (j)
    for (int i = 0; i < MAX_IO; i++) sv_buffer_free(&j->in[i]), sv_buffer_free(&j->out[i]);
  free(j);
  cJSON_Delete(root);
  release(sv);
}

static bool any_available(void) {
  bool any = false;
  pthread_mutex_lock(&S.mu);
  for (model *m = S.models; m; m = m->next)
    for (servable *s = m->versions; s; s = s->next) any = any || s->state == ST_AVAILABLE;
  pthread_mutex_unlock(&S.mu);
  return any;
}

/* Routes one complete request. */
static void dispatch(const char *method, const char *url, const char *body, size_t len, reply *r,
                     const char **api, char *model_name, size_t model_size) {
  route rt;
  *api = "other";
  if (strcmp(url, "/monitoring/prometheus/metrics") == 0 && strcmp(method, "GET") == 0) {
    metrics_text(&r->body);
    r->http = 200, r->status = "OK";
    return;
  }
  if (strcmp(url, "/healthz") == 0 || strcmp(url, "/v1/healthz") == 0) {
    bool up = any_available() && !atomic_load(&S.stopping);
    sb_printf(&r->body, "{\"status\": \"%s\"}", up ? "SERVING" : "NOT_SERVING");
    r->http = up ? 200 : 503, r->status = status_of(r->http);
    return;
  }
  if (parse_route(url, &rt)) return error_reply(r, 404, "Malformed request: %s %s", method, url);
  snprintf(model_name, model_size, "%s", rt.model);
  if (strcmp(method, "GET") == 0 && !rt.verb[0]) {
    *api = "GetModelStatus";
    return status_reply(&rt, r);
  }
  if (strcmp(method, "GET") == 0 && strcmp(rt.verb, "metadata") == 0) {
    *api = "GetModelMetadata";
    servable *sv = acquire(&rt, r);
    if (sv) metadata_reply(sv, r), release(sv);
    return;
  }
  if (strcmp(method, "POST") == 0 && strcmp(rt.verb, "predict") == 0) {
    *api = "Predict";
    return predict(&rt, body, len, r);
  }
  if (strcmp(method, "POST") == 0 && (!strcmp(rt.verb, "classify") || !strcmp(rt.verb, "regress")))
    return error_reply(r, 400, "%s is not supported here (it reads tf.Example strings); use :predict", rt.verb);
  error_reply(r, 404, "Malformed request: %s %s", method, url);
}

/* ---- HTTP (libmicrohttpd) ------------------------------------------------------------------ */

typedef struct conn_state {
  sv_strbuf body;
  bool too_big;
} conn_state;

static enum MHD_Result send_reply(struct MHD_Connection *c, reply *r) {
  struct MHD_Response *resp = MHD_create_response_from_buffer(r->body.n, r->body.buf ? r->body.buf : (char *)"",
                                                              r->body.buf ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
  r->body.buf = NULL;
  if (!resp) return MHD_NO;
  MHD_add_response_header(resp, "Content-Type", "application/json");
  enum MHD_Result ok = MHD_queue_response(c, (unsigned)r->http, resp);
  MHD_destroy_response(resp);
  return ok;
}

static double since_us(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) * 1e6 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e3;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  (void)cls, (void)version;
  conn_state *cs = *con_cls;
  if (!cs) {
    if (!(cs = calloc(1, sizeof *cs))) return MHD_NO;
    *con_cls = cs;
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > C.max_body_bytes) {
      reply r = {0};
      error_reply(&r, 413, "Request body of %s bytes is larger than the limit of %zu bytes", cl, C.max_body_bytes);
      count_request("", "other", r.status, -1);
      return send_reply(c, &r);
    }
    return MHD_YES;
  }
  if (*upload_size) {
    if (!cs->too_big && cs->body.n + *upload_size > C.max_body_bytes) cs->too_big = true;
    if (!cs->too_big) sb_putn(&cs->body, upload, *upload_size);
    *upload_size = 0;
    return MHD_YES;
  }
  atomic_fetch_add(&S.in_flight, 1);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  reply r = {0};
  const char *api = "other";
  char model_name[256] = "";
  if (cs->too_big) error_reply(&r, 413, "Request body is larger than the limit of %zu bytes", C.max_body_bytes);
  else if (cs->body.failed) error_reply(&r, 500, "out of memory");
  else dispatch(method, url, cs->body.buf ? cs->body.buf : "", cs->body.n, &r, &api, model_name, sizeof model_name);
  if (strcmp(url, "/monitoring/prometheus/metrics") != 0)
    count_request(model_name, api, r.status ? r.status : "INTERNAL", strcmp(api, "Predict") == 0 ? since_us(&t0) : -1);
  if (r.body.failed) {
    free(r.body.buf);
    r.body = (sv_strbuf){0};
    r.http = 500;
  }
  enum MHD_Result ok = send_reply(c, &r);
  atomic_fetch_sub(&S.in_flight, 1);
  return ok;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)cls, (void)c, (void)toe;
  conn_state *cs = *con_cls;
  if (cs) free(cs->body.buf);
  free(cs);
  *con_cls = NULL;
}

/* ---- configuration files ------------------------------------------------------------------ */

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  sv_strbuf b = {0};
  char tmp[4096];
  size_t n;
  while ((n = fread(tmp, 1, sizeof tmp, f)) > 0) sb_putn(&b, tmp, n);
  fclose(f);
  if (!b.buf) sb_puts(&b, "");
  return b.failed ? (free(b.buf), NULL) : b.buf;
}

static tp_node *read_textproto(const char *what, const char *path) {
  char *text = read_text(path);
  if (!text) {
    fprintf(stderr, "npu-serve: cannot read %s '%s': %s\n", what, path, strerror(errno));
    return NULL;
  }
  char err[256];
  tp_node *root = tp_parse(text, err, sizeof err);
  free(text);
  if (!root) fprintf(stderr, "npu-serve: %s '%s': %s\n", what, path, err);
  return root;
}

static model *add_model(const char *name, const char *base_path) {
  model *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  snprintf(m->name, sizeof m->name, "%s", name);
  snprintf(m->base_path, sizeof m->base_path, "%s", base_path);
  m->num_versions = 1;
  model **tail = &S.models;
  while (*tail) tail = &(*tail)->next;
  *tail = m;
  return m;
}

/* model_config_list { config { name base_path model_platform model_version_policy
   version_labels } ... } */
static int load_model_config(const char *path) {
  tp_node *root = read_textproto("model config file", path);
  if (!root) return -1;
  const tp_node *list = tp_get(root, "model_config_list");
  int n = 0, rc = 0;
  for (const tp_node *c = tp_get(list, "config"); c && !rc; c = tp_next(c, "config")) {
    const char *name = tp_str(c, "name", NULL), *base = tp_str(c, "base_path", NULL);
    const char *platform = tp_str(c, "model_platform", "tensorflow");
    if (!name || !base) {
      fprintf(stderr, "npu-serve: %s: a config without name or base_path\n", path);
      rc = -1;
      break;
    }
    if (strcmp(platform, "tensorflow") != 0)
      fprintf(stderr, "npu-serve: %s: model %s: model_platform '%s' read as tensorflow\n", path, name, platform);
    model *m = add_model(name, base);
    if (!m) { rc = -1; break; }
    const tp_node *pol = tp_get(c, "model_version_policy");
    if (tp_get(pol, "all")) m->policy = POLICY_ALL;
    else if (tp_get(pol, "specific")) {
      m->policy = POLICY_SPECIFIC;
      const tp_node *sp = tp_get(pol, "specific");
      for (const tp_node *v = tp_get(sp, "versions"); v && m->n_specific < 64; v = tp_next(v, "versions"))
        m->specific[m->n_specific++] = strtoll(v->value ? v->value : "0", NULL, 10);
    } else if (tp_get(pol, "latest")) {
      m->num_versions = atoi(tp_str(tp_get(pol, "latest"), "num_versions", "1"));
      if (m->num_versions < 1) m->num_versions = 1;
    }
    for (const tp_node *l = tp_get(c, "version_labels"); l && m->n_labels < 16; l = tp_next(l, "version_labels")) {
      snprintf(m->label_names[m->n_labels], sizeof m->label_names[0], "%s", tp_str(l, "key", ""));
      m->label_versions[m->n_labels++] = strtoll(tp_str(l, "value", "0"), NULL, 10);
    }
    n++;
  }
  if (!rc && n == 0) {
    fprintf(stderr, "npu-serve: %s: no model_config_list { config { ... } }\n", path);
    rc = -1;
  }
  tp_free(root);
  return rc;
}

/* Every custom_optimizers { name: "NpuOptimizer" parameter_map { key value { b|i|s|f } } }
   anywhere in the platform config (the seed's session_config nests it deeply). */
static int collect_params(const tp_node *n, const char *path) {
  for (const tp_node *c = n ? n->child : NULL; c; c = c->next) {
    if (c->name && strcmp(c->name, "custom_optimizers") == 0 &&
        strcmp(tp_str(c, "name", ""), "NpuOptimizer") == 0) {
      for (const tp_node *p = tp_get(c, "parameter_map"); p; p = tp_next(p, "parameter_map")) {
        const char *key = tp_str(p, "key", NULL);
        const tp_node *v = tp_get(p, "value");
        const tp_node *val = v ? v->child : NULL;
        if (!key || !val || !val->value || strlen(val->name) != 1 || !strchr("bisf", val->name[0])) {
          fprintf(stderr, "npu-serve: %s: parameter_map entry %s has no b/i/s/f value\n", path, key ? key : "?");
          return -1;
        }
        if (C.n_params == MAX_PARAMS) return fprintf(stderr, "npu-serve: %s: too many parameters\n", path), -1;
        param *q = &C.params[C.n_params++];
        snprintf(q->name, sizeof q->name, "%s", key);
        q->kind = val->name[0];
        snprintf(q->value, sizeof q->value, "%s", val->value);
      }
    } else if (collect_params(c, path)) {
      return -1;
    }
  }
  return 0;
}

static int load_platform_config(const char *path) {
  tp_node *root = read_textproto("platform config file", path);
  if (!root) return -1;
  int rc = collect_params(root, path);
  tp_free(root);
  if (rc) return rc;
  /* check every entry now, so a typo fails at start-up rather than at the first load */
  npu_context *ctx;
  npu_options *o;
  char err[600] = "";
  if (npu_context_new(&(npu_context_config){.n_threads = 1}, &ctx)) return -1;
  rc = npu_options_new(ctx, &o) || apply_params(ctx, o, err, sizeof err) ? -1 : 0;
  if (rc) fprintf(stderr, "npu-serve: %s: %s\n", path, err);
  else logf_("platform config %s: %d NpuOptimizer parameter(s)", path, C.n_params);
  npu_options_release(o);
  npu_context_release(ctx);
  return rc;
}

/* max_batch_size { value: 32 } batch_timeout_micros { value: 1000 } ... allowed_batch_sizes: 8 */
static int load_batching_config(const char *path) {
  tp_node *root = read_textproto("batching parameters file", path);
  if (!root) return -1;
  const char *v;
  if ((v = tp_str(tp_get(root, "max_batch_size"), "value", NULL))) C.max_batch_size = atoi(v);
  if ((v = tp_str(tp_get(root, "batch_timeout_micros"), "value", NULL))) C.batch_timeout_micros = atol(v);
  if ((v = tp_str(tp_get(root, "num_batch_threads"), "value", NULL))) C.num_batch_threads = atoi(v);
  if ((v = tp_str(tp_get(root, "max_enqueued_batches"), "value", NULL))) C.max_enqueued_batches = atol(v);
  for (const tp_node *a = tp_get(root, "allowed_batch_sizes"); a && C.n_allowed < MAX_ALLOWED; a = tp_next(a, "allowed_batch_sizes"))
    if (a->value) C.allowed[C.n_allowed++] = atoi(a->value);
  tp_free(root);
  return 0;
}

/* ---- main ----------------------------------------------------------------------------------- */

static const char USAGE[] =
    "usage: npu-serve [--rest_api_port=8501] [--port=8500] [--rest_api_address=0.0.0.0]\n"
    "                 (--model_name=NAME --model_base_path=DIR | --model_config_file=FILE)\n"
    "                 [--platform_config_file=FILE] [--file_system_poll_wait_seconds=1]\n"
    "                 [--enable_batching] [--batching_parameters_file=FILE]\n"
    "                 [--max_batch_size=N] [--batch_timeout_micros=N] [--num_batch_threads=N]\n"
    "                 [--max_enqueued_batches=N] [--allowed_batch_sizes=8,16,32]\n"
    "                 [--rest_api_timeout_in_ms=30000] [--max_body_bytes=67108864]\n"
    "                 [--tensorflow_session_parallelism=0]\n";

static bool flag(const char *arg, const char *name, const char **value) {
  size_t n = strlen(name);
  if (strncmp(arg, "--", 2) != 0 || strncmp(arg + 2, name, n) != 0) return false;
  if (arg[2 + n] == '=') return *value = arg + 3 + n, true;
  if (arg[2 + n] == 0) return *value = NULL, true;
  return false;
}

/* The flags (flags.def), by number and by name. */
enum serve_flag {
#define SERVE_FLAG(name, takes) FLAG_##name,
#include "flags.def"
#undef SERVE_FLAG
  N_FLAGS
};
static const struct {
  const char *name, *takes;
} FLAGS[N_FLAGS] = {
#define SERVE_FLAG(name, takes) {#name, takes},
#include "flags.def"
#undef SERVE_FLAG
};

static int parse_args(int argc, char **argv, const char **model_name, const char **base_path,
                      const char **model_config, const char **platform_config, const char **batching_file) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    if (flag(a, "help", &v) || flag(a, "h", &v)) return fputs(USAGE, stdout), 1;
    if (flag(a, "list_flags", &v)) { /* for lua/npu/serve_flags.lua (make serve-flags) */
      for (int k = 0; k < N_FLAGS; k++) puts(FLAGS[k].name);
      return 1;
    }
    int k = 0;
    while (k < N_FLAGS && !flag(a, FLAGS[k].name, &v)) k++;
    if (k == N_FLAGS || (!v && FLAGS[k].takes && *FLAGS[k].takes)) {
      fprintf(stderr, k == N_FLAGS ? "npu-serve: unknown flag '%s'\n%s"
                                   : "npu-serve: flag '%s' needs a value (--name=value)\n%s",
              a, USAGE);
      return 2;
    }
    switch ((enum serve_flag)k) { /* every flag has its case: -Wswitch checks it */
    case FLAG_model_name: *model_name = v; break;
    case FLAG_model_base_path: *base_path = v; break;
    case FLAG_model_config_file: *model_config = v; break;
    case FLAG_platform_config_file: *platform_config = v; break;
    case FLAG_batching_parameters_file: *batching_file = v; break;
    case FLAG_rest_api_address: C.address = v; break;
    case FLAG_enable_batching: C.batching = !v || strcmp(v, "false") != 0; break;
    case FLAG_allowed_batch_sizes:
      for (char *p = (char *)v; *p && C.n_allowed < MAX_ALLOWED;) {
        C.allowed[C.n_allowed++] = (int)strtol(p, &p, 10);
        if (*p == ',') p++;
        else break;
      }
      break;
    case FLAG_rest_api_port: C.rest_port = strtol(v, NULL, 10); break;
    case FLAG_port: C.grpc_port = strtol(v, NULL, 10); break;
    case FLAG_file_system_poll_wait_seconds: C.poll_seconds = strtol(v, NULL, 10); break;
    case FLAG_rest_api_timeout_in_ms: C.timeout_ms = strtol(v, NULL, 10); break;
    case FLAG_max_body_bytes: C.max_body_bytes = strtol(v, NULL, 10); break;
    case FLAG_max_batch_size: C.max_batch_size = strtol(v, NULL, 10); break;
    case FLAG_batch_timeout_micros: C.batch_timeout_micros = strtol(v, NULL, 10); break;
    case FLAG_num_batch_threads: C.num_batch_threads = strtol(v, NULL, 10); break;
    case FLAG_max_enqueued_batches: C.max_enqueued_batches = strtol(v, NULL, 10); break;
    case FLAG_tensorflow_session_parallelism: C.session_parallelism = strtol(v, NULL, 10); break;
    case FLAG_rest_api_num_threads: C.rest_threads_unused = strtol(v, NULL, 10); break;
    case FLAG_model_config_file_poll_wait_seconds:
    case FLAG_allow_version_labels_for_unavailable_models:
    case FLAG_monitoring_config_file:
      fprintf(stderr, "npu-serve: %s accepted and ignored here\n", a);
      break;
    case N_FLAGS: break;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *model_name = NULL, *base_path = NULL, *model_config = NULL, *platform_config = NULL,
             *batching_file = NULL;
  int rc = parse_args(argc, argv, &model_name, &base_path, &model_config, &platform_config, &batching_file);
  if (rc) return rc == 1 ? 0 : 2;
  if (batching_file && load_batching_config(batching_file)) return 1;
  if (C.max_batch_size < 1 || C.num_batch_threads < 1 || C.max_enqueued_batches < 1 || C.batch_timeout_micros < 0) {
    fprintf(stderr, "npu-serve: batching parameters must be positive\n");
    return 2;
  }
  if (model_config) {
    if (load_model_config(model_config)) return 1;
  } else if (base_path) {
    if (!add_model(model_name ? model_name : "default", base_path)) return 1;
  } else {
    fprintf(stderr, "npu-serve: give --model_base_path or --model_config_file\n%s", USAGE);
    return 2;
  }
  if (platform_config && load_platform_config(platform_config)) return 1;

  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL); /* every thread started from here on inherits it */
  signal(SIGPIPE, SIG_IGN);

  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)C.rest_port)};
  if (inet_pton(AF_INET, C.address, &addr.sin_addr) != 1) {
    fprintf(stderr, "npu-serve: --rest_api_address '%s' is not an IPv4 address\n", C.address);
    return 2;
  }
  pthread_t manager;
  for (model *m = S.models; m; m = m->next) poll_model(m); /* the first load, before serving */
  if (pthread_create(&manager, NULL, manager_main, NULL)) return 1;
  struct MHD_Daemon *d = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC | MHD_USE_ERROR_LOG,
      0, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
      MHD_OPTION_END);
  if (!d) {
    fprintf(stderr, "npu-serve: cannot listen on %s:%d\n", C.address, C.rest_port);
    atomic_store(&S.stopping, true);
    pthread_cond_broadcast(&S.stop_cv);
    pthread_join(manager, NULL);
    return 1;
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
  logf_("REST API at http://%s:%u (gRPC port %d is not served)", C.address,
        info ? info->port : (unsigned)C.rest_port, C.grpc_port);
  if (C.batching)
    logf_("batching: max_batch_size %d, batch_timeout_micros %ld, num_batch_threads %d, max_enqueued_batches %ld, %d allowed size(s)",
          C.max_batch_size, C.batch_timeout_micros, C.num_batch_threads, C.max_enqueued_batches, C.n_allowed);

  int sig = 0;
  sigwait(&sigs, &sig);
  logf_("signal %d: draining %d request(s) in flight", sig, atomic_load(&S.in_flight));
  atomic_store(&S.stopping, true);
  MHD_quiesce_daemon(d); /* no new connections; those open finish */
  for (int i = 0; i < 3000 && atomic_load(&S.in_flight) > 0; i++) usleep(10000);
  MHD_stop_daemon(d);
  pthread_mutex_lock(&S.stop_mu);
  pthread_cond_broadcast(&S.stop_cv);
  pthread_mutex_unlock(&S.stop_mu);
  pthread_join(manager, NULL);
  for (model *m = S.models; m; m = m->next)
    for (servable *s = m->versions; s; s = s->next)
      if (s->state == ST_AVAILABLE) unload_version(s);
  logf_("stopped");
  return 0;
}
