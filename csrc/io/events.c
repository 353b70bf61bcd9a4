/*
 * events.c — TensorBoard event files: the writer behind npu.summary.FileWriter and the reader
 * behind npu.summary.read_events (npu.h, "event files"; docs/summaries.md).
 *
 * Format (tensorflow/core/util/event.proto, tensorflow/core/lib/io/record_writer.cc): a file of
 * TFRecords, each
 *     uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes |
 *     length bytes of data | uint32 masked CRC-32C of the data
 * (mask: kernels/ksummary.h), the data an Event { double wall_time = 1; int64 step = 2;
 * oneof { string file_version = 3; bytes graph_def = 4; Summary summary = 5; ... } }.  The
 * first record is the file_version event "brain.Event:2".
 *
 * Writer threads: the caller's thread encodes each record into the `pending` buffer (grown
 * with the context's allocator, under the mutex); a writer thread of its own swaps it for its
 * `spare` buffer and write()s it, so the training thread never waits on the disk.  The writer
 * thread allocates nothing and never touches the context.  It wakes when max_queue records
 * are pending, on flush and close, and every flush_secs.  A failed write (a full disk) cuts the
 * file back to its last whole record, so it stays readable, and keeps the error for the next
 * flush or close, which report it (NPU_ERR_IO) and clear it; the events of that buffer are
 * lost, later ones are written when the disk has room again.  A file that has disappeared (its
 * logdir removed) is reported by flush and close the same way.
 *
 * Reader: the whole file is read at open; each record's CRCs are checked (a mismatch is
 * NPU_ERR_FORMAT naming the file and the offset); an incomplete last record — a writer killed
 * mid-write — ends the iteration the way TensorBoard's reader stops there, its size kept in
 * npu_event_reader_truncated.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "io/graphdef.h"
#include "io/protobuf.h"
#include "kernels/ksummary.h"

enum { EVENT_WALL_TIME = 1, EVENT_STEP = 2, EVENT_FILE_VERSION = 3, EVENT_GRAPH_DEF = 4,
       EVENT_SUMMARY = 5 };

struct npu_event_writer {
  npu_context *ctx; /* retained */
  char *path;
  int fd;
  dev_t dev;
  ino_t ino;
  int max_queue;
  double flush_secs;
  pthread_t thread;
  bool started, closed;
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  /* under mu */
  uint8_t *pending, *spare;
  size_t n_pending, cap_pending, cap_spare;
  int n_records; /* in pending */
  bool stop;
  uint64_t flush_req, flush_done;
  int err;        /* errno of the first failed write not yet reported, 0 when none */
  long lost;      /* records lost to failed writes, not yet reported */
  off_t good;     /* bytes of whole records in the file */
};

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the writer thread --------------------------------------------------------------------- */

static int write_all(int fd, const uint8_t *p, size_t n) {
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return errno;
    if (k == 0) return ENOSPC;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static int count_records(const uint8_t *p, size_t n) {
  int k = 0;
  for (size_t at = 0; at + 12 <= n; k++) {
    uint64_t len = 0;
    for (int i = 0; i < 8; i++) len |= (uint64_t)p[at + i] << (8 * i);
    at += 16 + len;
  }
  return k;
}

static void *writer_main(void *arg) {
  npu_event_writer *w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    /* Wait for a reason to write: max_queue records, a flush, close, or flush_secs with records
       pending.  (Waiting only while nothing was pending wrote whatever the caller had queued
       whenever this thread happened to look: at its start, or after each write.) */
    bool due = false;
    while (!due && !w->stop && w->n_records < w->max_queue && w->flush_done == w->flush_req) {
      struct timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      double secs = w->flush_secs;
      until.tv_sec += (time_t)secs;
      until.tv_nsec += (long)((secs - (double)(time_t)secs) * 1e9);
      if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
      if (pthread_cond_timedwait(&w->work, &w->mu, &until) == ETIMEDOUT && w->n_pending) due = true;
    }
    uint64_t req = w->flush_req;
    if (w->n_pending) {
      uint8_t *buf = w->pending;
      size_t n = w->n_pending, cap = w->cap_pending;
      w->pending = w->spare, w->cap_pending = w->cap_spare;
      w->spare = NULL, w->cap_spare = 0;
      w->n_pending = 0, w->n_records = 0;
      off_t at = w->good;
      pthread_mutex_unlock(&w->mu);
      int e = write_all(w->fd, buf, n);
      if (e) { /* back to the last whole record: the file stays readable */
        if (ftruncate(w->fd, at) != 0 || lseek(w->fd, at, SEEK_SET) < 0) { /* keep e */ }
      }
      pthread_mutex_lock(&w->mu);
      if (e) {
        if (!w->err) w->err = e;
        w->lost += count_records(buf, n);
      } else {
        w->good = at + (off_t)n;
      }
      w->spare = buf, w->cap_spare = cap;
    }
    if (w->n_pending == 0 && w->flush_done != req) {
      w->flush_done = req;
      pthread_cond_broadcast(&w->done);
    }
    if (w->stop && w->n_pending == 0) break;
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

/* ---- queueing records (the caller's thread) ---------------------------------------------- */

/* One record: an Event {wall_time, step, field: payload (length-delimited)}. */
static npu_status queue_event(npu_event_writer *w, double wall_time, int64_t step, int field,
                              const void *payload, size_t n) {
  if (w->closed) return npuC_error(w->ctx, NPU_ERR_STATE, "event writer '%s' is closed", w->path);
  uint8_t head[40];
  size_t h = 0;
  uint64_t bits;
  memcpy(&bits, &wall_time, 8);
  if (bits) {
    head[h++] = EVENT_WALL_TIME << 3 | 1;
    for (int i = 0; i < 8; i++) head[h++] = (uint8_t)(bits >> (8 * i));
  }
  if (step) {
    head[h++] = EVENT_STEP << 3;
    h += npuI_pb_encode_varint(head + h, (uint64_t)step);
  }
  head[h++] = (uint8_t)(field << 3 | 2);
  h += npuI_pb_encode_varint(head + h, n);
  uint64_t len = h + n;
  size_t need = 8 + 4 + (size_t)len + 4;
  pthread_mutex_lock(&w->mu);
  if (w->n_pending + need > w->cap_pending) {
    size_t cap = w->cap_pending ? w->cap_pending : 4096;
    while (cap < w->n_pending + need) cap *= 2;
    uint8_t *grown = npuC_realloc(w->ctx, w->pending, cap);
    if (!grown) {
      pthread_mutex_unlock(&w->mu);
      return NPU_ERR_NOMEM;
    }
    w->pending = grown, w->cap_pending = cap;
  }
  uint8_t *p = w->pending + w->n_pending;
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(len >> (8 * i));
  uint32_t c = npuK_crc32c_masked(p, 8);
  for (int i = 0; i < 4; i++) p[8 + i] = (uint8_t)(c >> (8 * i));
  memcpy(p + 12, head, h);
  if (n) memcpy(p + 12 + h, payload, n);
  c = npuK_crc32c_masked(p + 12, (size_t)len);
  for (int i = 0; i < 4; i++) p[12 + len + i] = (uint8_t)(c >> (8 * i));
  w->n_pending += need;
  if (++w->n_records >= w->max_queue) pthread_cond_signal(&w->work);
  pthread_mutex_unlock(&w->mu);
  return NPU_OK;
}

npu_status npu_event_writer_add_summary(npu_event_writer *w, const void *summary, size_t n,
                                        int64_t step, double wall_time) {
  if (!w || (!summary && n)) return NPU_ERR_ARG;
  return queue_event(w, wall_time < 0 ? wall_now() : wall_time, step, EVENT_SUMMARY,
                     summary, n);
}

npu_status npu_event_writer_add_graph(npu_event_writer *w, npu_graph *g, int64_t step,
                                      double wall_time) {
  if (!w || !g) return NPU_ERR_ARG;
  npu_tensor *def = NULL;
  npu_status s = npuI_graph_serialize_for_drawing(g, &def);
  if (s) return npuC_error_prefix(w->ctx, s, "add_graph: ");
  s = queue_event(w, wall_time < 0 ? wall_now() : wall_time, step, EVENT_GRAPH_DEF,
                  def->data, def->nbytes);
  npu_tensor_release(def);
  return s;
}

/* ---- life ------------------------------------------------------------------------------------ */

static void free_writer(npu_event_writer *w) {
  npu_context *ctx = w->ctx;
  if (w->fd >= 0) close(w->fd);
  npuC_free(ctx, w->pending);
  npuC_free(ctx, w->spare);
  npuC_free(ctx, w->path);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->work);
  pthread_cond_destroy(&w->done);
  npuC_free(ctx, w);
  npu_context_release(ctx);
}

npu_status npu_event_writer_new(npu_context *ctx, const char *logdir,
                                const npu_event_writer_config *cfg, npu_event_writer **out) {
  if (out) *out = NULL;
  if (!ctx || !out || (!logdir && !(cfg && cfg->path)))
    return npuC_error(ctx, NPU_ERR_ARG, "npu_event_writer_new: NULL argument");
  npu_event_writer_config c = cfg ? *cfg : (npu_event_writer_config){0};
  if (c.max_queue < 0 || c.flush_secs < 0)
    return npuC_error(ctx, NPU_ERR_ARG, "event writer: max_queue and flush_secs must be >= 0");
  npu_event_writer *w = npuC_calloc(ctx, 1, sizeof *w);
  if (!w) return NPU_ERR_NOMEM;
  w->ctx = npu_context_retain(ctx);
  w->fd = -1;
  w->max_queue = c.max_queue ? c.max_queue : 10;
  w->flush_secs = c.flush_secs > 0 ? c.flush_secs : 120;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->work, NULL);
  pthread_cond_init(&w->done, NULL);
  npu_status s = NPU_OK;
  if (c.path) {
    w->path = npuC_strdup(ctx, c.path);
  } else {
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "localhost");
    host[sizeof host - 1] = 0;
    const char *suffix = c.filename_suffix ? c.filename_suffix : "";
    size_t n = strlen(logdir) + strlen(host) + strlen(suffix) + 64;
    if ((w->path = npuC_alloc(ctx, n)))
      snprintf(w->path, n, "%s/events.out.tfevents.%010lld.%s%s", logdir,
               (long long)time(NULL), host, suffix);
    if (w->path) s = npuC_make_dirs(ctx, logdir, "FileWriter logdir");
  }
  if (!w->path && !s) s = NPU_ERR_NOMEM;
  if (!s) {
    w->fd = open(w->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    struct stat sb;
    if (w->fd < 0 || fstat(w->fd, &sb) != 0)
      s = npuC_error(ctx, NPU_ERR_IO, "cannot create event file '%s': %s", w->path, strerror(errno));
    else
      w->dev = sb.st_dev, w->ino = sb.st_ino;
  }
  static const char version[] = "brain.Event:2";
  if (!s) s = queue_event(w, wall_now(), 0, EVENT_FILE_VERSION, version, sizeof version - 1);
  if (!s) { /* the version record at once, before the thread: a reader sees a valid event file.
                If it cannot be written (a full disk), it stays queued: the thread's write at
                the next flush meets the same error and reports it, as for any record. */
    if (write_all(w->fd, w->pending, w->n_pending) == 0)
      w->good = (off_t)w->n_pending, w->n_pending = 0, w->n_records = 0;
    else if (ftruncate(w->fd, 0) != 0 || lseek(w->fd, 0, SEEK_SET) < 0) { /* the flush reports */ }
  }
  if (!s) {
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0)
      s = npuC_error(ctx, NPU_ERR_NOMEM, "event writer: cannot start its thread");
    else
      w->started = true;
  }
  if (s) {
    if (w->path && w->fd >= 0 && !c.path) unlink(w->path);
    free_writer(w);
    return s;
  }
  *out = w;
  return NPU_OK;
}

const char *npu_event_writer_path(const npu_event_writer *w) { return w ? w->path : NULL; }

/* The error the writer thread kept, or the file's disappearance; clears the kept one. */
static npu_status report(npu_event_writer *w, int err, long lost) {
  if (err)
    return npuC_error(w->ctx, NPU_ERR_IO, "event file '%s': a write failed (%s): %ld event%s "
                      "lost; the file keeps the events written before", w->path, strerror(err),
                      lost, lost == 1 ? "" : "s");
  struct stat sb;
  if (w->dev && (stat(w->path, &sb) != 0 || sb.st_ino != w->ino || sb.st_dev != w->dev))
    return npuC_error(w->ctx, NPU_ERR_IO, "event file '%s' has disappeared (was its logdir "
                      "removed?): the events written to it are lost", w->path);
  return NPU_OK;
}

npu_status npu_event_writer_flush(npu_event_writer *w) {
  if (!w) return NPU_ERR_ARG;
  if (w->closed) return npuC_error(w->ctx, NPU_ERR_STATE, "event writer '%s' is closed", w->path);
  pthread_mutex_lock(&w->mu);
  uint64_t req = ++w->flush_req;
  pthread_cond_signal(&w->work);
  while (w->flush_done < req) pthread_cond_wait(&w->done, &w->mu);
  int err = w->err;
  long lost = w->lost;
  w->err = 0, w->lost = 0;
  pthread_mutex_unlock(&w->mu);
  return report(w, err, lost);
}

npu_status npu_event_writer_close(npu_event_writer *w) {
  if (!w) return NPU_ERR_ARG;
  if (w->closed) return NPU_OK;
  pthread_mutex_lock(&w->mu);
  w->stop = true;
  pthread_cond_signal(&w->work);
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->thread, NULL);
  w->closed = true;
  npu_status s = report(w, w->err, w->lost);
  w->err = 0, w->lost = 0;
  if (close(w->fd) != 0 && !s)
    s = npuC_error(w->ctx, NPU_ERR_IO, "event file '%s': %s", w->path, strerror(errno));
  w->fd = -1;
  return s;
}

void npu_event_writer_release(npu_event_writer *w) {
  if (!w) return;
  if (!w->closed) (void)npu_event_writer_close(w);
  free_writer(w);
}

/* ---- reading ---------------------------------------------------------------------------------- */

struct npu_event_reader {
  npu_context *ctx;
  char *path;
  char *data;
  size_t n, at;        /* the file, the next record */
  size_t truncated;
  /* the current record's Event and where its summary's values are walked */
  double wall_time;
  int64_t step;
  int64_t offset;
  const uint8_t *summary;
  size_t summary_len, summary_at;
};

npu_status npu_event_reader_open(npu_context *ctx, const char *path, npu_event_reader **out) {
  if (out) *out = NULL;
  if (!ctx || !path || !out) return npuC_error(ctx, NPU_ERR_ARG, "npu_event_reader_open: NULL argument");
  npu_event_reader *r = npuC_calloc(ctx, 1, sizeof *r);
  if (!r) return NPU_ERR_NOMEM;
  r->ctx = npu_context_retain(ctx);
  npu_status s = (r->path = npuC_strdup(ctx, path)) ? NPU_OK : NPU_ERR_NOMEM;
  if (!s) s = npuC_read_file(ctx, path, "event file", &r->data, &r->n);
  if (s) {
    npu_event_reader_release(r);
    return s;
  }
  *out = r;
  return NPU_OK;
}

static uint64_t le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static npu_status bad(npu_event_reader *r, size_t at, const char *what) {
  return npuC_error(r->ctx, NPU_ERR_FORMAT, "event file '%s': record at offset %zu: %s", r->path,
                    at, what);
}

/* The next Event; NPU_ERR_OUT_OF_RANGE at the end (or an incomplete last record). */
static npu_status next_record(npu_event_reader *r, const uint8_t **ev, size_t *len) {
  const uint8_t *p = (const uint8_t *)r->data;
  size_t at = r->at, left = r->n - at;
  if (left == 0) return NPU_ERR_OUT_OF_RANGE;
  if (left < 12) goto truncated;
  uint64_t n = le(p + at, 8);
  if ((uint32_t)le(p + at + 8, 4) != npuK_crc32c_masked(p + at, 8))
    return bad(r, at, "the CRC of its length does not match");
  if (n > left - 12 || left - 12 - n < 4) goto truncated;
  if ((uint32_t)le(p + at + 12 + n, 4) != npuK_crc32c_masked(p + at + 12, (size_t)n))
    return bad(r, at, "the CRC of its data does not match");
  *ev = p + at + 12, *len = (size_t)n;
  r->offset = (int64_t)at;
  r->at = at + 16 + (size_t)n;
  return NPU_OK;
truncated:
  r->truncated = left;
  r->at = r->n;
  return NPU_ERR_OUT_OF_RANGE;
}

static double as_double(uint64_t bits) {
  double d;
  memcpy(&d, &bits, 8);
  return d;
}

static npu_status read_histo(npu_event_reader *r, const uint8_t *p, size_t n, npu_event_value *v) {
  npuI_pb_reader pr = npuI_pb_reader_of(p, n);
  npuI_pb_field f;
  int k;
  while ((k = npuI_pb_next(&pr, &f)) == 1) {
    double d = as_double(f.u);
    switch (f.number) {
    case 1: v->min = d; break;
    case 2: v->max = d; break;
    case 3: v->num = d; break;
    case 4: v->sum = d; break;
    case 5: v->sum_squares = d; break;
    case 6: case 7:
      if (f.wire != NPUI_PB_BYTES || f.len % 8) return bad(r, (size_t)r->offset, "a histogram's buckets are not packed doubles");
      if (f.number == 6) v->bucket_limits = f.data; else v->buckets = f.data;
      v->n_buckets = (int)(f.len / 8);
      break;
    default: break;
    }
  }
  return k < 0 ? bad(r, (size_t)r->offset, "a malformed histogram") : NPU_OK;
}

static npu_status read_value(npu_event_reader *r, const uint8_t *p, size_t n, npu_event_value *v) {
  npuI_pb_reader pr = npuI_pb_reader_of(p, n);
  npuI_pb_field f, g;
  int k;
  v->kind = NPU_EVENT_OTHER;
  while ((k = npuI_pb_next(&pr, &f)) == 1) {
    if (f.number == 1 && f.wire == NPUI_PB_BYTES) v->tag = (const char *)f.data, v->tag_len = f.len;
    else if (f.number == 2 && f.wire == NPUI_PB_FIXED32) {
      float x;
      uint32_t bits = (uint32_t)f.u;
      memcpy(&x, &bits, 4);
      v->kind = NPU_EVENT_SCALAR, v->simple_value = x;
    } else if (f.number == 5 && f.wire == NPUI_PB_BYTES) {
      v->kind = NPU_EVENT_HISTOGRAM;
      npu_status s = read_histo(r, f.data, f.len, v);
      if (s) return s;
    } else if ((f.number == 4 || f.number == 8 || f.number == 9) && f.wire == NPUI_PB_BYTES) {
      npuI_pb_reader sub = npuI_pb_reader_of(f.data, f.len);
      if (f.number != 9) v->kind = f.number == 4 ? NPU_EVENT_IMAGE : NPU_EVENT_TENSOR;
      while ((k = npuI_pb_next(&sub, &g)) == 1) {
        if (f.number == 4) { /* Image */
          if (g.number == 1) v->height = (int64_t)g.u;
          else if (g.number == 2) v->width = (int64_t)g.u;
          else if (g.number == 3) v->colorspace = (int64_t)g.u;
          else if (g.number == 4) v->data = g.data, v->n_data = g.len;
        } else if (f.number == 8) { /* TensorProto: the first string_val */
          if (g.number == 1) v->tensor_dtype = (int)g.u;
          else if (g.number == 8 && !v->data) v->data = g.data, v->n_data = g.len;
        } else if (g.number == 1 && g.wire == NPUI_PB_BYTES) { /* metadata.plugin_data */
          npuI_pb_reader pd = npuI_pb_reader_of(g.data, g.len);
          npuI_pb_field h;
          while (npuI_pb_next(&pd, &h) == 1)
            if (h.number == 1) v->plugin_name = (const char *)h.data, v->plugin_name_len = h.len;
        }
      }
      if (k < 0) break;
    }
  }
  return k < 0 ? bad(r, (size_t)r->offset, "a malformed summary value") : NPU_OK;
}

npu_status npu_event_reader_next(npu_event_reader *r, npu_event_value *v) {
  if (!r || !v) return NPU_ERR_ARG;
  for (;;) {
    if (r->summary) { /* the next value of the current summary */
      npuI_pb_reader pr = npuI_pb_reader_of(r->summary + r->summary_at, r->summary_len - r->summary_at);
      npuI_pb_field f;
      int k;
      while ((k = npuI_pb_next(&pr, &f)) == 1 && !(f.number == 1 && f.wire == NPUI_PB_BYTES)) {}
      if (k < 0) return bad(r, (size_t)r->offset, "a malformed summary");
      if (k == 1) {
        r->summary_at = (size_t)(pr.p - r->summary);
        *v = (npu_event_value){.step = r->step, .wall_time = r->wall_time, .offset = r->offset};
        return read_value(r, f.data, f.len, v);
      }
      r->summary = NULL;
    }
    const uint8_t *ev = NULL;
    size_t len = 0;
    npu_status s = next_record(r, &ev, &len);
    if (s) return s;
    npuI_pb_reader pr = npuI_pb_reader_of(ev, len);
    npuI_pb_field f;
    int k;
    *v = (npu_event_value){.kind = NPU_EVENT_OTHER, .offset = r->offset};
    bool summary = false;
    while ((k = npuI_pb_next(&pr, &f)) == 1) {
      if (f.number == EVENT_WALL_TIME) v->wall_time = as_double(f.u);
      else if (f.number == EVENT_STEP) v->step = (int64_t)f.u;
      else if (f.number == EVENT_FILE_VERSION || f.number == EVENT_GRAPH_DEF) {
        v->kind = f.number == EVENT_FILE_VERSION ? NPU_EVENT_FILE_VERSION : NPU_EVENT_GRAPH;
        v->data = f.data, v->n_data = f.len;
      } else if (f.number == EVENT_SUMMARY && f.wire == NPUI_PB_BYTES) {
        summary = true;
        r->summary = f.data, r->summary_len = f.len, r->summary_at = 0;
      }
    }
    if (k < 0) return bad(r, (size_t)r->offset, "not an Event");
    r->step = v->step, r->wall_time = v->wall_time;
    if (!summary) return NPU_OK; /* an Event without summary values is one item */
  }
}

size_t npu_event_reader_truncated(const npu_event_reader *r) { return r ? r->truncated : 0; }

void npu_event_reader_release(npu_event_reader *r) {
  if (!r) return;
  npu_context *ctx = r->ctx;
  npuC_free(ctx, r->data);
  npuC_free(ctx, r->path);
  npuC_free(ctx, r);
  npu_context_release(ctx);
}
