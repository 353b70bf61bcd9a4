/*
 * dataset.h — input pipelines (tf.data) on the device: the dataset description and what the
 * executor needs of iterators.  The public API is in npu.h ("datasets"); this is the layout.
 *
 * A dataset is an immutable chain of stages ending at a source: each derived dataset retains
 * its input, so a description can be shared by graphs, iterators and threads without locks.
 * An element of any stage is a list of source rows plus the sizes of its batch dims
 * (outer first): batching stacks rows, so no stage ever materialises a tensor except the
 * last, which gathers the rows into the element's buffers (exec/dataset.c).
 */
#ifndef NPU_DATASET_H
#define NPU_DATASET_H

#include "core/npu_int.h"

#define NPUE_DS_MAX_COMPONENTS 16 /* = NPUX_MAX_OUTPUTS: one get_next output per component */

typedef enum npuE_ds_kind {
  NPUE_DS_SOURCE = 0, /* from_tensors: the slices of the components along dim 0 */
  NPUE_DS_SHUFFLE,    /* n = buffer size (cut to the input's cardinality), seed, flag = reshuffle */
  NPUE_DS_BATCH,      /* n = batch size, flag = drop_remainder */
  NPUE_DS_REPEAT,     /* n = count, -1 forever */
  NPUE_DS_PREFETCH,   /* n = queue capacity */
  NPUE_DS_SHARD       /* n = num_shards, index = the shard kept */
} npuE_ds_kind;

/* One component of an element: dtype and shape, -1 for a batch dim that may be partial. */
typedef struct npuE_ds_spec {
  npu_dtype dtype;
  int ndim;
  int64_t shape[NPU_MAX_DIMS];
} npuE_ds_spec;

struct npu_dataset {
  atomic_int refcount;
  npu_context *ctx;      /* retained: the blocks below are freed through it */
  npuE_ds_kind kind;
  npu_dataset *input;    /* retained; NULL for the source */
  const npu_dataset *source; /* the chain's source (borrowed through input) */
  int depth;             /* stages below this one (0: the source) */
  int64_t n;             /* the stage's size parameter (see npuE_ds_kind) */
  uint64_t seed;
  int64_t index;         /* shard: input element i is kept when i % n == index */
  bool flag;
  /* source only: the components (retained) and their common dim 0 */
  npu_tensor **components;
  int64_t n_rows;
  /* the element */
  int n_components;
  npuE_ds_spec *spec;    /* n_components */
  int n_batch;           /* leading batch dims of every component */
  int64_t max_batch[NPU_MAX_DIMS]; /* their largest sizes (batch sizes), outer first */
  int64_t max_rows;      /* source rows in an element at most: the product of max_batch */
  int64_t cardinality;   /* elements per pass, -1 infinite */
  int64_t capacity;      /* the iterator queue's capacity: the outermost prefetch */
  bool capacity_auto;    /* no explicit prefetch (or AUTOTUNE): sized by bytes per iterator */
};

/* The iterators of one session (exec/iterators.c): one per iterator_get_next node, created
   on its first use, released with the session.  Zero-initialise; no locking (a session runs
   on one thread at a time). */
typedef struct npuE_iterators {
  npu_iterator **by_node; /* indexed by node id; NULL until the node first runs */
  int n;                  /* entries in by_node */
  /* waits for an element poll the run's watch (NULL: none) and give up after wait_ms
     (op_wait_timeout; 0: never): see npuE_iterator_next */
  npuC_watch *watch;
  int64_t wait_ms;
} npuE_iterators;

/* The next element of iterator_get_next node `node` of g into out[0 .. n_outputs-1] (new
   references; NULL on failure).  NPU_ERR_OUT_OF_RANGE once its dataset is exhausted: the
   message reads "end of data (iterator_get_next '<node>')".  Errors: NPU_ERR_ARG (not such a
   node), NPU_ERR_NOMEM, the iterator's (npu_iterator_next). */
npu_status npuE_iterators_next(npu_context *ctx, npuE_iterators *its, const npu_graph *g,
                               int node, npu_tensor **out);
/* The shapes of the element npuE_iterators_next would give node next, without taking it
   (its iterator is created if need be): ndims[c] and shapes[c] per component; *has false at
   the end of the data.  Errors: those of npuE_iterators_next but the end of data. */
npu_status npuE_iterators_peek(npu_context *ctx, npuE_iterators *its, const npu_graph *g,
                               int node, int *ndims, int64_t (*shapes)[NPU_MAX_DIMS], bool *has);
/* dataset.c: the same for one iterator (nothing created). */
npu_status npuE_iterator_peek(npu_iterator *it, int *ndims, int64_t (*shapes)[NPU_MAX_DIMS],
                              bool *has, npuC_watch *w, int64_t wait_ms);
/* npu_iterator_next for the executor: the wait for an element polls w (a millisecond at a
   time) and fails with NPU_ERR_CANCELLED / NPU_ERR_TIMEOUT, no message set, when the run must
   stop; and with NPU_ERR_TIMEOUT "no element within op_wait_timeout (N s)" when wait_ms > 0
   passes first.  w NULL and wait_ms 0: npu_iterator_next. */
npu_status npuE_iterator_next(npu_iterator *it, npu_tensor **components_out, npuC_watch *w,
                              int64_t wait_ms);
/* Releases every iterator (joining their producers) and the table; *its is zeroed. */
void npuE_iterators_free(npu_context *ctx, npuE_iterators *its);

#endif
