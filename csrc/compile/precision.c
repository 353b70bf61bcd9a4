/*
 * precision.c — the precision pass: the dtype each step computes in, by precision mode
 * (precision_mode / precision_mode_v2), the precision lists, modify_mixlist, customize_dtypes
 * and keep_tensors_dtypes; then half-size storage and the Cast steps it needs.
 *
 * What each mode does to a kernel step's graph-float32 operands (000):
 *
 *   must_keep_origin_dtype, origin      nothing; customize_dtypes and keep marks ignored
 *   allow_fp32_to_bf16                  nothing (every op here supports float32), but
 *                                       customize_dtypes applies
 *   force_fp16, fp16                    every op float16 in and out, block-list ops included:
 *                                       000 forces float16 on every op that supports it, and
 *                                       every op here does (through float32 kernels)
 *   allow_fp32_to_fp16                  cube ops (the built-in trust list: matmul, conv, ...)
 *                                       float16 in and out; vector ops keep float32
 *   force_fp32, cube_fp16in_fp32out     cube ops float16 in, float32 out
 *   allow_mix_precision(_fp16),         trust-list ops float16 (bfloat16) in and out,
 *   mixed_float16, _bf16, mixed_bfloat16   block-list ops float32, gray-list ops follow their
 *                                       upstream; the lists are modify_mixlist's (mixlist.c)
 *
 * Gray ops follow upstream (002 §5.1), by what each float32 value is: "reduced" (a step wrote it
 * in float16/bfloat16), "kept" (written by a block-list op, a kept or customised-float32 op, or a
 * gray op downstream of one) or "neutral" (feeds, constants, variables, dataset elements, gray
 * ops fed only by those).  A gray op with any kept float input stays float32 (and its outputs
 * are kept); otherwise, with any reduced float input, it computes in that input's reduced dtype
 * (its other float inputs are cast down); otherwise float32.  So with mixed inputs float32 wins:
 * a block-list op's choice is never undone downstream.  Identity passes its input's state on.
 *
 * Overrides, in every mode but origin: a node marked by keep_tensors_dtypes (npu_graph_keep_dtype)
 * keeps its graph dtypes, and so does a step whose output an assign writes into a variable (a
 * training update: weights stay float32 and their updates are not rounded), customize_dtypes
 * or not; otherwise customize_dtypes (the node's line, else its op type's line) sets the dtypes
 * of the operands it lists and the mode decides the rest.  Cast nodes of the graph never
 * change: the conversion they make is their point.  A fused step (fusion.c) is treated as its
 * base op (the node it keeps, whose name and type customize_dtypes and the lists match), except
 * that one that absorbed a block-list op counts as block-listed: fusing never lowers precision.
 *
 * Storage: a graph value v written in a reduced dtype lives in a new plan value (a "shadow":
 * same shape, float16 or bfloat16, 2 bytes an element) and the step writes that; v itself is
 * written only if something needs it in float32 — a float32 consumer, a non-kernel step
 * (identity, assign: variables keep their dtype), or a fetch (users get the graph's dtype).
 * Where a consumer wants another dtype than the one stored, a Cast step (op cast, pass
 * "precision") is inserted before the first consumer that needs it, once per value and dtype;
 * a constant (or folded) value is cast now, at compile time; a variable's Cast, in a plan
 * that does not write the variable, becomes its kept copy (mark_variable_copies: made again
 * only after the variable is written, docs/compiler.md).  Kernels compute in float32.
 * Elementwise steps (ops flagged NPUX_F_HALF_IO: unary, binary, the fused elementwise program)
 * read and write reduced operands themselves, widening and narrowing a block of ~1024 elements
 * at a time on the stack; steps that only move elements (NPUX_F_MOVES: reshape, pad, transpose,
 * concat, ...) move them as stored when their float operands share one stored dtype.
 * Convolutions, matmul and pools (NPUX_F_HALF_XY: conv2d, depthwise_conv2d, matmul, their
 * fused steps, max_pool, avg_pool) take x (input 0) and y (output 0) as stored: the kernel
 * widens x by im2col / GEMM blocks or row bands (the direct convolution, conv_direct.c: each
 * image or band of rows once, into the copy it reads) and narrows y by blocks inside its scratch,
 * which is asked for again here with the stored dtypes (it grows by those blocks; float32
 * plans keep theirs).  matmul also takes B (input 1, the weights) as stored (NPUX_F_HALF_B):
 * read by panels, or in registers by its matrix-vector path, instead of widened whole each run.
 * conv2d's gradients (NPUX_F_BF16_DOT: conv2d_backprop_filter's x, dy and df,
 * conv2d_backprop_input's filter, dy and dx) take their operands as stored when both data
 * inputs are bfloat16 and the CPU has AVX512_BF16 (npuK_bf16dot(); NPU_NO_AVX512BF16=1 turns
 * it off): they compute on bfloat16 by VDPBF16PS (kernels/conv_bwd_bf16.c, its own bounds)
 * rather than on widened copies; otherwise the executor widens them, as for the steps below.
 * The fused max-pool gradient (fused_max_pool_grad_relu_grad) takes x, dy, the features and dx
 * as stored when all four are bfloat16, converting as it loads and stores (float16 ones are
 * widened: its per-lane float16 conversion is slower); under allow_mix_precision_bf16 the
 * bias_add_grad it absorbed (fusion.c) keeps only its own output float32, not the whole step
 * (decide).
 * A host_func step keeps the graph's dtypes (its host returns Tout's; see decide).
 * The bias and prelu slopes of a fused convolution or matmul stay float32 in every mode
 * (keep_epilogue_f32).  For the other steps (softmax, batch_matmul, ...) and the other reduced
 * operands of those (weights: widen flags set here; plan.c's prepare_steps drops a conv
 * filter's once the algorithm is final where direct_bf16 reads it prepared or, stored
 * bfloat16, as stored) the executor widens the reduced inputs into a float32
 * buffer (p->round_buf, or the step's place in the memory arena), lets the kernel write its reduced outputs there, and narrows them into their slots
 * (exec.c; npuE_step.widen says which operands).  Either way a float16 value is exactly what
 * rounding to float16 gives, and results equal rounding float32 values at the same points bit for
 * bit, but for matmul's matrix-vector path on a float16 B: a float32 sum in its own order, within
 * the GEMV bound (kernels.h).  The conversions run on F16C where the CPU has it (kernels/cast.c),
 * and the fused elementwise program reads dense float16 operands as stored (same bits;
 * docs/compiler.md has the times).  The block-wise paths only avoid the full-size float32 copies
 * (blazeface under force_fp16: the largest widening buffer fell from 4.5 MiB, an add of two
 * float16 maps, to 3 MiB, a convolution's, then to nothing once convolutions and pools took x and
 * y as stored (its weights are float16 values already); its plan went from 113 % of float32's to
 * 85 %).  A float32 constant
 * feeding a reduced step is stored rounded, as float16 (half the bytes; steps that widen read it
 * widened each run, elementwise ones a block at a time).  Keeping it rounded but as float32
 * instead (no per-run widening, same bits) was measured and rejected: it doubles the constant,
 * which is plan memory (explain's constant_bytes), so emotion's force_fp16 plan rose to 2138 KiB,
 * above float32's 2078 (mobileface: 3128 -> 3448, float32 3701), and latency did not measurably
 * improve (the weights' widening is small beside the activations' conversions).  A constant whose
 * elements all are float16 (bfloat16) values already — weights saved in float16 — is
 * read as it is, with nothing copied or widened.
 *
 * The pass runs after fusion and before implementation selection and memory planning
 * (passes.h); the reference path (use_off_line = false) keeps every dtype.
 */
#include <stdio.h>
#include <string.h>

#include "compile/fused_ops.h"
#include "compile/passes.h"
#include "compile/precision.h"
#include "core/half.h"
#include "options/options_int.h"

static const struct {
  const char *name;
  npuP_precision mode;
} names[] = {
    {"must_keep_origin_dtype", NPUP_ORIGIN},     {"origin", NPUP_ORIGIN},
    {"allow_fp32_to_bf16", NPUP_FP32_TO_BF16},   {"force_fp16", NPUP_FORCE_FP16},
    {"fp16", NPUP_FORCE_FP16},                   {"allow_fp32_to_fp16", NPUP_FP32_TO_FP16},
    {"force_fp32", NPUP_CUBE_FP16_IN},           {"cube_fp16in_fp32out", NPUP_CUBE_FP16_IN},
    {"allow_mix_precision", NPUP_MIX_FP16},      {"allow_mix_precision_fp16", NPUP_MIX_FP16},
    {"mixed_float16", NPUP_MIX_FP16},            {"allow_mix_precision_bf16", NPUP_MIX_BF16},
    {"mixed_bfloat16", NPUP_MIX_BF16},
};

npuP_precision npuP_precision_mode(const npu_options *o) {
  /* The two options cannot both be set (npu_options_check); an unset precision_mode_v2 leaves
     precision_mode, whose default follows graph_run_mode. */
  const char *v = npuO_is_set(o, NPUO_precision_mode_v2) ? npuO_string(o, NPUO_precision_mode_v2)
                                                         : npuO_string(o, NPUO_precision_mode);
  for (size_t i = 0; i < npu_countof(names); i++)
    if (strcmp(v, names[i].name) == 0) return names[i].mode;
  return NPUP_ORIGIN;
}

/* What a mode does to a step by the op's list: its reduced dtype for float32 inputs and for
   float32 outputs (NPU_DTYPE_COUNT: unchanged), or `follow` for gray ops in mixed modes. */
typedef struct mode_rule {
  npu_dtype reduced;
  bool cube_only;  /* only built-in trust-list (cube) ops change */
  bool inputs_only; /* outputs stay float32 */
  bool mixed;      /* by the (modified) lists: trust reduced, block kept, gray follows */
} mode_rule;

static const mode_rule mode_rules[] = {
    [NPUP_ORIGIN] = {NPU_DTYPE_COUNT, false, false, false},
    [NPUP_FORCE_FP16] = {NPU_DTYPE_F16, false, false, false},
    [NPUP_FP32_TO_FP16] = {NPU_DTYPE_F16, true, false, false},
    [NPUP_CUBE_FP16_IN] = {NPU_DTYPE_F16, true, true, false},
    [NPUP_MIX_FP16] = {NPU_DTYPE_F16, false, false, true},
    [NPUP_MIX_BF16] = {NPU_DTYPE_BF16, false, false, true},
    [NPUP_FP32_TO_BF16] = {NPU_DTYPE_COUNT, false, false, false},
};

/* ---- the pass ----------------------------------------------------------------------------- */

/* What a graph float32 value is, for the gray ops it feeds (see the head comment). */
enum { ST_NEUTRAL = 0, ST_KEPT, ST_F16, ST_BF16 };

typedef struct pr {
  npuP_build *b;
  npu_context *ctx;
  npuE_plan *p;
  const npu_graph *g;
  npuP_precision mode;
  const struct npuP_mix_config *mix;
  int n0;          /* the plan's values before this pass: graph value ids */
  uint8_t *state;  /* by graph value id: ST_* */
  uint8_t *assigned; /* by graph value id: an assign writes it into a variable */
  int *rep;        /* by graph value id x 3: the plan value holding it in its graph dtype,
                      float16, bfloat16; -1 = not (yet) written */
  npuE_step *steps; /* the new step list */
  int n_steps;
} pr;

static int rep_index(npu_dtype stored, npu_dtype graph) {
  return stored == graph ? 0 : stored == NPU_DTYPE_F16 ? 1 : 2;
}

/* A new plan value: v's descriptor in dtype dt. Capacity was reserved by the caller. */
static int new_value(pr *r, int v, npu_dtype dt) {
  npuE_plan *p = r->p;
  int n = p->n_values++;
  p->values[n] = p->values[v];
  p->values[n].dtype = dt;
  p->slots[n] = NULL;
  p->owned[n] = 0;
  r->b->known[n] = NULL;
  return n;
}

/* Whether every element of float32 tensor t is a value of dt (float16 or bfloat16). */
static bool exact_in(const npu_tensor *t, npu_dtype dt) {
  if (t->dtype != NPU_DTYPE_F32) return false;
  const float *x = t->data;
  for (int64_t i = 0; i < t->numel; i++) {
    float back = dt == NPU_DTYPE_F16 ? npu_f16_to_f32(npu_f32_to_f16(x[i]))
                                     : npu_bf16_to_f32(npu_f32_to_bf16(x[i]));
    if (npu_f32_bits(back) != npu_f32_bits(x[i])) return false;
  }
  return true;
}

/* The plan value holding graph value v stored as dt, made now if missing: cast at compile
   time from a known value, else by a Cast step appended to the new list (so it runs before
   the step that asked, placed next). */
static npu_status need_rep(pr *r, int v, npu_dtype dt, int *out) {
  npuE_plan *p = r->p;
  npu_dtype gdt = p->values[v].dtype;
  int *rep = &r->rep[3 * v];
  int idx = rep_index(dt, gdt);
  *out = rep[idx];
  if (*out >= 0) return NPU_OK;
  int src = rep[0] >= 0 ? rep[0] : rep[1] >= 0 ? rep[1] : rep[2];
  if (src < 0) { /* nothing writes v: leave it for the verifier to name */
    *out = v;
    return NPU_OK;
  }
  npu_tensor *known = r->b->known[src];
  if (known && idx != 0 && src == v && exact_in(known, dt)) {
    /* a constant whose values all are float16 (bfloat16) values already, as weights saved in
       float16 are: the kernel reads it as it is, nothing to copy or widen */
    rep[idx] = *out = v;
    return NPU_OK;
  }
  int dst = idx == 0 ? v : new_value(r, v, dt);
  if (known) {
    const npuG_value *d = &p->values[dst];
    npu_tensor *t;
    npu_status s = npu_tensor_new(r->ctx, dt, d->ndim, d->shape, &t);
    if (s) return s;
    npuK_cast(NULL, t->numel, (npuK_dtype)known->dtype, known->data, (npuK_dtype)dt, t->data);
    p->slots[dst] = r->b->known[dst] = t;
    p->owned[dst] = 1;
  } else {
    npuE_step *c = &r->steps[r->n_steps];
    *c = (npuE_step){.node = p->values[v].node, .def = &npuX_op_cast, .pass = "precision",
                     .n_in = 1, .n_out = 1, .round_in = -1, .round_out = -1};
    if (!(c->in = npuC_alloc(r->ctx, 3 * sizeof *c->in))) return NPU_ERR_NOMEM;
    c->out = c->in + 1;
    c->in[0] = src;
    c->out[0] = dst;
    r->n_steps++;
  }
  rep[idx] = dst;
  *out = dst;
  return NPU_OK;
}

static npu_status rule_error(pr *r, const npuP_dtype_rule *rule, const npuG_node *node,
                             npu_status st, const char *what) {
  return npuC_error(r->ctx, st, "customize_dtypes '%s' line %d: node '%s' (%s): %s",
                    r->mix->dtypes_path, rule->line, node->name, npuX_op(node->op)->name, what);
}

/* The customize_dtypes line's dtypes over want[] (inputs then outputs), checked against the
   step: as many operands as the line gives, and dtypes each operand can take here — a float32
   value may be computed as float32, float16 or bfloat16, any other keeps its dtype. */
static npu_status apply_rule(pr *r, const npuE_step *st, const npuP_dtype_rule *rule,
                             npu_dtype *want) {
  const npuG_node *node = &r->g->nodes[st->node];
  char what[200];
  if (rule->n_in > st->n_in || rule->n_out > st->n_out) {
    bool in = rule->n_in > st->n_in;
    snprintf(what, sizeof what, "the line gives %d %s dtype(s), the node has %d",
             in ? rule->n_in : rule->n_out, in ? "input" : "output", in ? st->n_in : st->n_out);
    return rule_error(r, rule, node, NPU_ERR_FORMAT, what);
  }
  for (int k = 0; k < rule->n_in + rule->n_out; k++) {
    bool in = k < rule->n_in;
    int i = in ? k : st->n_in + (k - rule->n_in);
    int v = in ? st->in[i] : st->out[i - st->n_in];
    npu_dtype gdt = r->p->values[v].dtype, dt = rule->dtypes[k];
    bool ok = dt == gdt || (gdt == NPU_DTYPE_F32 && (dt == NPU_DTYPE_F16 || dt == NPU_DTYPE_BF16));
    if (!ok) {
      snprintf(what, sizeof what, "%s %d is %s and cannot be computed as %s (float32 values may be "
               "float16 or bfloat16; other dtypes stay)", in ? "input" : "output",
               in ? i : i - st->n_in, npu_dtype_name(gdt), npu_dtype_name(dt));
      return rule_error(r, rule, node, NPU_ERR_DTYPE, what);
    }
    want[i] = dt;
  }
  return NPU_OK;
}

/* The per-channel operands of a fused convolution's or matmul's epilogue (bias, prelu slopes)
   keep float32 whatever the step computes in: the kernel adds them to its float32 sums before
   y is rounded once, so rounding them too only adds error (blazeface under the mixed bfloat16
   mode: 0.19 of the output's peak with bfloat16 biases, 0.12 with float32 ones; its biases are
   float16 values, which bfloat16's 8 bits do not hold) for a few bytes a channel, and the
   executor need not widen them each run.  A customize_dtypes line still decides (applied
   after). */
static void keep_epilogue_f32(const npuE_plan *p, const npuE_step *st, npu_dtype *want) {
  int keep[2] = {-1, -1};
  if (st->def == &npuP_op_fused_conv2d || st->def == &npuP_op_fused_depthwise_conv2d) {
    const npuP_fused_conv *f = st->params;
    keep[0] = f->bias_input, keep[1] = f->slope_input;
  } else if (st->def == &npuP_op_fused_matmul) {
    const npuP_fused_matmul *f = st->params;
    keep[0] = f->bias_input, keep[1] = f->slope_input;
  }
  for (int k = 0; k < 2; k++)
    if (keep[k] >= 0 && keep[k] < st->n_in) want[keep[k]] = p->values[st->in[keep[k]]].dtype;
}

static npu_status decide(pr *r, const npuE_step *st, npu_dtype *want, bool *kept);

/* The dtype graph value v is stored in so far: its graph dtype if written so, else the reduced
   one a step wrote. */
static npu_dtype stored_dtype(const pr *r, int v) {
  const int *rep = &r->rep[3 * v];
  return rep[0] >= 0 || (rep[1] < 0 && rep[2] < 0) ? r->p->values[v].dtype
         : rep[2] >= 0 ? NPU_DTYPE_BF16 : NPU_DTYPE_F16;
}

/* The gradient-descent steps fusion makes under a mixed mode (fusion.c: sgd_mode) update a
   float32 variable, so their output keeps its dtype as any assigned value does, but the GEMM
   inside fused_apply_gradient_descent is the matmul it absorbed: its A and B (inputs 1, 2) get
   the dtypes decide gives that matmul alone (its node, lists, customize_dtypes line), and the
   dtype it would store its product in goes to the step's params, so the step gives the bits of
   the unfused plan.  fused_gradient_descent_update reads its gradient as stored. */
static npu_status decide_fused_sgd(pr *r, const npuE_step *st, npu_dtype *want) {
  if (!mode_rules[r->mode].mixed) return NPU_OK;
  if (st->def == &npuP_op_fused_sgd_update) {
    want[1] = stored_dtype(r, st->in[1]);
    return NPU_OK;
  }
  npuP_fused_sgd *params = st->owned_params;
  int in[2] = {st->in[1], st->in[2]}, out[1] = {params->product};
  npuE_step mm = {.node = st->node, .def = &npuX_op_matmul, .n_in = 2, .n_out = 1, .in = in,
                  .out = out, .round_in = -1, .round_out = -1};
  npu_dtype mm_want[3];
  bool kept;
  npu_status s = decide(r, &mm, mm_want, &kept);
  if (s) return s;
  want[1] = mm_want[0];
  want[2] = mm_want[1];
  params->product_dtype = mm_want[2];
  return NPU_OK;
}

/* want[]: the dtype each operand of st (inputs, then outputs) is stored in. *kept: the step
   keeps float32 on purpose (its outputs' state). */
static npu_status decide(pr *r, const npuE_step *st, npu_dtype *want, bool *kept) {
  const npuE_plan *p = r->p;
  int n = st->n_in + st->n_out;
  for (int i = 0; i < n; i++)
    want[i] = p->values[i < st->n_in ? st->in[i] : st->out[i - st->n_in]].dtype;
  *kept = false;
  if (st->def == &npuP_op_fused_sgd || st->def == &npuP_op_fused_sgd_update)
    return decide_fused_sgd(r, st, want);
  if (st->def->kind != NPUX_KIND_KERNEL) return NPU_OK;
  /* a host function gets its inputs and returns its outputs in the graph's dtypes whatever the
     mode (the host returns Tout's dtypes, and its outputs' shapes, known only when it runs,
     could not size a Cast step planned now): reduced inputs are cast back for it */
  if (st->def == &npuX_op_host_func) return NPU_OK;
  /* a fused step is its base op's: the node it was made from (fusion keeps it in st->node) */
  const npuG_node *node = &r->g->nodes[st->node];
  int op = node->op;
  const npu_op_def *base = npuX_op(op);
  const mode_rule *m = &mode_rules[r->mode];
  /* kept: marked by keep_tensors_dtypes, or computing a variable's new value (training's
     updates stay float32, as the master weights do under mixed precision) */
  bool mark = node->keep_dtype;
  for (int i = 0; i < st->n_absorbed; i++) mark |= r->g->nodes[st->absorbed[i]].keep_dtype;
  for (int j = 0; j < st->n_out; j++) mark |= r->assigned[st->out[j]] != 0;
  if (mark) {
    *kept = true;
    return NPU_OK;
  }
  npuX_prec list = m->mixed ? npuP_mix_list(r->mix, op) : base->prec;
  /* a fused step is its base op, unless it absorbed a block-list op: then it is kept; but a
     fused max-pool gradient's bias_add_grad only keeps its own output float32 (below) */
  const bool pool_bias = st->def == &npuP_op_fused_max_pool_grad_relu && st->n_out == 2;
  for (int i = 0; m->mixed && i < st->n_absorbed; i++)
    if (npuP_mix_list(r->mix, r->g->nodes[st->absorbed[i]].op) == NPUX_PREC_BLOCK &&
        !(pool_bias && npuX_op(r->g->nodes[st->absorbed[i]].op) == &npuX_op_bias_add_grad))
      list = NPUX_PREC_BLOCK;
  if (st->def == &npuX_op_cast) {
    /* the graph's own conversion: never moved, but a block-listed Cast keeps what follows */
    *kept = m->mixed && list == NPUX_PREC_BLOCK;
    return NPU_OK;
  }
  npu_dtype in_dt = NPU_DTYPE_COUNT, out_dt = NPU_DTYPE_COUNT;
  if (m->reduced != NPU_DTYPE_COUNT) {
    if (m->mixed) {
      if (list == NPUX_PREC_TRUST) {
        in_dt = out_dt = m->reduced;
      } else if (list == NPUX_PREC_GRAY) {
        npu_dtype up = NPU_DTYPE_COUNT;
        bool any_kept = false;
        for (int i = 0; i < st->n_in; i++) {
          int v = st->in[i];
          if (p->values[v].dtype != NPU_DTYPE_F32) continue;
          any_kept |= r->state[v] == ST_KEPT;
          if (up == NPU_DTYPE_COUNT && r->state[v] >= ST_F16)
            up = r->state[v] == ST_F16 ? NPU_DTYPE_F16 : NPU_DTYPE_BF16;
        }
        if (!any_kept) in_dt = out_dt = up;
      } else {
        *kept = true;
      }
    } else if (!m->cube_only || base->prec == NPUX_PREC_TRUST) {
      in_dt = m->reduced;
      out_dt = m->inputs_only ? NPU_DTYPE_COUNT : m->reduced;
    }
  }
  for (int i = 0; i < n; i++) {
    npu_dtype dt = i < st->n_in ? in_dt : out_dt;
    if (want[i] == NPU_DTYPE_F32 && dt != NPU_DTYPE_COUNT) want[i] = dt;
  }
  /* the bias gradient summed by a fused max-pool gradient (fusion.c, mixed modes): float32,
     summing dx as stored, as bias_add_grad (block-listed) did after a Cast of dx; never lower
     than the graph's even where modify_mixlist moved bias_add_grad off the block list */
  if (pool_bias) want[st->n_in + 1] = p->values[st->out[1]].dtype;
  keep_epilogue_f32(p, st, want);
  const npuP_dtype_rule *rule =
      r->mode != NPUP_ORIGIN ? npuP_mix_rule(r->mix, node->name, op) : NULL;
  if (rule) {
    *kept = true; /* unless an output ends up reduced: see update_states */
    return apply_rule(r, st, rule, want);
  }
  return NPU_OK;
}

/* What the step's inputs pass on to its outputs' state, read before the inputs are rewritten:
   identity passes its input's on; a kernel step with a kept float32 input passes "kept" on. */
static uint8_t inherited_state(const pr *r, const npuE_step *st) {
  if (st->def->kind == NPUX_KIND_IDENTITY) return st->n_in > 0 ? r->state[st->in[0]] : ST_NEUTRAL;
  if (st->def->kind != NPUX_KIND_KERNEL) return ST_NEUTRAL;
  for (int i = 0; i < st->n_in; i++)
    if (r->p->values[st->in[i]].dtype == NPU_DTYPE_F32 && r->state[st->in[i]] == ST_KEPT)
      return ST_KEPT;
  return ST_NEUTRAL;
}

/* The state of the step's graph outputs, for the gray ops downstream. */
static void update_states(pr *r, const npuE_step *st, const int *graph_out, const npu_dtype *want,
                          bool kept, uint8_t inherited) {
  for (int j = 0; j < st->n_out; j++) {
    int v = graph_out[j];
    npu_dtype stored = want[st->n_in + j];
    if (stored != r->p->values[v].dtype) r->state[v] = stored == NPU_DTYPE_F16 ? ST_F16 : ST_BF16;
    else if (kept && st->def->kind == NPUX_KIND_KERNEL) r->state[v] = ST_KEPT;
    else r->state[v] = inherited;
  }
}

/* A step that only moves elements (NPUX_F_MOVES) moves them as they are stored when all its
   graph-float32 operands are stored in one dtype: widening, moving and narrowing again would
   give the same bits.  (A customize_dtypes line can give them different ones: then widen.) */
static bool moves_as_is(const npuE_plan *p, const npuE_step *st, const int *orig) {
  npu_dtype one = NPU_DTYPE_COUNT;
  for (int i = 0; i < st->n_in + st->n_out; i++) {
    if (p->values[orig[i]].dtype != NPU_DTYPE_F32) continue;
    npu_dtype stored = p->values[i < st->n_in ? st->in[i] : st->out[i - st->n_in]].dtype;
    if (one != NPU_DTYPE_COUNT && stored != one) return false;
    one = stored;
  }
  return true;
}

/* Whether the kernel of st reads (writes) operand i — inputs, then outputs — as stored:
   x and y of NPUX_F_HALF_XY, and B of NPUX_F_HALF_B; the last two inputs and output 0 of
   NPUX_F_BF16_DOT when those inputs are stored bfloat16, the CPU computes on bfloat16
   (npuK_bf16dot(), off with NPU_NO_AVX512BF16=1) and the step runs on the device (a host step
   runs the float32 reference kernel); the GEMM operands of the fused gradient-descent update
   and the gradient of the fused bias update; the fused max-pool gradient's inputs and dx when
   x, dy, the features and dx are all stored bfloat16 (y is not read). */
static bool kernel_takes_stored(const npuE_plan *p, const npuE_step *st, int i) {
  if (st->def == &npuP_op_fused_sgd) return i == 1 || i == 2; /* its GEMM's A and B */
  if (st->def == &npuP_op_fused_max_pool_grad_relu) /* all or none: x, dy, features, dx */
    return i <= st->n_in && p->values[st->in[0]].dtype == NPU_DTYPE_BF16 &&
           p->values[st->in[2]].dtype == NPU_DTYPE_BF16 &&
           p->values[st->in[3]].dtype == NPU_DTYPE_BF16 &&
           p->values[st->out[0]].dtype == NPU_DTYPE_BF16;
  if (st->def == &npuP_op_fused_sgd_update) return i == 1;    /* the gradient */
  unsigned f = st->def->flags;
  if (f & NPUX_F_BF16_DOT)
    return (i == st->n_in - 2 || i == st->n_in - 1 || i == st->n_in) && !st->host &&
           st->n_in >= 2 && p->values[st->in[st->n_in - 2]].dtype == NPU_DTYPE_BF16 &&
           p->values[st->in[st->n_in - 1]].dtype == NPU_DTYPE_BF16 && npuK_bf16dot();
  if (!(f & NPUX_F_HALF_XY)) return false;
  return i == 0 || i == st->n_in || (i == 1 && (f & NPUX_F_HALF_B));
}

/* Rewrites step st (a copy, appended to the new list by the caller) to the dtypes decided.
   orig: room for its operands' graph value ids. */
static npu_status place_step(pr *r, npuE_step *st, npu_dtype *want, int *orig) {
  npuE_plan *p = r->p;
  bool kept;
  npu_status s = decide(r, st, want, &kept);
  if (s) return s;
  int n = st->n_in + st->n_out;
  for (int i = 0; i < n; i++) orig[i] = i < st->n_in ? st->in[i] : st->out[i - st->n_in];
  uint8_t inherited = inherited_state(r, st);
  for (int i = 0; i < st->n_in && !s; i++) s = need_rep(r, orig[i], want[i], &st->in[i]);
  if (s) return s;
  update_states(r, st, orig + st->n_in, want, kept, inherited);
  /* a fused max-pool gradient's float32 bias gradient is kept, as block-listed bias_add_grad's
     output was: gray ops downstream stay float32 as they did unfused */
  if (st->def == &npuP_op_fused_max_pool_grad_relu && st->n_out == 2 && mode_rules[r->mode].mixed)
    r->state[orig[st->n_in + 1]] = ST_KEPT;
  for (int j = 0; j < st->n_out; j++) {
    int v = orig[st->n_in + j];
    npu_dtype dt = want[st->n_in + j];
    if (dt == p->values[v].dtype) continue;
    int *rep = &r->rep[3 * v];
    rep[0] = -1;
    st->out[j] = rep[rep_index(dt, p->values[v].dtype)] = new_value(r, v, dt);
  }
  /* the operands stored in another dtype than the kernel computes in (the graph's): widened
     by the executor, unless the kernel reads and writes them as they are (NPUX_F_HALF_IO) */
  bool direct = (st->def->flags & NPUX_F_HALF_IO) != 0 ||
                ((st->def->flags & NPUX_F_MOVES) && moves_as_is(p, st, orig));
  /* NPUX_F_HALF_XY: the kernel takes x (input 0) and y (output 0) as stored, so its scratch
     (which now holds their blocks' float32 copies) is asked for again; so for
     NPUX_F_BF16_DOT (its scratch: the bfloat16 kernel's) and the fused max-pool gradient
     (its float32 dx for overlapping windows) */
  bool xy_reduced = false;
  int n_widen = 0;
  size_t bytes = 0;
  for (int i = 0; i < n; i++) {
    const npuG_value *d = &p->values[i < st->n_in ? st->in[i] : st->out[i - st->n_in]];
    if (d->dtype == p->values[orig[i]].dtype) continue;
    int *first = i < st->n_in ? &st->round_in : &st->round_out;
    if (*first < 0) *first = (int)d->dtype;
    if (kernel_takes_stored(p, st, i)) xy_reduced = true;
    if (direct || kernel_takes_stored(p, st, i)) continue;
    n_widen++;
    bytes += (size_t)npuT_numel(d->ndim, d->shape) * sizeof(float);
  }
  if (xy_reduced && st->def->scratch_size) {
    s = npuP_step_scratch(r->ctx, p, st, &r->g->nodes[st->node], false);
    if (s) return s;
  }
  if (!n_widen) return NPU_OK;
  if (!(st->widen = npuC_calloc(r->ctx, (size_t)n, 1))) return NPU_ERR_NOMEM;
  for (int i = 0; i < n; i++)
    st->widen[i] = p->values[i < st->n_in ? st->in[i] : st->out[i - st->n_in]].dtype !=
                       p->values[orig[i]].dtype &&
                   !kernel_takes_stored(p, st, i);
  if (bytes > p->round_size) p->round_size = bytes;
  if (n_widen > p->n_round_meta) p->n_round_meta = n_widen;
  return NPU_OK;
}

/* Grows the plan's value arrays (and the build's known[]) to hold n values. */
static npu_status reserve_values(npuP_build *b, int n) {
  npuE_plan *p = b->plan;
  size_t cap = (size_t)(n ? n : 1);
  npuG_value *values = npuC_realloc(b->ctx, p->values, cap * sizeof *values);
  if (!values) return NPU_ERR_NOMEM;
  p->values = values;
  npu_tensor **slots = npuC_realloc(b->ctx, p->slots, cap * sizeof *slots);
  if (!slots) return NPU_ERR_NOMEM;
  p->slots = slots;
  uint8_t *owned = npuC_realloc(b->ctx, p->owned, cap);
  if (!owned) return NPU_ERR_NOMEM;
  p->owned = owned;
  npu_tensor **known = npuC_realloc(b->ctx, b->known, cap * sizeof *known);
  if (!known) return NPU_ERR_NOMEM;
  b->known = known;
  return NPU_OK;
}

static bool is_fed(const npuE_plan *p, int v) {
  for (int i = 0; i < p->n_feeds; i++)
    if (p->feeds[i] == v) return true;
  return false;
}

/* The variable (its node id) whose value graph value v is, through identities; -1 when v is
   no variable's (a value a pass made, a computed one) or when the plan feeds v or a value on
   the way (a feed overrides the variable for the run, and may differ at every run). */
static int variable_of(const npu_graph *g, const npuE_plan *p, int v) {
  for (int hops = 0; v >= 0 && v < g->n_values && hops <= g->n_nodes; hops++) {
    if (p && is_fed(p, v)) return -1;
    const npuG_node *n = &g->nodes[g->values[v].node];
    npuX_kind k = npuX_op(n->op)->kind;
    if (k == NPUX_KIND_VARIABLE) return g->values[v].node;
    if (k != NPUX_KIND_IDENTITY || n->n_inputs < 1) return -1;
    v = n->inputs[0];
  }
  return -1;
}

/* Whether some step of the n writes variable var (an assign, a fused update). */
static bool writes_variable(const npu_graph *g, const npuE_step *steps, int n, int var) {
  for (int k = 0; k < n; k++)
    if (steps[k].def->kind == NPUX_KIND_ASSIGN && steps[k].n_in > 0 &&
        variable_of(g, NULL, steps[k].in[0]) == var)
      return true;
  return false;
}

/* The Cast steps made here that convert a variable's value become the variable's kept copy
   (npuE_step.copy_of): made again only after the variable is written, not at every run.  Not
   where this plan writes the variable itself (a training step): every run would make it
   again anyway, and the copy in the arena costs nothing beyond the plan's peak, while a kept
   copy holds its own buffer.  (Plans with control steps have no casts: needs_pass.) */
static void mark_variable_copies(const npu_graph *g, const npuE_plan *p, npuE_step *steps,
                                 int n) {
  for (int k = 0; k < n; k++) {
    npuE_step *c = &steps[k];
    if (c->def != &npuX_op_cast || !c->pass || strcmp(c->pass, "precision") != 0) continue;
    int var = variable_of(g, p, c->in[0]);
    if (var >= 0 && !writes_variable(g, steps, n, var)) c->copy_of = var + 1;
  }
}

static bool needs_pass(const npuP_build *b) {
  npuP_precision mode = (npuP_precision)b->cfg->precision;
  /* Plans with run-time shapes or control flow compute in their graph dtypes: the reduced
     storage and its casts are planned for fixed shapes (docs/dynamic.md). */
  if (b->cfg->reference || mode == NPUP_ORIGIN || b->plan->dynamic) return false;
  if (mode == NPUP_FP32_TO_BF16) return b->cfg->mix && b->cfg->mix->n_rules > 0;
  return true;
}

npu_status npuP_assign_precision(npuP_build *b) {
  if (!needs_pass(b)) return NPU_OK;
  npuE_plan *p = b->plan;
  npu_context *ctx = b->ctx;
  int n0 = p->n_values, n_old = p->n_steps, sum_in = 0, sum_out = 0, widest = 1;
  for (int k = 0; k < n_old; k++) {
    sum_in += p->steps[k].n_in;
    sum_out += p->steps[k].n_out;
    int n = p->steps[k].n_in + p->steps[k].n_out;
    if (n > widest) widest = n;
  }
  /* At most one new value per operand, one Cast step per input and per fetch. */
  npu_status s = reserve_values(b, n0 + sum_in + sum_out);
  if (s) return s;
  pr r = {.b = b, .ctx = ctx, .p = p, .g = b->graph, .mode = (npuP_precision)b->cfg->precision,
          .mix = b->cfg->mix, .n0 = n0};
  size_t cap_steps = (size_t)n_old + (size_t)sum_in + (size_t)p->n_fetches;
  r.state = npuC_calloc(ctx, 2 * (size_t)(n0 ? n0 : 1), 1);
  r.rep = npuC_alloc(ctx, (size_t)(n0 ? n0 : 1) * 3 * sizeof *r.rep);
  r.steps = npuC_calloc(ctx, cap_steps ? cap_steps : 1, sizeof *r.steps);
  npu_dtype *want = npuC_alloc(ctx, (size_t)widest * sizeof *want);
  int *orig = npuC_alloc(ctx, (size_t)widest * sizeof *orig);
  if (!r.state || !r.rep || !r.steps || !want || !orig) {
    npuC_free(ctx, r.state);
    npuC_free(ctx, r.rep);
    npuC_free(ctx, r.steps);
    npuC_free(ctx, want);
    npuC_free(ctx, orig);
    return NPU_ERR_NOMEM;
  }
  r.assigned = r.state + (n0 ? n0 : 1);
  for (int v = 0; v < n0; v++) {
    r.rep[3 * v] = v;
    r.rep[3 * v + 1] = r.rep[3 * v + 2] = -1;
  }
  /* (the fused gradient-descent steps are assigns too, but they compute the new value from
     their inputs: a GEMM's operands, a gradient; none of them is written into the variable) */
  for (int k = 0; k < n_old; k++)
    if (p->steps[k].def->kind == NPUX_KIND_ASSIGN && p->steps[k].n_in > 1 &&
        p->steps[k].def != &npuP_op_fused_sgd && p->steps[k].def != &npuP_op_fused_sgd_update)
      r.assigned[p->steps[k].in[1]] = 1;
  /* Each old step moves to the new list (its buffers with it), after the casts it needs.  On
     failure the steps not yet placed move over unchanged, so the plan stays whole for
     npuP_free. */
  int k = 0;
  for (; k < n_old && !s; k++) {
    npuE_step st = p->steps[k];
    p->steps[k] = (npuE_step){0};
    s = place_step(&r, &st, want, orig);
    r.steps[r.n_steps++] = st;
  }
  /* fetches are read in the graph's dtype */
  for (int i = 0; i < p->n_fetches && !s; i++) {
    int dummy;
    s = need_rep(&r, p->fetches[i], p->values[p->fetches[i]].dtype, &dummy);
  }
  for (; k < n_old; k++) r.steps[r.n_steps++] = p->steps[k];
  npuC_free(ctx, p->steps);
  p->steps = r.steps;
  p->n_steps = r.n_steps;
  if (!s) mark_variable_copies(r.g, p, p->steps, p->n_steps);
  npuC_free(ctx, r.state);
  npuC_free(ctx, r.rep);
  npuC_free(ctx, want);
  npuC_free(ctx, orig);
  return s;
}
