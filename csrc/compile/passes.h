/*
 * passes.h — the compiler's passes after the steps are laid out (compile/plan.c).
 *
 * npuP_compile prunes, checks the feeds, infers concrete shapes, folds constants and emits one
 * step per remaining node; then, in this order:
 *
 *   npuP_fuse             compile/fusion.c     fusion passes (passes.def), each switchable
 *   npuP_assign_precision compile/precision.c  dtypes per step by precision mode and lists
 *   npuP_select_impl      compile/implmode.c   high_precision / high_performance kernels
 *   npuP_schedule_comm    compile/schedule.c   hcom_parallel: collectives start early
 *   npuP_plan_memory      compile/memory.c     intermediate values share one arena
 *
 * With DUMP_GE_GRAPH set, npuP_graph_dump (compile/graph_dump.c) writes the graph as given and
 * the plan after the layout and after each pass.
 *
 * Each pass sees the whole build and may rewrite p->steps; a step a pass removes is freed by
 * the pass.  A failing pass leaves the plan to npuP_free (the caller frees it).
 */
#ifndef NPU_PASSES_H
#define NPU_PASSES_H
#include "compile/compile.h"

typedef struct npuP_build {
  npu_context *ctx;
  const npu_graph *graph;
  npuE_plan *plan;
  const npuP_config *cfg;
  npu_tensor **known; /* by value id: the value when fixed at compile time, else NULL; a pass
                         that adds values grows it (it may move) */
  const uint8_t *need; /* by node id: bit 0 the node runs, bit 1 its value is read */
  unsigned fusion_off; /* subgraph tuning: passes turned off (bit i: pass i of passes.def) */
  bool trial;          /* a candidate plan of subgraph tuning: no statistics, no dumps */
} npuP_build;

/* compile/plan.c: asks step's op for its scratch with stand-ins of its operands as the plan
   values now describe them (dtypes included); sets step->scratch_size, grows p->scratch_size. */
npu_status npuP_step_scratch(npu_context *ctx, npuE_plan *p, npuE_step *step,
                             const npuG_node *node, bool reference);
/* compile/plan.c, for the stages that lay out steps (control.c): a node's shape inference on
   the plan's values, and the step running it (into *step, which the caller placed). */
npu_status npuP_infer_node(npu_context *ctx, const npu_graph *g, npuE_plan *p,
                           const npuG_node *node, npu_tensor **known);
npu_status npuP_emit_step(npu_context *ctx, npuE_plan *p, const npuP_config *cfg, int id,
                          const npuG_node *node, bool read, npuE_step *step);
/* compile/control.c: the step of cond / while node `id`, its regions compiled into blocks. */
npu_status npuP_emit_control(npuP_build *b, int id, npuE_step *step);
npu_status npuP_fuse(npuP_build *b);
/* compile/mixed.c: after fusion, each top-level step's placement (npuE_step.host) from its own
   node: an imported host implementation, or in_out_pair's ranges. */
npu_status npuP_mixed_mark(npuP_build *b);
npu_status npuP_assign_precision(npuP_build *b);
npu_status npuP_select_impl(npuP_build *b);
npu_status npuP_schedule_comm(npuP_build *b);
npu_status npuP_plan_memory(npuP_build *b);
/* compile/implmode.c: whether npuP_select_impl gives node (of op def) its high_performance
   implementation (the fusion pass leaves such steps unfused: fused kernels run high_precision). */
bool npuP_impl_is_fast(const npuP_config *cfg, const npu_op_def *def, const char *node);
/* compile/implmode.c: whether op def has a high_performance implementation at all (the
   generated op reference, tools/gen_ops_doc.c, lists them). */
bool npuP_impl_has_fast(const npu_op_def *def);
/* compile/implmode.c: whether conv2d step s of plan p can run Winograd F(2x2, 3x3) (float32,
   the geometry and fused pool it takes), whatever its channels (the tuner times it). */
bool npuP_winograd_fits(const npuE_plan *p, const npuE_step *s);
bool npuP_direct_fits(const npuE_plan *p, const npuE_step *s);
/* npuP_direct_fits, and the step's x stored bfloat16, its filter bfloat16 values (stored
   bfloat16 and widened by the executor, or a float32 constant whose values all are bfloat16,
   which the precision pass keeps as it is), and npuK_bf16dot(): NPUK_CONV_DIRECT_BF16 takes
   it. */
bool npuP_direct_bf16_fits(const npuP_build *b, const npuE_step *s);
/* compile/implmode.c: whether step s's GEMM operands are f32tile's (kernels/gemm_f32.c): A, B
   and C float32 matrices as stored, none widened or rounded, a fused SGD step's product float32
   too (its A and B are inputs 1 and 2); the shapes where it wins are implmode's rule, the
   tuner times it wherever this holds. */
bool npuP_f32tile_operands(const npuE_plan *p, const npuE_step *s);
/* compile/implmode.c: the filter of conv2d / fused conv2d step s when it is a float32 3x3
   constant (b->known) the step reads as it is (not widened; not a host or dynamic step): a
   Winograd step's U is then computed once (plan.c) and high_performance's rule is the
   constant-filter one; NULL otherwise. */
const npu_tensor *npuP_winograd_constant_filter(const npuP_build *b, const npuE_step *s);
bool npuP_backprop_input_winograd_fits(const npuE_plan *p, const npuE_step *s);
/* compile/plan.c: the filter of step s (an op flagged NPUX_F_PREPARED_FILTER) transformed
   once for algorithm algo where the plan runs it so: a Winograd step's constant float32 filter
   as U, a direct_bf16 step's constant bfloat16-valued one packed.  *data (npuC_alloc'ed,
   *bytes of it), or NULL when the step keeps the per-call transform.  The plan's steps get it
   after tuning (npuE_step.prepared); tuning times its candidates with it (tuning.c). */
npu_status npuP_prepare_filter(const npuP_build *b, const npuE_step *s, int algo, void **data,
                               size_t *bytes);
/* compile/verify.c: NPU_ERR_INTERNAL naming the pass `after` when the plan breaks an invariant
   (run after each pass when cfg->verify). */
npu_status npuP_verify(npuP_build *b, const char *after);
/* compile/graph_dump.c (DUMP_GE_GRAPH, DUMP_GRAPH_LEVEL).  begin: *graph = this compilation's
   number in the dump files' names (the context's dumped compilations, from 0), or -1 when
   DUMP_GE_GRAPH is unset, and then nothing is dumped; makes $DUMP_GRAPH_PATH (once per
   compilation), NPU_ERR_IO naming it when it cannot be made.  dump: writes stage `stage`
   (0 = the graph as given, read from b->need; then after each pass, `name` the pass) when
   DUMP_GRAPH_LEVEL selects it (`last`: the final plan); NPU_ERR_IO naming a file that cannot
   be written. */
npu_status npuP_graph_dump_begin(npu_context *ctx, const npuP_config *cfg, int *graph);
npu_status npuP_graph_dump(npuP_build *b, int graph, int stage, const char *name, bool last);

/* ---- shared by the describers (compile/explain.c, compile/graph_dump.c) and plan.c ---- */

/* compile/explain.c: s (NULL reads as "") escaped for the inside of a JSON string (quotes and
   backslashes escaped, control bytes as \u00XX), handed to put in pieces. */
void npuP_json_escape(const char *s, void (*put)(void *ud, const char *text, size_t n), void *ud);
/* compile/explain.c: the name of block b (0, 1) of a control step: a cond's "then" and "else",
   a while's "cond" (what its condition needs) and "body" (the rest). */
const char *npuP_block_name(const npuE_step *control, int b);
/* Node `node`'s name, "?" when it is not a node of g. */
static inline const char *npuP_node_name(const npu_graph *g, int node) {
  const char *name = npu_graph_node_name(g, node);
  return name ? name : "?";
}
/* Whether value v is one of the n_feeds values in feeds. */
static inline bool npuP_is_fed(int n_feeds, const int *feeds, int v) {
  for (int i = 0; i < n_feeds; i++)
    if (feeds[i] == v) return true;
  return false;
}
#endif
