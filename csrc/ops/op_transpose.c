/*
 * op_transpose.c — transpose: y's axis i is x's axis perm[i] (TensorFlow Transpose, whose perm
 * input is an attribute here).  Attribute perm (ints, also positional: npu.transpose(x,
 * {1, 0}); negative entries count from the end; default: the axes reversed); it must be a
 * permutation of x's axes.  Any dtype.  Gray list: moves data, never rounds.
 * Device: npuK_transpose (tiled).  Reference: npuK_transpose_ref.
 * Gradient: dy transposed by the inverse permutation.
 */
#include "ops/grad.h"

typedef struct transpose_params {
  bool given; /* false: reversed axes */
  int n_perm;
  int64_t perm[NPU_MAX_DIMS];
} transpose_params;
_Static_assert(sizeof(transpose_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  transpose_params *p = params;
  p->given = npuX_attr_find(ic, "perm") != NULL;
  npu_status st = npuX_attr_ints(ic, "perm", p->perm, NPU_MAX_DIMS, &p->n_perm);
  if (st) return st;
  /* Checks that need no rank: entries in range of the list's own length, no repeats. */
  bool seen[NPU_MAX_DIMS] = {false};
  char s[96];
  for (int i = 0; i < p->n_perm; i++) {
    int64_t a = p->perm[i] < 0 ? p->perm[i] + p->n_perm : p->perm[i];
    if (a < 0 || a >= p->n_perm || seen[a])
      return npuX_error(ic, NPU_ERR_ARG, "perm %s is not a permutation of 0..%d",
                        npuC_shape_str(s, sizeof s, p->n_perm, p->perm), p->n_perm - 1);
    seen[a] = true;
  }
  return NPU_OK;
}

/* The normalised permutation for rank ndim (the default when the attribute is absent). */
static void resolve_perm(const transpose_params *p, int ndim, int *perm) {
  for (int i = 0; i < ndim; i++)
    perm[i] = p->given ? (int)(p->perm[i] < 0 ? p->perm[i] + ndim : p->perm[i]) : ndim - 1 - i;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const transpose_params *p = params;
  const npuG_value *x = &ic->in[0];
  npuG_value *y = &ic->out[0];
  ic->n_outputs = 1;
  *y = (npuG_value){.dtype = x->dtype, .ndim = x->ndim};
  if (x->ndim < 0) { /* rank unknown: a given perm still fixes the rank */
    y->ndim = p->given ? p->n_perm : -1;
    for (int i = 0; i < p->n_perm; i++) y->shape[i] = -1;
    return NPU_OK;
  }
  char sx[96], s[96];
  if (p->given && p->n_perm != x->ndim)
    return npuX_error(ic, NPU_ERR_SHAPE, "perm %s has %d entries but input %s has rank %d",
                      npuC_shape_str(s, sizeof s, p->n_perm, p->perm), p->n_perm,
                      npuX_shape(sx, x), x->ndim);
  int perm[NPU_MAX_DIMS];
  resolve_perm(p, x->ndim, perm);
  for (int i = 0; i < x->ndim; i++) y->shape[i] = x->shape[perm[i]];
  return NPU_OK;
}

static npu_status run_impl(const npuX_call *c, bool reference) {
  const npu_tensor *x = c->in[0];
  int perm[NPU_MAX_DIMS];
  resolve_perm(c->params, x->ndim, perm);
  (reference ? npuK_transpose_ref : npuK_transpose)(c->pool, npu_dtype_size(x->dtype), x->ndim,
                                                    x->shape, perm, x->data, c->out[0]->data);
  return NPU_OK;
}

/* The inverse permutation (perm[i] = j -> inverse[j] = i); reversal is its own inverse. */
static npu_status grad(npuX_grad *gc) {
  const transpose_params *p = (const transpose_params *)gc->params.bytes;
  if (!p->given) {
    gc->dx[0] = npuX_g1(gc, "transpose", gc->dy[0]);
    return gc->status;
  }
  int64_t inverse[NPU_MAX_DIMS];
  for (int i = 0; i < p->n_perm; i++)
    inverse[p->perm[i] < 0 ? p->perm[i] + p->n_perm : p->perm[i]] = i;
  npu_attr a = npuX_aints("perm", inverse, p->n_perm);
  gc->dx[0] = npuX_gadd(gc, "transpose", 1, &gc->dy[0], 1, &a);
  return gc->status;
}

static npu_status run(const npuX_call *c) { return run_impl(c, false); }
static npu_status run_ref(const npuX_call *c) { return run_impl(c, true); }

const npu_op_def npuX_op_transpose = {
    .name = "transpose", .tf_type = "Transpose", .args = "perm", .min_inputs = 1,
    .max_inputs = 1, .n_outputs = 1, .prec = NPUX_PREC_GRAY, .parse = parse, .infer = infer,
    .run = run, .run_ref = run_ref, .grad = grad, .tf_const_inputs = "perm",
    .flags = NPUX_F_MOVES};
