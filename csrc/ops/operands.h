/*
 * operands.h — attributes that TensorFlow passes as constant INPUTS (Tile's multiples,
 * GatherV2's axis, StridedSlice's begin/end/strides, Range's start/limit/delta, ...), for the
 * op files that accept them either way: as the attribute of that name, or as an input.
 *
 * The rule (the GraphDef importer's, so an imported node and a hand-built one read alike):
 * an op lists its operands in TensorFlow's input order; those given as attributes are taken
 * from the attributes, and the others, in that order, from the inputs at positions
 * first, first + 1, ... (first = the number of data inputs before them; 0 for Split's
 * leading axis, Fill's dims, Range's start).  An operand input must be known before the
 * output can be allocated: a constant at build time, or a value the compiler folds (Shape ->
 * StridedSlice -> Pack -> Reshape); until then the dims it decides are -1.  At run time the
 * op reads the same input again (it is a constant by then).
 */
#ifndef NPU_OPS_OPERANDS_H
#define NPU_OPS_OPERANDS_H

#include "ops/ops.h"

#define NPUX_MAX_OPERANDS 6

/* Where each operand comes from. */
enum { NPUX_OPERAND_ABSENT = -2, NPUX_OPERAND_ATTR = -1 /* >= 0: that input */ };

typedef struct npuX_operands {
  int8_t slot[NPUX_MAX_OPERANDS];
} npuX_operands;

/* parse: binds names[0..n) (n <= NPUX_MAX_OPERANDS) to attributes or to the inputs from
   `first` on.  Inputs left over (more than the operands not given as attributes) are
   NPU_ERR_ARG naming them. `n_data_after` inputs after the operand inputs are data (Split's
   value), not operands. */
npu_status npuX_operands_bind(npuX_infer *ic, const char *const *names, int n, int first,
                              int n_data_after, npuX_operands *o);

/* An int list operand: from its attribute, or from its input when its value is known now
   (int32/int64 of rank 0, 1 or 2, read in row-major order (paddings), at most max entries).
   *known is false (and *n the length when the input's shape tells it, else -1) for an input
   whose value is not known yet; absent: *known true, *n 0.  Errors (NPU_ERR_DTYPE,
   NPU_ERR_SHAPE) name the operand. */
npu_status npuX_operand_ints(npuX_infer *ic, const npuX_operands *o, const char *const *names,
                             int k, int64_t *v, int max, int *n, bool *known);

/* A scalar operand (a number attribute or a rank-0 / one-element input of any real dtype):
   *v and, when it is integral, *iv; *is_int when it was given as an integer (an int attribute
   or an integer input).  Absent: nothing set, *known true.  *known false: not known yet. */
npu_status npuX_operand_scalar(npuX_infer *ic, const npuX_operands *o, const char *const *names,
                               int k, double *v, int64_t *iv, bool *is_int, bool *known);

/* Run time: the ints held by t (int32 or int64, rank <= 1); the count, or -1 when more than max. */
int npuX_tensor_ints(const npu_tensor *t, int64_t *v, int max);
/* Run time: element 0 of t as a double and as an int64. */
void npuX_tensor_scalar(const npu_tensor *t, double *v, int64_t *iv);
/* Run time: operand k, an axis (`attr` when not an input), normalised to x's rank; *outer and
   *inner the element counts of x's dims before and after it (split, split_v, gather). */
int64_t npuX_run_axis(const npuX_call *c, const npuX_operands *o, int k, int64_t attr,
                      const npu_tensor *x, int64_t *outer, int64_t *inner);

/* space_to_batch_nd / batch_to_space_nd: operands names[0] = "block_shape" (M ints >= 1)
   and names[1] ("paddings" / "crops": M (before, after) pairs >= 0), both required. */
#define NPUX_BLOCK_M_MAX (NPU_MAX_DIMS - 1)
typedef struct npuX_block_params {
  npuX_operands o;
  int n_block, n_pads; /* the attributes' values */
  int64_t block[NPUX_BLOCK_M_MAX], pads[2 * NPUX_BLOCK_M_MAX];
} npuX_block_params;
npu_status npuX_block_parse(npuX_infer *ic, const char *const names[2], npuX_block_params *p);
/* infer: y = x's dtype and rank, dims after the M spatial ones copied, the others -1; block,
   pads, *m (M) and *prod (block's product) read and checked.  *m is -1 when the op can tell
   nothing more. */
npu_status npuX_block_infer(npuX_infer *ic, const char *const names[2],
                            const npuX_block_params *p, int64_t *block, int64_t *pads, int *m,
                            int64_t *prod);
/* run: the operands' values and *inner, the element count of x's dims after the M spatial
   ones (the rows the kernels copy); returns M. */
int npuX_block_values(const npuX_call *c, const npuX_block_params *p, int64_t *block,
                      int64_t *pads, int64_t *inner);

#endif
