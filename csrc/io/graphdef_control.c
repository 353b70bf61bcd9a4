/*
 * graphdef_control.c — the GraphDef importer's control flow (graphdef.c reads the graph and
 * converts plain nodes): TF2 If / While / calls instantiated from the function library, TF1
 * Switch / Merge / Enter / Exit / NextIteration / LoopCond functionalized into cond and while
 * constructs, TensorArrays and TensorLists on one dense buffer, and the depth-first build of
 * every scope into regions of the npu graph.  The sections below say how.
 *
 * Invariants: as graphdef.c's (every message names the file and the node; all memory from
 * the importer's arena or the context's allocator).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/graphdef_int.h"

/* ---- control flow ------------------------------------------------------------------------
 *
 * TensorFlow's control flow becomes our cond and while nodes, each running regions of the
 * graph (docs/dynamic.md).  Here a region is a *scope*: every tf_node has one (0: the top
 * level), and a construct (tf_construct: a cond or a while) owns the scopes it runs.  Two
 * sources:
 *   - TF2 functional ops (If, StatelessIf, While, StatelessWhile) name functions of the
 *     graph's library: each branch, the loop's condition and body, is instantiated as new
 *     tf_nodes in the construct's scope, its arguments replaced by the If's inputs (read from
 *     around the branch) or by loop_var nodes (_NpuLoopVar); PartitionedCall and
 *     StatefulPartitionedCall are inlined where they stand.
 *   - TF1 dataflow (Switch, Merge, Enter, Exit, NextIteration, LoopCond) is functionalized as
 *     TensorFlow's own tf2xla passes do (functionalize_cond.cc, functionalize_while.cc): each
 *     node gets the while frame it runs in (Enter opens one, Exit leaves it) and, inside the
 *     frame, its branch state — the stack of (predicate, branch) pairs of the Switches it
 *     depends on.  The Merges joining the two branches of one predicate in one state are the
 *     outputs of one cond; a frame's Merges fed by Enter and NextIteration are the variables
 *     of one while (init: the Enter's input; next value: the NextIteration's input; the
 *     condition: LoopCond's input), its Exits the while's outputs.
 * Switch, Enter and LoopCond then stand for their input (ROLE_PASS), Merge and Exit for the
 * construct's output (ROLE_OUT), a loop's Merge for its loop_var (ROLE_LOOP_VAR).
 * The scopes are then built depth first: a construct's node is built after everything its
 * scopes read from around it, its scopes' nodes inside regions just before it. */

static bool op_is(const tf_node *n, const char *op) { return strcmp(n->op, op) == 0; }

/* The types this section turns into constructs (check_supported lets them through). */
bool npuI_is_flow_type(const char *op) {
  static const char *const types[] = {
      "Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond", "If", "StatelessIf",
      "While", "StatelessWhile", "PartitionedCall", "StatefulPartitionedCall", "_NpuLoopVar",
      "_NpuCond", "_NpuWhile"};
  for (size_t i = 0; i < npu_countof(types); i++)
    if (strcmp(op, types[i]) == 0) return true;
  return false;
}

static bool is_tf1_flow(const tf_node *n) {
  return op_is(n, "Switch") || op_is(n, "Merge") || op_is(n, "Enter") || op_is(n, "Exit") ||
         op_is(n, "NextIteration") || op_is(n, "LoopCond");
}

static int grow(importer *im, void **arr, int *cap, int need, size_t size) {
  if (need <= *cap) return 0;
  int c = *cap ? *cap : 8;
  while (c < need) c *= 2;
  void *p = arena_calloc(&im->ar, (size_t)c, size);
  if (!p) return -1;
  if (*cap) memcpy(p, *arr, (size_t)*cap * size);
  *arr = p;
  *cap = c;
  return 0;
}

/* A new zeroed node named `name` (made unique with _1, _2, ...), indexed; its id or -1. */
static int append_node(importer *im, const char *name, const char *op, int scope) {
  if (im->n_nodes >= (1 << 22)) return -1;
  void *arr = im->nodes;
  if (grow(im, &arr, &im->cap_nodes, im->n_nodes + 1, sizeof *im->nodes)) return -1;
  im->nodes = arr;
  size_t size = strlen(name) + 16;
  char *buf = arena_alloc(&im->ar, size);
  if (!buf) return -1;
  snprintf(buf, size, "%s", name);
  for (int i = 1; npuI_find_tf_node(im, buf) >= 0; i++) snprintf(buf, size, "%s_%d", name, i);
  int k = im->n_nodes++;
  tf_node *n = &im->nodes[k];
  memset(n, 0, sizeof *n);
  n->name = buf;
  n->op = op;
  n->scope = scope;
  n->first_node = n->last_node = -1;
  if (npuI_index_add(im, k)) return -1;
  return k;
}

static int new_construct(importer *im, bool is_while, int node, int n) {
  void *arr = im->constructs;
  if (grow(im, &arr, &im->cap_constructs, im->n_constructs + 1, sizeof *im->constructs)) return -1;
  im->constructs = arr;
  int c = im->n_constructs++;
  im->constructs[c] = (tf_construct){.is_while = is_while, .node = node, .scope = {-1, -1}, .n = n};
  im->nodes[node].role = ROLE_CONSTRUCT;
  im->nodes[node].construct = c;
  return c;
}

static int new_scope(importer *im, int construct, int branch) {
  void *arr = im->scopes;
  if (grow(im, &arr, &im->cap_scopes, im->n_scopes + 1, sizeof *im->scopes)) return -1;
  im->scopes = arr;
  int s = im->n_scopes++;
  im->scopes[s] = (tf_scope){.construct = construct, .branch = branch, .first = -1};
  if (construct >= 0) im->constructs[construct].scope[branch] = s;
  return s;
}

static int parent_scope(const importer *im, int s) {
  return s ? im->nodes[im->constructs[im->scopes[s].construct].node].scope : -1;
}

static bool scope_within(const importer *im, int inner, int outer) {
  for (; inner >= 0; inner = parent_scope(im, inner))
    if (inner == outer) return true;
  return false;
}

/* ---- TF2: functions --------------------------------------------------------------------- */

static int find_function(const importer *im, const char *name) {
  for (int f = 0; f < im->n_functions; f++)
    if (strcmp(im->functions[f].name, name) == 0) return f;
  return -1;
}

/* Inside a function an output is "node:arg:index": output `index` of the node's output
   argument `arg`.  The ops with several output arguments (each one tensor) are listed; any
   other op has one, so the index is the output. */
static int output_flat(const char *op, const char *arg, int index) {
  static const struct {
    const char *op, *args;
  } multi[] = {
      {"Switch", "output_false,output_true"},
      {"Merge", "output,value_index"},
      {"TopKV2", "values,indices"},
      {"TopK", "values,indices"},
      {"Unique", "y,idx"},
      {"NonMaxSuppressionV4", "selected_indices,valid_outputs"},
      {"NonMaxSuppressionV5", "selected_indices,selected_scores,valid_outputs"},
      {"FusedBatchNorm", "y,batch_mean,batch_variance,reserve_space_1,reserve_space_2"},
      {"FusedBatchNormV2", "y,batch_mean,batch_variance,reserve_space_1,reserve_space_2"},
      {"FusedBatchNormV3", "y,batch_mean,batch_variance,reserve_space_1,reserve_space_2,reserve_space_3"},
      {"TensorArrayV3", "handle,flow"},
      {"TensorArrayConcatV3", "value,lengths"},
      {"BroadcastGradientArgs", "r0,r1"},
  };
  for (size_t i = 0; i < npu_countof(multi); i++) {
    if (strcmp(multi[i].op, op) != 0) continue;
    char buf[64];
    for (int k = 0; npuI_list_item(multi[i].args, k, buf, sizeof buf); k++)
      if (strcmp(buf, arg) == 0) return k + index;
  }
  return index;
}

typedef struct instance {
  const tf_function *f;
  const char **names; /* the instance's name of each function node */
  const char **args;  /* what each argument is, as an input name of the graph */
} instance;

static char *fmt_name(importer *im, const char *a, const char *b, const char *c) {
  size_t size = strlen(a) + strlen(b) + strlen(c) + 1;
  char *buf = arena_alloc(&im->ar, size);
  if (buf) snprintf(buf, size, "%s%s%s", a, b, c);
  return buf;
}

/* An input (or ret) of a function's node as the graph's name for it. */
static npu_status rewrite_input(importer *im, const instance *in, const char *fname,
                                const char *str, const char **out) {
  const tf_function *f = in->f;
  bool control = str[0] == '^';
  const char *b = str + control;
  const char *c1 = strchr(b, ':');
  size_t len = c1 ? (size_t)(c1 - b) : strlen(b);
  *out = NULL;
  for (int i = 0; i < f->n_args; i++) {
    if (strlen(f->args[i]) != len || strncmp(f->args[i], b, len) != 0) continue;
    if (!control) {
      *out = in->args[i];
      return NPU_OK;
    }
    const char *a = in->args[i] + (in->args[i][0] == '^'); /* ^ the argument's node */
    const char *colon = strrchr(a, ':');
    char *node = arena_strndup(&im->ar, a, colon ? (size_t)(colon - a) : strlen(a));
    *out = node ? fmt_name(im, "^", node, "") : NULL;
    return *out ? NPU_OK : oom(im);
  }
  int node = -1;
  for (int i = 0; i < f->n_nodes && node < 0; i++)
    if (strlen(f->nodes[i].name) == len && strncmp(f->nodes[i].name, b, len) == 0) node = i;
  if (node < 0)
    return npuC_error(im->ctx, NPU_ERR_FORMAT,
                      "%s: function '%s': '%s' names neither an argument nor a node of it",
                      im->source, fname, str);
  int index = 0;
  if (c1 && !control) {
    const char *c2 = strchr(c1 + 1, ':');
    char *end;
    if (c2) {
      char *arg = arena_strndup(&im->ar, c1 + 1, (size_t)(c2 - c1 - 1));
      if (!arg) return oom(im);
      long v = strtol(c2 + 1, &end, 10);
      if (end == c2 + 1 || *end || v < 0 || v > 1000000)
        return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: function '%s': input '%s' is malformed",
                          im->source, fname, str);
      index = output_flat(f->nodes[node].op, arg, (int)v);
    } else {
      long v = strtol(c1 + 1, &end, 10); /* "node:arg" is output 0 of arg; "node:2" output 2 */
      index = *end ? output_flat(f->nodes[node].op, c1 + 1, 0) : (int)v;
    }
  }
  char idx[24];
  snprintf(idx, sizeof idx, ":%d", index);
  *out = fmt_name(im, control ? "^" : "", in->names[node], control ? "" : idx);
  return *out ? NPU_OK : oom(im);
}

/* Function f's nodes as new nodes "<prefix>/<node>" in `scope`, the arguments being `args`
   (input names of the graph); *rets: the graph's names of its outputs, in order. */
static npu_status instantiate(importer *im, int fi, const char *owner, const char *prefix,
                              const char **args, int scope, int depth, const char ***rets) {
  const tf_function *f = &im->functions[fi];
  instance in = {.f = f, .args = args};
  in.names = arena_calloc(&im->ar, (size_t)f->n_nodes + 1, sizeof *in.names);
  *rets = arena_calloc(&im->ar, (size_t)f->n_outs + 1, sizeof **rets);
  if (!in.names || !*rets) return oom(im);
  int base = im->n_nodes;
  for (int i = 0; i < f->n_nodes; i++) {
    const char *name = fmt_name(im, prefix, "/", f->nodes[i].name);
    int k = name ? append_node(im, name, f->nodes[i].op, scope) : -1;
    if (k < 0) return oom(im);
    in.names[i] = im->nodes[k].name;
  }
  for (int i = 0; i < f->n_nodes; i++) {
    const tf_node *src = &f->nodes[i];
    tf_node *n = &im->nodes[base + i];
    n->attrs = src->attrs;
    n->n_attrs = src->n_attrs;
    n->shared_attrs = true;
    n->depth = depth;
    n->n_inputs = src->n_inputs;
    if (!(n->inputs = arena_calloc(&im->ar, (size_t)src->n_inputs + 1, sizeof *n->inputs)))
      return oom(im);
    for (int j = 0; j < src->n_inputs; j++) {
      npu_status st = rewrite_input(im, &in, f->name, src->inputs[j], &n->inputs[j]);
      if (st) return st;
    }
  }
  for (int o = 0; o < f->n_outs; o++) {
    const char *val = NULL;
    for (int r = 0; r < f->n_ret && !val; r++)
      if (strcmp(f->ret_keys[r], f->outs[o]) == 0) val = f->ret_vals[r];
    if (!val)
      return npuC_error(im->ctx, NPU_ERR_FORMAT,
                        "%s: node '%s': function '%s' does not say what its output '%s' is (no "
                        "ret entry)", im->source, owner, f->name, f->outs[o]);
    npu_status st = rewrite_input(im, &in, f->name, val, &(*rets)[o]);
    if (st) return st;
  }
  return NPU_OK;
}

static int n_data_inputs(const tf_node *n) {
  int k = 0;
  while (k < n->n_inputs && n->inputs[k][0] != '^') k++;
  return k;
}

/* The library function attribute `attr` of node k names; -1 after setting an error. */
static int function_of(importer *im, int k, const char *attr, int n_args, int n_outs) {
  const tf_node *n = &im->nodes[k];
  const tf_attr *a = node_attr(n, attr);
  if (!a || a->kind != TA_FUNC) {
    npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: node '%s' (%s) has no function attribute '%s'",
               im->source, n->name, n->op, attr);
    return -1;
  }
  int f = find_function(im, a->s);
  if (f < 0) {
    npuC_error(im->ctx, NPU_ERR_FORMAT,
               "%s: node '%s' (%s): %s names function '%s', which the graph's library does not "
               "have", im->source, n->name, n->op, attr, a->s);
    return -1;
  }
  const tf_function *fn = &im->functions[f];
  if (fn->n_args != n_args || (n_outs >= 0 && fn->n_outs != n_outs)) {
    npuC_error(im->ctx, NPU_ERR_FORMAT,
               "%s: node '%s' (%s): function '%s' (%s) takes %d argument(s) and returns %d, the "
               "node gives %d%s", im->source, n->name, n->op, fn->name, attr, fn->n_args,
               fn->n_outs, n_args, n_outs >= 0 ? " and needs as many back" : "");
    return -1;
  }
  return f;
}

static npu_status expand_if(importer *im, int k) {
  int n_data = n_data_inputs(&im->nodes[k]);
  if (n_data < 1)
    return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: node '%s' (%s) has no predicate input",
                      im->source, im->nodes[k].name, im->nodes[k].op);
  int ft = function_of(im, k, "then_branch", n_data - 1, -1);
  int fe = ft < 0 ? -1 : function_of(im, k, "else_branch", n_data - 1, im->functions[ft].n_outs);
  if (fe < 0) return NPU_ERR_FORMAT; /* function_of said why */
  int c = new_construct(im, false, k, im->functions[ft].n_outs);
  if (c < 0 || new_scope(im, c, 0) < 0 || new_scope(im, c, 1) < 0) return oom(im);
  const char *name = im->nodes[k].name, **args = im->nodes[k].inputs + 1;
  int depth = im->nodes[k].depth + 1;
  im->constructs[c].pred_s = im->nodes[k].inputs[0];
  const char *p_then = fmt_name(im, name, "/", "then"), *p_else = fmt_name(im, name, "/", "else");
  const char **a, **b;
  if (!p_then || !p_else) return oom(im);
  npu_status st = instantiate(im, ft, name, p_then, args, im->constructs[c].scope[0], depth, &a);
  if (!st) st = instantiate(im, fe, name, p_else, args, im->constructs[c].scope[1], depth, &b);
  if (st) return st;
  im->constructs[c].a_s = a;
  im->constructs[c].b_s = b;
  return NPU_OK;
}

static npu_status expand_while(importer *im, int k) {
  int n = n_data_inputs(&im->nodes[k]);
  int fc = function_of(im, k, "cond", n, 1);
  int fb = fc < 0 ? -1 : function_of(im, k, "body", n, n);
  if (fb < 0) return NPU_ERR_FORMAT; /* function_of said why */
  int c = new_construct(im, true, k, n);
  int s = c < 0 ? -1 : new_scope(im, c, 0);
  const char **vars = arena_calloc(&im->ar, (size_t)n + 1, sizeof *vars);
  if (s < 0 || !vars) return oom(im);
  const char *name = im->nodes[k].name;
  int depth = im->nodes[k].depth + 1;
  for (int i = 0; i < n; i++) {
    char suffix[32];
    snprintf(suffix, sizeof suffix, "/loop_var_%d", i);
    const char *vname = fmt_name(im, name, suffix, "");
    int v = vname ? append_node(im, vname, "_NpuLoopVar", s) : -1;
    if (v < 0) return oom(im);
    im->nodes[v].role = ROLE_LOOP_VAR;
    im->nodes[v].construct = c;
    im->nodes[v].out_index = i;
    vars[i] = im->nodes[v].name;
  }
  im->constructs[c].a_s = im->nodes[k].inputs;
  const char *p_cond = fmt_name(im, name, "/", "cond"), *p_body = fmt_name(im, name, "/", "body");
  const char **pred, **b;
  if (!p_cond || !p_body) return oom(im);
  npu_status st = instantiate(im, fc, name, p_cond, vars, s, depth, &pred);
  if (!st) st = instantiate(im, fb, name, p_body, vars, s, depth, &b);
  if (st) return st;
  im->constructs[c].pred_s = pred[0];
  im->constructs[c].b_s = b;
  return NPU_OK;
}

static npu_status expand_call(importer *im, int k) {
  int n = n_data_inputs(&im->nodes[k]);
  int f = function_of(im, k, "f", n, -1);
  if (f < 0) return NPU_ERR_FORMAT; /* function_of said why */
  const char **rets;
  npu_status st = instantiate(im, f, im->nodes[k].name, im->nodes[k].name, im->nodes[k].inputs,
                              im->nodes[k].scope, im->nodes[k].depth + 1, &rets);
  if (st) return st;
  tf_node *node = &im->nodes[k];
  node->role = ROLE_ALIAS;
  node->rets = rets;
  node->n_rets = im->functions[f].n_outs;
  return NPU_OK;
}

/* Every If, While and call, including those of the functions instantiated (appended). */
static npu_status expand_functions(importer *im) {
  enum { MAX_DEPTH = 32 };
  for (int k = 0; k < im->n_nodes; k++) {
    const tf_node *n = &im->nodes[k];
    bool is_if = op_is(n, "If") || op_is(n, "StatelessIf");
    bool is_while = op_is(n, "While") || op_is(n, "StatelessWhile");
    bool is_call = op_is(n, "PartitionedCall") || op_is(n, "StatefulPartitionedCall");
    if (!is_if && !is_while && !is_call) continue;
    if (n->depth >= MAX_DEPTH)
      return npuC_error(im->ctx, NPU_ERR_UNSUPPORTED,
                        "%s: node '%s' (%s): functions call each other more than %d deep (a "
                        "recursive function?)", im->source, n->name, n->op, MAX_DEPTH);
    npu_status st = is_if ? expand_if(im, k) : is_while ? expand_while(im, k) : expand_call(im, k);
    if (st) return st;
  }
  return NPU_OK;
}

/* ---- TF1: frames and branch states -------------------------------------------------------- */

/* A branch state: `parent` with (pred, branch) pushed; a frame's root has parent -1. */
typedef struct tf1_state {
  int parent, frame;
  tf_ref pred;
  int branch;    /* 0: the Switch's output_false, 1: output_true */
  int construct; /* the cond whose branch this is (child states) */
  int scope;
} tf1_state;

typedef struct tf1_frame {
  const char *name;
  int parent_state; /* where its Enters are */
  int root;         /* its root state */
  int construct;    /* its while */
  int loop_cond;    /* its LoopCond node */
} tf1_frame;

typedef struct tf1 {
  importer *im;
  tf1_state *states;
  int n_states, cap_states;
  tf1_frame *frames;
  int n_frames, cap_frames;
  int *state;     /* per node (the nodes there were when it began) */
  int *then_input; /* per cond Merge: which data input is the then result */
  int n_nodes;
} tf1;

static int add_state(tf1 *t, tf1_state s) {
  void *arr = t->states;
  if (grow(t->im, &arr, &t->cap_states, t->n_states + 1, sizeof *t->states)) return -1;
  t->states = arr;
  t->states[t->n_states] = s;
  return t->n_states++;
}

static bool same_ref(tf_ref a, tf_ref b) { return a.node == b.node && a.index == b.index; }

/* The state below s on the branch of pred (the Switch's output: 1 true, 0 false); its cond
   (and the cond's scopes: then, else) made when new. */
static int child_state(tf1 *t, int s, tf_ref pred, int branch) {
  importer *im = t->im;
  int construct = -1;
  for (int i = 0; i < t->n_states; i++) {
    const tf1_state *c = &t->states[i];
    if (c->parent != s || !same_ref(c->pred, pred)) continue;
    if (c->branch == branch) return i;
    construct = c->construct;
  }
  if (construct < 0) {
    const char *name = fmt_name(im, im->nodes[pred.node].name, "/", "cond");
    int node = name ? append_node(im, name, "_NpuCond", t->states[s].scope) : -1;
    construct = node < 0 ? -1 : new_construct(im, false, node, 0);
    if (construct < 0 || new_scope(im, construct, 0) < 0 || new_scope(im, construct, 1) < 0)
      return -1;
    im->constructs[construct].pred = pred;
  }
  return add_state(t, (tf1_state){.parent = s, .frame = t->states[s].frame, .pred = pred,
                                  .branch = branch, .construct = construct,
                                  .scope = im->constructs[construct].scope[branch ? 0 : 1]});
}

/* The frame an Enter of `frame_name` opens from state s: its root state. */
static int frame_root(tf1 *t, const char *frame_name, int s) {
  importer *im = t->im;
  for (int f = 0; f < t->n_frames; f++)
    if (strcmp(t->frames[f].name, frame_name) == 0) return t->frames[f].root;
  void *arr = t->frames;
  if (grow(im, &arr, &t->cap_frames, t->n_frames + 1, sizeof *t->frames)) return -1;
  t->frames = arr;
  int f = t->n_frames;
  const char *name = fmt_name(im, frame_name, "", "");
  int node = name ? append_node(im, name, "_NpuWhile", t->states[s].scope) : -1;
  int c = node < 0 ? -1 : new_construct(im, true, node, 0);
  int scope = c < 0 ? -1 : new_scope(im, c, 0);
  if (scope < 0) return -1;
  int root = add_state(t, (tf1_state){.parent = -1, .frame = f, .construct = c, .scope = scope});
  if (root < 0) return -1;
  t->frames[f] = (tf1_frame){.name = frame_name, .parent_state = s, .root = root,
                             .construct = c, .loop_cond = -1};
  t->n_frames++;
  return root;
}

static bool state_within(const tf1 *t, int inner, int outer) {
  for (; inner >= 0; inner = t->states[inner].parent)
    if (inner == outer) return true;
  return false;
}

static bool is_loop_switch(const importer *im, const tf_node *n) {
  return op_is(n, "Switch") && n->n_inputs >= 2 && n->in_index[1] >= 0 &&
         op_is(&im->nodes[n->in_node[1]], "LoopCond");
}

static npu_status tf1_error(tf1 *t, const tf_node *n, const char *why) {
  return npuC_error(t->im->ctx, NPU_ERR_UNSUPPORTED,
                    "%s: node '%s' (%s): control flow that does not form conds and while loops: "
                    "%s", t->im->source, n->name, n->op, why);
}

/* The state a value of `src` (output `port`, -1 for a control edge) brings to its user. */
static int edge_state(tf1 *t, int src, int port) {
  importer *im = t->im;
  const tf_node *n = &im->nodes[src];
  int s = t->state[src];
  if (op_is(n, "Enter")) {
    const tf_attr *fa = node_attr(n, "frame_name");
    return frame_root(t, fa && fa->kind == TA_S ? fa->s : n->name, s);
  }
  if (op_is(n, "Exit")) return t->frames[t->states[s].frame].parent_state;
  if (op_is(n, "Switch") && port >= 0 && !is_loop_switch(im, n)) {
    if (n->n_inputs < 2 || n->in_index[1] < 0) return -2;
    return child_state(t, s, (tf_ref){n->in_node[1], n->in_index[1]}, port ? 1 : 0);
  }
  return s;
}

/* A Merge: of a loop (fed by an Enter and a NextIteration: the frame's root) or of a cond
   (its two inputs on the two branches of one predicate: the state around them). */
static npu_status merge_state(tf1 *t, int k, int *out) {
  importer *im = t->im;
  const tf_node *n = &im->nodes[k];
  int n_data = 0, enter = -1, next = -1;
  while (n_data < n->n_inputs && n->in_index[n_data] >= 0) n_data++;
  for (int i = 0; i < n_data; i++) {
    const tf_node *src = &im->nodes[n->in_node[i]];
    if (op_is(src, "Enter")) enter = i;
    if (op_is(src, "NextIteration")) next = i;
  }
  if (enter >= 0 || next >= 0) {
    if (n_data != 2 || enter < 0 || next < 0)
      return tf1_error(t, n, "a loop's Merge must join one Enter and one NextIteration");
    *out = edge_state(t, n->in_node[enter], 0);
    return *out < 0 ? oom(im) : NPU_OK;
  }
  if (n_data != 2) return tf1_error(t, n, "a Merge of other than two inputs");
  int a = edge_state(t, n->in_node[0], n->in_index[0]);
  int b = edge_state(t, n->in_node[1], n->in_index[1]);
  if (a < 0 || b < 0) return oom(im);
  const tf1_state *sa = &t->states[a], *sb = &t->states[b];
  if (sa->parent < 0 || sb->parent != sa->parent || !same_ref(sa->pred, sb->pred) ||
      sa->branch == sb->branch)
    return tf1_error(t, n, "its inputs are not the two branches of one Switch predicate");
  *out = sa->parent;
  t->then_input[k] = sa->branch ? 0 : 1;
  return NPU_OK;
}

/* Every other node: the deepest state among its inputs' (they must nest). */
static npu_status node_state(tf1 *t, int k, int *out) {
  importer *im = t->im;
  const tf_node *n = &im->nodes[k];
  int cur = -1;
  int m = n->role == ROLE_ALIAS ? n->n_rets : n->n_inputs;
  for (int i = 0; i < m; i++) {
    tf_ref r = n->role == ROLE_ALIAS ? n->ret[i] : (tf_ref){n->in_node[i], n->in_index[i]};
    int s = edge_state(t, r.node, r.index);
    if (s == -2) return tf1_error(t, &im->nodes[r.node], "a Switch without a predicate");
    if (s < 0) return oom(im);
    if (cur < 0 || state_within(t, s, cur)) cur = s;
    else if (!state_within(t, cur, s))
      return tf1_error(t, n, "it reads values of branches or loops that do not nest");
  }
  *out = cur < 0 ? 0 : cur;
  return NPU_OK;
}

/* Top-level nodes in an order where inputs come first, the NextIteration -> Merge edges of
   loops left out (the only cycles TensorFlow allows). */
static npu_status tf1_order(tf1 *t, int **order_out, int *n_order) {
  importer *im = t->im;
  int n = t->n_nodes;
  int *order = arena_calloc(&im->ar, (size_t)n + 1, sizeof *order);
  int *stack = arena_calloc(&im->ar, (size_t)n + 1, sizeof *stack);
  int *next = arena_calloc(&im->ar, (size_t)n + 1, sizeof *next);
  uint8_t *mark = arena_calloc(&im->ar, (size_t)n + 1, 1);
  if (!order || !stack || !next || !mark) return oom(im);
  int count = 0;
  for (int root = 0; root < n; root++) {
    if (mark[root] || im->nodes[root].scope != 0) continue;
    int sp = 0;
    stack[sp++] = root;
    mark[root] = 1;
    while (sp) {
      int k = stack[sp - 1];
      const tf_node *nd = &im->nodes[k];
      int m = nd->role == ROLE_ALIAS ? nd->n_rets : nd->n_inputs;
      if (next[k] < m) {
        int i = next[k]++;
        int dep = nd->role == ROLE_ALIAS ? nd->ret[i].node : nd->in_node[i];
        if (op_is(nd, "Merge") && op_is(&im->nodes[dep], "NextIteration")) continue;
        if (dep >= n || im->nodes[dep].scope != 0) continue;
        if (mark[dep] == 1)
          return npuC_error(im->ctx, NPU_ERR_UNSUPPORTED,
                            "%s: the graph has a cycle through nodes '%s' and '%s' that is not "
                            "a while loop (NextIteration into Merge)",
                            im->source, nd->name, im->nodes[dep].name);
        if (!mark[dep]) {
          mark[dep] = 1;
          stack[sp++] = dep;
        }
      } else {
        mark[k] = 2;
        order[count++] = k;
        sp--;
      }
    }
  }
  *order_out = order;
  *n_order = count;
  return NPU_OK;
}

/* The loop variable behind a loop Switch's input (its Merge), -1 if none. */
static int loop_merge_of(const importer *im, const tf_node *sw) {
  if (sw->n_inputs < 1 || sw->in_index[0] < 0) return -1;
  const tf_node *m = &im->nodes[sw->in_node[0]];
  return m->role == ROLE_LOOP_VAR ? sw->in_node[0] : -1;
}

/* The while of frame f: its loop variables (the frame's Merges, in node order), the
   condition, the body's results; its Exits become its outputs. */
static npu_status build_loop(tf1 *t, int f) {
  importer *im = t->im;
  tf1_frame *fr = &t->frames[f];
  int c = fr->construct, n = 0;
  for (int k = 0; k < t->n_nodes; k++)
    if (im->nodes[k].role == ROLE_LOOP_VAR && im->nodes[k].construct == c) n++;
  tf_construct *cs = &im->constructs[c];
  const tf_node *wn = &im->nodes[cs->node];
  if (fr->loop_cond < 0)
    return npuC_error(im->ctx, NPU_ERR_UNSUPPORTED,
                      "%s: while frame '%s' has no LoopCond", im->source, fr->name);
  if (n == 0 || n > NPUX_MAX_OUTPUTS)
    return npuC_error(im->ctx, NPU_ERR_UNSUPPORTED, "%s: while frame '%s' has %d loop variables "
                      "(1 to %d here)", im->source, wn->name, n, NPUX_MAX_OUTPUTS);
  cs->n = n;
  cs->a = arena_calloc(&im->ar, (size_t)n, sizeof *cs->a);
  cs->b = arena_calloc(&im->ar, (size_t)n, sizeof *cs->b);
  if (!cs->a || !cs->b) return oom(im);
  const tf_node *lc = &im->nodes[fr->loop_cond];
  cs->pred = (tf_ref){lc->in_node[0], lc->in_index[0]};
  int i = 0;
  for (int k = 0; k < t->n_nodes; k++) {
    tf_node *m = &im->nodes[k];
    if (m->role != ROLE_LOOP_VAR || m->construct != c) continue;
    m->out_index = i;
    for (int j = 0; j < 2; j++) {
      const tf_node *src = &im->nodes[m->in_node[j]];
      if (op_is(src, "Enter")) cs->a[i] = (tf_ref){m->in_node[j], 0};
      else cs->b[i] = (tf_ref){src->in_node[0], src->in_index[0]};
    }
    i++;
  }
  for (int k = 0; k < t->n_nodes; k++) { /* an Exit is the output of its Switch's variable */
    tf_node *e = &im->nodes[k];
    if (e->role == ROLE_OUT && e->construct == c)
      e->out_index = im->nodes[loop_merge_of(im, &im->nodes[e->in_node[0]])].out_index;
  }
  return NPU_OK;
}

/* The conds: each Merge (ROLE_OUT of a cond) is one output, its then and else inputs. */
static npu_status build_conds(tf1 *t) {
  importer *im = t->im;
  for (int k = 0; k < t->n_nodes; k++) {
    tf_node *m = &im->nodes[k];
    if (m->role != ROLE_OUT || im->constructs[m->construct].is_while) continue;
    tf_construct *cs = &im->constructs[m->construct];
    if (!cs->a) {
      int n = 0;
      for (int j = k; j < t->n_nodes; j++)
        n += im->nodes[j].role == ROLE_OUT && im->nodes[j].construct == m->construct;
      if (n > NPUX_MAX_OUTPUTS)
        return npuC_error(im->ctx, NPU_ERR_UNSUPPORTED, "%s: cond on '%s' joins %d values (at "
                          "most %d here)", im->source, im->nodes[cs->pred.node].name, n,
                          NPUX_MAX_OUTPUTS);
      cs->a = arena_calloc(&im->ar, (size_t)n, sizeof *cs->a);
      cs->b = arena_calloc(&im->ar, (size_t)n, sizeof *cs->b);
      if (!cs->a || !cs->b) return oom(im);
    }
    int ti = t->then_input[k];
    m->out_index = cs->n++;
    cs->a[m->out_index] = (tf_ref){m->in_node[ti], m->in_index[ti]};
    cs->b[m->out_index] = (tf_ref){m->in_node[1 - ti], m->in_index[1 - ti]};
  }
  return NPU_OK;
}

/* Roles and scopes from the states. */
static npu_status assign_tf1(tf1 *t, const int *order, int n_order) {
  importer *im = t->im;
  for (int i = 0; i < n_order; i++) {
    int k = order[i];
    tf_node *n = &im->nodes[k];
    int s = t->state[k];
    n->scope = t->states[s].scope;
    if (op_is(n, "Switch") || op_is(n, "Enter")) n->role = ROLE_PASS;
    else if (op_is(n, "NextIteration")) n->role = ROLE_NONE;
    else if (op_is(n, "LoopCond")) {
      tf1_frame *fr = &t->frames[t->states[s].frame];
      if (t->states[s].parent >= 0 || t->states[s].frame == 0 ||
          (fr->loop_cond >= 0 && fr->loop_cond != k))
        return tf1_error(t, n, "a LoopCond must be the only one of its while frame, outside "
                         "its conds");
      fr->loop_cond = k;
      n->role = ROLE_PASS;
    } else if (op_is(n, "Merge")) {
      bool loop = t->then_input[k] < 0;
      n->role = loop ? ROLE_LOOP_VAR : ROLE_OUT;
      n->construct = t->frames[t->states[s].frame].construct;
      if (!loop) {
        /* the cond whose branches it joins: that of its then input's state */
        int ti = t->then_input[k];
        int bs = edge_state(t, n->in_node[ti], n->in_index[ti]);
        n->construct = t->states[bs].construct;
      }
    } else if (op_is(n, "Exit")) {
      const tf_node *sw = &im->nodes[n->in_node[0]];
      int m = is_loop_switch(im, sw) ? loop_merge_of(im, sw) : -1;
      if (n->n_inputs < 1 || m < 0)
        return tf1_error(t, n, "an Exit must take a loop variable's Switch");
      const tf1_frame *fr = &t->frames[t->states[s].frame];
      n->role = ROLE_OUT;
      n->construct = fr->construct;
      n->scope = t->states[fr->parent_state].scope;
    }
  }
  return NPU_OK;
}

static npu_status functionalize_tf1(importer *im) {
  bool any = false;
  for (int k = 0; k < im->n_nodes && !any; k++) any = im->nodes[k].scope == 0 && is_tf1_flow(&im->nodes[k]);
  if (!any) return NPU_OK;
  tf1 t = {.im = im, .n_nodes = im->n_nodes};
  t.state = arena_calloc(&im->ar, (size_t)im->n_nodes + 1, sizeof *t.state);
  t.then_input = arena_calloc(&im->ar, (size_t)im->n_nodes + 1, sizeof *t.then_input);
  if (!t.state || !t.then_input) return oom(im);
  if (add_state(&t, (tf1_state){.parent = -1, .frame = 0, .scope = 0}) < 0) return oom(im);
  void *arr = NULL;
  if (grow(im, &arr, &t.cap_frames, 1, sizeof *t.frames)) return oom(im);
  t.frames = arr;
  t.frames[t.n_frames++] = (tf1_frame){.name = "", .parent_state = -1, .root = 0,
                                       .construct = -1, .loop_cond = -1};
  int *order = NULL, n_order = 0;
  npu_status st = tf1_order(&t, &order, &n_order);
  for (int i = 0; !st && i < n_order; i++) {
    int k = order[i];
    t.then_input[k] = -1;
    st = op_is(&im->nodes[k], "Merge") ? merge_state(&t, k, &t.state[k]) : node_state(&t, k, &t.state[k]);
  }
  if (!st) st = assign_tf1(&t, order, n_order);
  for (int f = 1; !st && f < t.n_frames; f++) st = build_loop(&t, f);
  if (!st) st = build_conds(&t);
  return st;
}

/* ---- TensorArrays and TensorLists -----------------------------------------------------------
 * Both are kept as one dense tensor, element i its row i (as npu.TensorArray,
 * lua/npu/control.lua): TensorArrayV3's handle and flow, and a TensorList's variant handle,
 * all stand for that buffer.  A write is tensor_array_write of the buffer (its flow_in, which
 * loops carry), a read or gather a gather, a stack the buffer itself.  The array's size, where
 * it is a constant and the array does not grow, is found by following the buffer back to the
 * node that made it (through loops, conds, Enter and Identity). */

static bool is_ta_maker(const tf_node *n) {
  return op_is(n, "TensorArrayV3") || op_is(n, "TensorListReserve") ||
         op_is(n, "EmptyTensorList") || op_is(n, "TensorListFromTensor");
}

/* The node that made the array value r is (-1: r is not one). */
static int ta_origin(const importer *im, tf_ref r) {
  for (int hops = 0; hops < 1024 && r.node >= 0; hops++) {
    const tf_node *n = &im->nodes[r.node];
    if (is_ta_maker(n)) return r.node;
    const tf_construct *c = n->role == ROLE_CONSTRUCT || n->role == ROLE_OUT ||
                                    n->role == ROLE_LOOP_VAR
                                ? &im->constructs[n->construct]
                                : NULL;
    int at = n->role == ROLE_CONSTRUCT ? r.index : n->out_index;
    if (c) {
      if (!c->a || at < 0 || at >= c->n) return -1;
      r = c->a[at];
    } else if (n->role == ROLE_ALIAS) {
      if (r.index < 0 || r.index >= n->n_rets) return -1;
      r = n->ret[r.index];
    } else if (op_is(n, "TensorArrayWriteV3") || op_is(n, "TensorArrayScatterV3") ||
               op_is(n, "TensorArraySplitV3")) {
      if (n->n_inputs < 4) return -1;
      r = (tf_ref){n->in_node[3], n->in_index[3]};
    } else if (n->role == ROLE_PASS || op_is(n, "Identity") || op_is(n, "TensorListSetItem")) {
      if (n->n_inputs < 1 || n->in_index[0] < 0) return -1;
      r = (tf_ref){n->in_node[0], n->in_index[0]};
    } else {
      return -1;
    }
  }
  return -1;
}

/* The fixed size of the array r is, or -1 (it grows, or its size is known when it runs). */
static int64_t ta_size(importer *im, tf_ref r) {
  int o = ta_origin(im, r);
  if (o < 0) return -1;
  const tf_node *n = &im->nodes[o];
  int v;
  if (op_is(n, "TensorArrayV3") || op_is(n, "TensorListReserve")) {
    const tf_attr *dyn = node_attr(n, "dynamic_size");
    if (dyn && dyn->kind == TA_B && dyn->i) return -1;
    int at = op_is(n, "TensorArrayV3") ? 0 : 1;
    if (n->n_inputs <= at || npuI_resolve(im, n->in_node[at], n->in_index[at], &v)) return -1;
    const npu_tensor *t = npuI_const_value(im->g, v);
    return t && t->numel == 1 && npu_tensor_get(t, 0) >= 0 ? (int64_t)npu_tensor_get(t, 0) : -1;
  }
  if (op_is(n, "TensorListFromTensor") && n->n_inputs >= 1 &&
      !npuI_resolve(im, n->in_node[0], n->in_index[0], &v) && npu_graph_value_ndim(im->g, v) >= 1)
    return npu_graph_value_shape(im->g, v)[0];
  return -1;
}

/* TensorArrayV3 (size; dtype, element_shape, dynamic_size), TensorListReserve (element_shape,
   num_elements; element_dtype), EmptyTensorList: a buffer of zeros, [size, element...] when
   both are known and fixed, else [0] (the first write gives the element shape). */
npu_status npuI_convert_ta_new(importer *im, tf_node *n, const npu_op_def *def, int *in,
                                 int n_data, npu_attr *attrs, int n_attrs) {
  (void)def, (void)attrs, (void)n_attrs;
  bool ta = op_is(n, "TensorArrayV3");
  const tf_attr *da = node_attr(n, ta ? "dtype" : "element_dtype");
  npu_dtype dt = NPU_DTYPE_F32;
  npu_status st = npuI_check_dtype(im, n->name, "element dtype", da && da->kind == TA_TYPE ? (int)da->i : 0, &dt);
  if (st) return st;
  int64_t dims[NPU_MAX_DIMS];
  int ndim = 1;
  dims[0] = 0;
  int64_t size = ta_size(im, (tf_ref){(int)(n - im->nodes), 0});
  bool known = size >= 0;
  if (ta) {
    const tf_attr *es = node_attr(n, "element_shape");
    known = known && es && es->kind == TA_SHAPE && es->shape.ndim >= 0 && es->shape.ndim < NPU_MAX_DIMS;
    for (int d = 0; known && d < es->shape.ndim; d++) {
      known = es->shape.dims[d] >= 0;
      dims[1 + d] = es->shape.dims[d];
    }
    if (known) ndim = 1 + es->shape.ndim;
  } else {
    const npu_tensor *es = n_data >= 1 ? npuI_const_value(im->g, in[0]) : NULL;
    known = known && es && es->ndim == 1 && es->numel < NPU_MAX_DIMS;
    for (int64_t d = 0; known && d < es->numel; d++) {
      dims[1 + d] = (int64_t)npu_tensor_get(es, d);
      known = dims[1 + d] >= 0;
    }
    if (known) ndim = 1 + (int)es->numel;
  }
  if (known) dims[0] = size;
  else ndim = 1, dims[0] = 0;
  npu_tensor *t;
  if ((st = npu_tensor_new(im->ctx, dt, ndim, dims, &t))) return st == NPU_ERR_NOMEM ? oom(im) : st;
  npu_attr a = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = t};
  st = npuI_emit(im, n, "const", n->name, 0, NULL, 1, &a);
  npu_tensor_release(t);
  return st;
}

static npu_status ta_arity(importer *im, const tf_node *n, int n_data, int need) {
  if (n_data == need) return NPU_OK;
  return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: node '%s' (%s) has %d input(s), needs %d",
                    im->source, n->name, n->op, n_data, need);
}

/* TensorArrayWriteV3 / ScatterV3 (handle, index(es), value, flow_in), TensorListSetItem
   (handle, index, item): tensor_array_write of the buffer. */
npu_status npuI_convert_ta_write(importer *im, tf_node *n, const npu_op_def *def, int *in,
                                   int n_data, npu_attr *attrs, int n_attrs) {
  (void)attrs, (void)n_attrs;
  bool ta = !op_is(n, "TensorListSetItem");
  npu_status st = ta_arity(im, n, n_data, ta ? 4 : 3);
  if (st) return st;
  int k = (int)(n - im->nodes), b = ta ? 3 : 0;
  int64_t size = ta_size(im, (tf_ref){im->nodes[k].in_node[b], im->nodes[k].in_index[b]});
  int w[3] = {in[b], in[1], in[2]};
  npu_attr a = {.name = "size", .type = NPU_ATTR_INT, .u.i = size};
  return npuI_emit(im, n, def->name, n->name, 3, w, 1, &a);
}

/* TensorArrayReadV3 / GatherV3 (handle, index(es), flow_in), TensorListGetItem / Gather
   (handle, index(es), element_shape): a gather of the buffer's rows. */
npu_status npuI_convert_ta_read(importer *im, tf_node *n, const npu_op_def *def, int *in,
                                  int n_data, npu_attr *attrs, int n_attrs) {
  (void)attrs, (void)n_attrs;
  npu_status st = ta_arity(im, n, n_data, 3);
  if (st) return st;
  bool ta = strncmp(n->op, "TensorArray", 11) == 0;
  int g[2] = {ta ? in[2] : in[0], in[1]};
  npu_attr a = {.name = "axis", .type = NPU_ATTR_INT, .u.i = 0};
  return npuI_emit(im, n, def->name, n->name, 2, g, 1, &a);
}

/* TensorArraySizeV3 (handle, flow_in), TensorListLength (handle): the fixed size as a
   constant, else the buffer's rows. */
npu_status npuI_convert_ta_size(importer *im, tf_node *n, const npu_op_def *def, int *in,
                                  int n_data, npu_attr *attrs, int n_attrs) {
  (void)def, (void)attrs, (void)n_attrs;
  bool ta = op_is(n, "TensorArraySizeV3");
  npu_status st = ta_arity(im, n, n_data, ta ? 2 : 1);
  if (st) return st;
  int k = (int)(n - im->nodes), b = ta ? 1 : 0;
  int64_t size = ta_size(im, (tf_ref){im->nodes[k].in_node[b], im->nodes[k].in_index[b]});
  npu_tensor *t; /* the size, or the index 0 of the rows in the buffer's shape */
  if ((st = npu_tensor_new(im->ctx, NPU_DTYPE_I32, 0, NULL, &t)))
    return st == NPU_ERR_NOMEM ? oom(im) : st;
  ((int32_t *)t->data)[0] = size >= 0 ? (int32_t)size : 0;
  npu_attr a = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = t};
  if (size >= 0) {
    st = npuI_emit(im, n, "const", n->name, 0, NULL, 1, &a);
    npu_tensor_release(t);
    return st;
  }
  const char *names[2] = {npuI_fresh_name(im, n->name, "shape"), npuI_fresh_name(im, n->name, "zero")};
  npu_attr ax = {.name = "axis", .type = NPU_ATTR_INT, .u.i = 0};
  int g[2];
  st = names[0] && names[1] ? NPU_OK : oom(im);
  if (!st) st = npuI_emit(im, n, "shape", names[0], 1, &in[b], 0, NULL);
  if (!st) g[0] = npu_graph_output(im->g, n->last_node, 0);
  if (!st) st = npuI_emit(im, n, "const", names[1], 0, NULL, 1, &a);
  npu_tensor_release(t);
  if (!st) g[1] = npu_graph_output(im->g, n->last_node, 0);
  if (!st) st = npuI_emit(im, n, "gather", n->name, 2, g, 1, &ax);
  return st;
}

/* TensorListStack (handle, element_shape), TensorListFromTensor (tensor, element_shape): the
   buffer is the stacked tensor. */
npu_status npuI_convert_ta_stack(importer *im, tf_node *n, const npu_op_def *def, int *in,
                                   int n_data, npu_attr *attrs, int n_attrs) {
  (void)def, (void)attrs, (void)n_attrs;
  if (n_data < 1) return ta_arity(im, n, n_data, 2);
  return npuI_emit(im, n, "identity", n->name, 1, in, 0, NULL);
}

/* TensorListElementShape (handle; shape_type): the buffer's shape less its first dimension. */
npu_status npuI_convert_ta_element_shape(importer *im, tf_node *n, const npu_op_def *def,
                                           int *in, int n_data, npu_attr *attrs, int n_attrs) {
  (void)def, (void)attrs, (void)n_attrs;
  npu_status st = ta_arity(im, n, n_data, 1);
  if (st) return st;
  const tf_attr *sa = node_attr(n, "shape_type");
  npu_dtype dt = NPU_DTYPE_I32;
  if (sa && sa->kind == TA_TYPE && (st = npuI_check_dtype(im, n->name, "shape_type", (int)sa->i, &dt)))
    return st;
  const char *name = npuI_fresh_name(im, n->name, "shape");
  if (!name) return oom(im);
  npu_attr ot = {.name = "out_type", .type = NPU_ATTR_DTYPE, .u.i = dt};
  if ((st = npuI_emit(im, n, "shape", name, 1, in, 1, &ot))) return st;
  int sh = npu_graph_output(im->g, n->last_node, 0);
  int64_t begin = 1, size = -1;
  npu_attr sl[2] = {{.name = "begin", .type = NPU_ATTR_INTS, .u.ints = {.v = &begin, .n = 1}},
                    {.name = "size", .type = NPU_ATTR_INTS, .u.ints = {.v = &size, .n = 1}}};
  return npuI_emit(im, n, "slice", n->name, 1, &sh, 2, sl);
}

/* One more npu node of tf node n, named "<n>/<suffix>" (suffix NULL: n's own name); its output
   0, or -1 with *st set (nothing done once *st is set). */
static int ta_emit(importer *im, tf_node *n, const char *op, const char *suffix, int n_in,
                   const int *in, int n_attrs, const npu_attr *attrs, npu_status *st) {
  if (*st) return -1;
  const char *name = suffix ? npuI_fresh_name(im, n->name, suffix) : n->name;
  if (!name) {
    *st = oom(im);
    return -1;
  }
  *st = npuI_emit(im, n, op, name, n_in, in, n_attrs, attrs);
  return *st ? -1 : npu_graph_output(im->g, n->last_node, 0);
}

/* An int64 vector constant. */
static int ta_ints(importer *im, tf_node *n, const char *suffix, int count, const int64_t *v,
                   npu_status *st) {
  if (*st) return -1;
  npu_tensor *t;
  if ((*st = npu_tensor_new(im->ctx, NPU_DTYPE_I64, 1, (int64_t[]){count}, &t))) {
    if (*st == NPU_ERR_NOMEM) *st = oom(im);
    return -1;
  }
  memcpy(t->data, v, (size_t)count * sizeof *v);
  npu_attr a = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = t};
  int r = ta_emit(im, n, "const", suffix, 0, NULL, 1, &a, st);
  npu_tensor_release(t);
  return r;
}

/* The dims of value x from `first` on, as an int64 vector computed from shape(x) (folded
   when x's shape is known). */
static int ta_dims_after(importer *im, tf_node *n, int x, int64_t first, npu_status *st) {
  npu_attr ot = {.name = "out_type", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_I64};
  int s = ta_emit(im, n, "shape", "shape", 1, &x, 1, &ot, st);
  int64_t size = -1;
  npu_attr sl[2] = {{.name = "begin", .type = NPU_ATTR_INTS, .u.ints = {.v = &first, .n = 1}},
                    {.name = "size", .type = NPU_ATTR_INTS, .u.ints = {.v = &size, .n = 1}}};
  return ta_emit(im, n, "slice", "dims", 1, &s, 2, sl, st);
}

/* TensorArrayConcatV3 (handle, flow_in; dtype, element_shape_except0): the elements joined
   along their first axis, and their lengths (int64).  On the dense buffer [n, l, rest...]
   every element has length l: value = reshape(buffer, [-1, rest...]), lengths = fill([n], l). */
npu_status npuI_convert_ta_concat(importer *im, tf_node *n, const npu_op_def *def, int *in,
                                  int n_data, npu_attr *attrs, int n_attrs) {
  (void)def, (void)attrs, (void)n_attrs;
  npu_status st = ta_arity(im, n, n_data, 2);
  if (st) return st;
  int buf = in[1];
  int ndim = npu_graph_value_ndim(im->g, buf);
  if (ndim == 1)
    return npuC_error(im->ctx, NPU_ERR_UNSUPPORTED, "%s: node '%s' (%s) concatenates an array "
                      "of scalars (or one nothing was written to): its elements have no first "
                      "axis", im->source, n->name, n->op);
  int64_t minus_one = -1, zero = 0, one = 1;
  int rest = ta_dims_after(im, n, buf, 2, &st);
  int head = ta_ints(im, n, "minus_one", 1, &minus_one, &st);
  npu_attr ax = {.name = "axis", .type = NPU_ATTR_INT, .u.i = 0};
  int parts[2] = {head, rest};
  int shape = ta_emit(im, n, "concat", "value_shape", 2, parts, 1, &ax, &st);
  int rs[2] = {buf, shape};
  int value = ta_emit(im, n, "reshape", "value", 2, rs, 0, NULL, &st);
  /* lengths: fill(shape[0:1], shape[1]) */
  npu_attr ot = {.name = "out_type", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_I64};
  int s = ta_emit(im, n, "shape", "buffer_shape", 1, &buf, 1, &ot, &st);
  npu_attr sl[2] = {{.name = "begin", .type = NPU_ATTR_INTS, .u.ints = {.v = &zero, .n = 1}},
                    {.name = "size", .type = NPU_ATTR_INTS, .u.ints = {.v = &one, .n = 1}}};
  int count = ta_emit(im, n, "slice", "count", 1, &s, 2, sl, &st);
  int g[2] = {s, ta_ints(im, n, "one", 1, &one, &st)};
  int len = ta_emit(im, n, "gather", "length", 2, g, 0, NULL, &st);
  int fl[2] = {count, len};
  int lengths = ta_emit(im, n, "fill", "lengths", 2, fl, 0, NULL, &st);
  int outs[2] = {value, lengths};
  ta_emit(im, n, "identity_n", NULL, 2, outs, 0, NULL, &st);
  return st;
}

/* TensorArraySplitV3 (handle, value, lengths, flow_in): element i is the next lengths[i] rows
   of value.  On the dense buffer the lengths must be one constant length l (a ragged split is
   refused, naming the node): a scatter of reshape(value, [k, l, rest...]) to rows 0 .. k-1. */
npu_status npuI_convert_ta_split(importer *im, tf_node *n, const npu_op_def *def, int *in,
                                 int n_data, npu_attr *attrs, int n_attrs) {
  (void)def, (void)attrs, (void)n_attrs;
  npu_status st = ta_arity(im, n, n_data, 4);
  if (st) return st;
  const npu_tensor *lt = npuI_const_value(im->g, in[2]);
  if (!lt || lt->ndim != 1)
    return npuC_error(im->ctx, NPU_ERR_UNSUPPORTED, "%s: node '%s' (%s): its lengths must be a "
                      "constant vector (the array's elements are rows of one dense buffer, so "
                      "they must have one length, checked when the graph is imported)",
                      im->source, n->name, n->op);
  int64_t k = lt->numel, l = k ? (int64_t)npu_tensor_get(lt, 0) : 0;
  for (int64_t i = 1; i < k; i++)
    if ((int64_t)npu_tensor_get(lt, i) != l)
      return npuC_error(im->ctx, NPU_ERR_UNSUPPORTED, "%s: node '%s' (%s) splits into elements "
                        "of lengths %lld and %lld: a ragged split is not supported (the array's "
                        "elements are rows of one dense buffer, all of one shape)", im->source,
                        n->name, n->op, (long long)l, (long long)npu_tensor_get(lt, i));
  int64_t *rows = k ? npuC_alloc(im->ctx, (size_t)k * sizeof *rows) : NULL;
  if (k && !rows) return oom(im);
  for (int64_t i = 0; i < k; i++) rows[i] = i;
  int idx = ta_ints(im, n, "indices", (int)k, rows, &st);
  npuC_free(im->ctx, rows);
  int64_t kl[2] = {k, l};
  int parts[2] = {ta_ints(im, n, "counts", 2, kl, &st), ta_dims_after(im, n, in[1], 1, &st)};
  npu_attr ax = {.name = "axis", .type = NPU_ATTR_INT, .u.i = 0};
  int shape = ta_emit(im, n, "concat", "elements_shape", 2, parts, 1, &ax, &st);
  int rs[2] = {in[1], shape};
  int elems = ta_emit(im, n, "reshape", "elements", 2, rs, 0, NULL, &st);
  int node = (int)(n - im->nodes);
  int64_t size = ta_size(im, (tf_ref){im->nodes[node].in_node[3], im->nodes[node].in_index[3]});
  npu_attr a = {.name = "size", .type = NPU_ATTR_INT, .u.i = size};
  int w[3] = {in[3], idx, elems};
  ta_emit(im, n, "tensor_array_write", NULL, 3, w, 1, &a, &st);
  return st;
}

/* TensorListPushBack (input_handle, tensor; element_dtype): the element appended, at row
   rows(buffer) of a growing buffer (an empty list's [0] buffer takes the element's shape). */
npu_status npuI_convert_ta_push_back(importer *im, tf_node *n, const npu_op_def *def, int *in,
                                     int n_data, npu_attr *attrs, int n_attrs) {
  (void)def, (void)attrs, (void)n_attrs;
  npu_status st = ta_arity(im, n, n_data, 2);
  if (st) return st;
  int s = ta_emit(im, n, "shape", "shape", 1, &in[0], 0, NULL, &st);
  npu_attr ax = {.name = "axis", .type = NPU_ATTR_INT, .u.i = 0};
  npu_tensor *z;
  if (!st && (st = npu_tensor_new(im->ctx, NPU_DTYPE_I32, 0, NULL, &z)))
    return st == NPU_ERR_NOMEM ? oom(im) : st;
  npu_attr za = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = z};
  int g[2] = {s, ta_emit(im, n, "const", "zero", 0, NULL, 1, &za, &st)};
  npu_tensor_release(z);
  int at = ta_emit(im, n, "gather", "index", 2, g, 1, &ax, &st);
  npu_attr a = {.name = "size", .type = NPU_ATTR_INT, .u.i = -1};
  int w[3] = {in[0], at, in[1]};
  ta_emit(im, n, "tensor_array_write", NULL, 3, w, 1, &a, &st);
  return st;
}

/* Roles the TensorArray ops need before anything is built. */
static npu_status mark_tensor_arrays(importer *im) {
  for (int k = 0; k < im->n_nodes; k++) {
    tf_node *n = &im->nodes[k];
    if (op_is(n, "TensorArrayV3")) n->collapse = true; /* handle and flow: the buffer */
    if (op_is(n, "TensorArrayCloseV3")) n->role = ROLE_NONE;
  }
  return NPU_OK;
}

/* ---- building scopes ------------------------------------------------------------------------ */

/* The value of output `index` of tf node `node`: its npu output, or what it stands for. */
npu_status npuI_resolve(importer *im, int node, int index, int *value) {
  *value = -1;
  for (int hops = 0; hops < 4096; hops++) {
    const tf_node *n = &im->nodes[node];
    if (n->collapse) index = 0;
    switch (n->role) {
    case ROLE_PASS:
      node = n->in_node[0], index = n->in_index[0];
      continue;
    case ROLE_ALIAS:
      if (index >= n->n_rets) break;
      node = n->ret[index].node, index = n->ret[index].index;
      continue;
    case ROLE_OUT:
      if (index != 0)
        return npuC_error(im->ctx, NPU_ERR_UNSUPPORTED, "%s: output %d of '%s' (%s) is not "
                          "supported (only its value, output 0)", im->source, index, n->name, n->op);
      *value = npu_graph_output(im->g, im->nodes[im->constructs[n->construct].node].last_node,
                                n->out_index);
      break;
    case ROLE_NONE:
      return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: node '%s' (%s) has no value to read",
                        im->source, n->name, n->op);
    default: *value = npu_graph_output(im->g, n->last_node, index); break;
    }
    if (*value < 0)
      return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: output %d of node '%s' (%s) is read before "
                        "it is built, or it has no such output", im->source, index, n->name, n->op);
    return NPU_OK;
  }
  return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: node '%s': its input passes through too many "
                    "Switch / Enter / Identity nodes", im->source, im->nodes[node].name);
}

static npu_status add_dep_node(importer *im, int to, int dep) {
  tf_dep *d = arena_alloc(&im->ar, sizeof *d);
  if (!d) return oom(im);
  d->node = dep;
  d->next = NULL;
  tf_node *n = &im->nodes[to];
  if (n->deps_tail) n->deps_tail->next = d;
  else n->deps = d;
  n->deps_tail = d;
  return NPU_OK;
}

/* Node j reads node i: whatever of j's scope chain is in i's scope is built after i. */
static npu_status add_dep(importer *im, int j, int i) {
  int si = im->nodes[i].scope, t = j;
  const tf_node *nj = &im->nodes[j];
  if (nj->role == ROLE_CONSTRUCT) { /* reading its own scopes' results: not a dependency */
    const tf_construct *c = &im->constructs[nj->construct];
    for (int b = 0; b < 2; b++)
      if (c->scope[b] >= 0 && scope_within(im, si, c->scope[b])) return NPU_OK;
  }
  if (!scope_within(im, nj->scope, si))
    return npuC_error(im->ctx, NPU_ERR_FORMAT,
                      "%s: node '%s' reads '%s', which is inside a branch or loop that node is "
                      "not in", im->source, nj->name, im->nodes[i].name);
  while (im->nodes[t].scope != si) t = im->constructs[im->scopes[im->nodes[t].scope].construct].node;
  return t == i ? NPU_OK : add_dep_node(im, t, i);
}

static npu_status add_ref_deps(importer *im, int j, int n, const tf_ref *refs) {
  for (int i = 0; refs && i < n; i++) {
    npu_status st = add_dep(im, j, refs[i].node);
    if (st) return st;
  }
  return NPU_OK;
}

/* What each node is built after, and each scope's members in node order. */
static npu_status build_deps(importer *im) {
  for (int s = 0; s < im->n_scopes; s++) im->scopes[s].first = -1;
  for (int k = im->n_nodes - 1; k >= 0; k--) {
    tf_node *n = &im->nodes[k];
    n->next_in_scope = im->scopes[n->scope].first;
    im->scopes[n->scope].first = k;
  }
  for (int k = 0; k < im->n_nodes; k++) {
    const tf_node *n = &im->nodes[k];
    npu_status st = NPU_OK;
    switch (n->role) {
    case ROLE_LOOP_VAR: break; /* reads nothing: the loop sets it */
    case ROLE_OUT: st = add_dep_node(im, k, im->constructs[n->construct].node); break;
    case ROLE_ALIAS: st = add_ref_deps(im, k, n->n_rets, n->ret); break;
    case ROLE_CONSTRUCT: {
      const tf_construct *c = &im->constructs[n->construct];
      if (c->n) {
        st = add_ref_deps(im, k, 1, &c->pred);
        if (!st) st = add_ref_deps(im, k, c->n, c->a);
        if (!st) st = add_ref_deps(im, k, c->n, c->b);
      }
      for (int i = n_data_inputs(n); !st && i < n->n_inputs; i++) st = add_dep(im, k, n->in_node[i]);
      break;
    }
    default:
      for (int i = 0; !st && i < n->n_inputs; i++) st = add_dep(im, k, n->in_node[i]);
      break;
    }
    if (st) return st;
  }
  return NPU_OK;
}

static npu_status build_node(importer *im, int k);

/* The members of scope s, inputs first (depth first, otherwise in node order). */
static npu_status build_scope(importer *im, int s) {
  int *stack = NULL, sp = 0, cap = 0; /* explicit: graphs are deep */
  void *arr = NULL;
  if (grow(im, &arr, &cap, 64, sizeof *stack)) return oom(im);
  stack = arr;
  for (int root = im->scopes[s].first; root >= 0; root = im->nodes[root].next_in_scope) {
    if (im->nodes[root].state) continue;
    stack[sp++] = root;
    im->nodes[root].state = 1;
    im->nodes[root].next_dep = im->nodes[root].deps;
    while (sp) {
      int k = stack[sp - 1];
      tf_node *n = &im->nodes[k];
      if (n->next_dep) {
        int dep = n->next_dep->node;
        n->next_dep = n->next_dep->next;
        tf_node *d = &im->nodes[dep];
        if (d->state == 1)
          return npuC_error(im->ctx, NPU_ERR_UNSUPPORTED,
                            "%s: the graph has a cycle through nodes '%s' and '%s'%s", im->source,
                            n->name, d->name, is_tf1_flow(n) || is_tf1_flow(d) ? "" :
                            " (a loop that is not a TensorFlow while loop)");
        if (!d->state) {
          d->state = 1;
          d->next_dep = d->deps;
          arr = stack;
          if (grow(im, &arr, &cap, sp + 1, sizeof *stack)) return oom(im);
          stack = arr;
          stack[sp++] = dep;
        }
      } else {
        n->state = 2;
        sp--;
        npu_status st = build_node(im, k);
        if (st) return st;
      }
    }
  }
  return NPU_OK;
}

/* A loop variable: its dtype that of the value the loop starts with; its shape the TF2
   While's output_shapes entry for it when it has one of that value's rank (TensorFlow checked
   the invariants when it built the graph; an unknown rank: any shape), else that value's rank
   with every dimension free (an imported body is trusted), or anything for values of unknown
   rank.  A TensorArray's buffer (whose TensorFlow shape is a handle's) keeps its shape when it
   is fixed (a fixed size, a known element shape), else takes any (the first write shapes it, a
   growing array grows). */
static npu_status build_loop_var(importer *im, int k) {
  tf_node *n = &im->nodes[k];
  const tf_construct *c = &im->constructs[n->construct];
  int init;
  npu_status st = npuI_resolve(im, c->a[n->out_index].node, c->a[n->out_index].index, &init);
  if (st) return st;
  int ndim = npu_graph_value_ndim(im->g, init);
  const int64_t *shape = npu_graph_value_shape(im->g, init);
  bool ta = ta_origin(im, c->a[n->out_index]) >= 0;
  const tf_attr *os = node_attr(&im->nodes[c->node], "output_shapes");
  const tf_shape *inv = !ta && os && os->kind == TA_LIST_SHAPE && n->out_index < os->n
                            ? &os->shapes[n->out_index]
                            : NULL;
  if (inv && inv->ndim >= 0 && inv->ndim != ndim) inv = NULL; /* not this value's: ignored */
  bool any = ndim < 0 || (inv && inv->ndim < 0);
  int64_t dims[NPU_MAX_DIMS];
  for (int d = 0; d < ndim && d < NPU_MAX_DIMS; d++) {
    dims[d] = ta ? shape[d] : inv ? inv->dims[d] : -1;
    any |= ta && shape[d] < 0;
  }
  any |= ta && ndim == 1 && shape[0] == 0; /* an array nothing was written to: shaped by writes */
  npu_attr attrs[3] = {
      {.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = npu_graph_value_dtype(im->g, init)},
      {.name = "index", .type = NPU_ATTR_INT, .u.i = n->out_index},
      any ? (npu_attr){.name = "any_shape", .type = NPU_ATTR_BOOL, .u.i = 1}
          : (npu_attr){.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {.v = dims, .n = ndim}}};
  return npuI_emit(im, n, "loop_var", n->name, 0, NULL, 3, attrs);
}

static npu_status resolve_refs(importer *im, int n, const tf_ref *refs, int *out) {
  for (int i = 0; i < n; i++) {
    npu_status st = npuI_resolve(im, refs[i].node, refs[i].index, &out[i]);
    if (st) return st;
  }
  return NPU_OK;
}

/* A cond or while: its scopes in regions, then the node. */
static npu_status build_construct(importer *im, int k) {
  tf_node *n = &im->nodes[k];
  const tf_construct *c = &im->constructs[n->construct];
  if (!c->n) return NPU_OK; /* a TF1 cond nothing joins: nothing reads its branches */
  int region[2] = {0, 0};
  npu_status st = NPU_OK;
  for (int b = 0; b < (c->is_while ? 1 : 2) && !st; b++) {
    if ((st = npu_graph_region_begin(im->g, &region[b]))) return oom(im);
    st = build_scope(im, c->scope[b]);
    npu_status st2 = npu_graph_region_end(im->g, region[b]);
    if (!st) st = st2;
  }
  if (st) return st;
  int *in = arena_calloc(&im->ar, 2 * (size_t)c->n + 2, sizeof *in);
  if (!in) return oom(im);
  int *pred = c->is_while ? &in[c->n] : &in[0];
  int *a = c->is_while ? &in[0] : &in[1];
  int *b = &in[c->n + 1];
  if ((st = npuI_resolve(im, c->pred.node, c->pred.index, pred)) || (st = resolve_refs(im, c->n, c->a, a)) ||
      (st = resolve_refs(im, c->n, c->b, b)))
    return st;
  npu_attr attrs[2];
  if (c->is_while) {
    attrs[0] = (npu_attr){.name = "region", .type = NPU_ATTR_INT, .u.i = region[0]};
    attrs[1] = (npu_attr){.name = "maximum_iterations", .type = NPU_ATTR_INT, .u.i = -1};
  } else {
    attrs[0] = (npu_attr){.name = "then_region", .type = NPU_ATTR_INT, .u.i = region[0]};
    attrs[1] = (npu_attr){.name = "else_region", .type = NPU_ATTR_INT, .u.i = region[1]};
    if (npu_graph_value_dtype(im->g, *pred) != NPU_DTYPE_BOOL ||
        npu_graph_value_ndim(im->g, *pred) > 0) { /* TensorFlow's If takes any scalar: != 0 */
      const char *name = npuI_fresh_name(im, n->name, "pred");
      npu_attr z = {.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_BOOL};
      if (!name) return oom(im);
      if ((st = npuI_emit(im, n, "cast", name, 1, pred, 1, &z))) return st;
      *pred = npu_graph_output(im->g, n->last_node, 0);
    }
  }
  return npuI_emit(im, n, c->is_while ? "while" : "cond", n->name, 2 * c->n + 1, in, 2, attrs);
}

static npu_status build_node(importer *im, int k) {
  tf_node *n = &im->nodes[k];
  npu_status st = NPU_OK;
  switch (n->role) {
  case ROLE_NODE: st = npuI_convert_node(im, n); break;
  case ROLE_LOOP_VAR: return build_loop_var(im, k);
  case ROLE_CONSTRUCT: st = build_construct(im, k); break;
  case ROLE_OUT: { /* an identity named after the Merge / Exit, so it can be fetched */
    if (!im->constructs[n->construct].n) return NPU_OK;
    int v;
    if ((st = npuI_resolve(im, k, 0, &v))) return st;
    return npuI_emit(im, n, "identity", n->name, 1, &v, 0, NULL);
  }
  case ROLE_ALIAS: { /* an identity_n named after the call: "call:i" is its output i */
    int *v = arena_calloc(&im->ar, (size_t)n->n_rets + 1, sizeof *v);
    if (!v) return oom(im);
    if (!n->n_rets) return NPU_OK;
    if ((st = resolve_refs(im, n->n_rets, n->ret, v))) return st;
    return npuI_emit(im, n, "identity_n", n->name, n->n_rets, v, 0, NULL);
  }
  default: return NPU_OK;
  }
  if (st) return st;
  n = &im->nodes[k];
  for (int i = 0; i < n->n_inputs && n->first_node >= 0; i++) { /* control inputs */
    const tf_node *src = &im->nodes[n->in_node[i]];
    if (n->in_index[i] >= 0 || src->last_node < 0 || src->scope != n->scope) continue;
    if ((st = npu_graph_add_control(im->g, n->first_node, src->last_node))) return st;
  }
  return NPU_OK;
}

npu_status npuI_build_graph(importer *im) {
  npu_status st = npuI_index_names(im);
  if (st) return st;
  if ((st = npu_graph_new(im->ctx, &im->g))) return st;
  for (int k = 0; k < im->n_nodes; k++) im->nodes[k].first_node = im->nodes[k].last_node = -1;
  if (new_scope(im, -1, 0) < 0) return oom(im);
  if (!st) st = expand_functions(im);
  if (!st) st = npuI_check_supported(im);
  if (!st) st = npuI_resolve_inputs(im);
  if (!st) st = functionalize_tf1(im);
  if (!st) st = mark_tensor_arrays(im);
  if (!st) st = build_deps(im);
  if (!st) st = build_scope(im, 0);
  return st;
}

