/*
 * graph.c — the graph container: a node array, a value array and a name index.
 *
 * Nodes are appended in topological order (inputs and control dependencies name earlier
 * nodes), so a node id order is always a valid execution order and graphs copy, dump and
 * verify without pointer chasing.  What an op means lives in csrc/ops; this file only stores.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/npu_int.h"

npu_status npu_graph_new(npu_context *ctx, npu_graph **out) {
  if (!out) return npuC_error(ctx, NPU_ERR_ARG, "npu_graph_new: out is NULL");
  *out = NULL;
  npu_graph *g = npuC_calloc(ctx, 1, sizeof *g);
  if (!g) return NPU_ERR_NOMEM;
  atomic_init(&g->refcount, 1);
  g->ctx = npu_context_retain(ctx);
  *out = g;
  return NPU_OK;
}

npu_graph *npu_graph_retain(npu_graph *g) {
  if (g) atomic_fetch_add(&g->refcount, 1);
  return g;
}

void npuG_free_attrs(npu_context *ctx, npuG_attr *attrs, int n) {
  for (int i = 0; i < n; i++) {
    npuG_attr *a = &attrs[i];
    npuC_free(ctx, a->name);
    switch (a->type) {
    case NPU_ATTR_STRING: npuC_free(ctx, a->u.s); break;
    case NPU_ATTR_INTS: npuC_free(ctx, a->u.ints.v); break;
    case NPU_ATTR_FLOATS: npuC_free(ctx, a->u.floats.v); break;
    case NPU_ATTR_TENSOR: npu_tensor_release(a->u.tensor); break;
    default: break;
    }
  }
  npuC_free(ctx, attrs);
}

void npu_graph_release(npu_graph *g) {
  if (!g || atomic_fetch_sub(&g->refcount, 1) != 1) return;
  npu_context *ctx = g->ctx;
  for (int i = 0; i < g->n_nodes; i++) {
    npuG_node *n = &g->nodes[i];
    npuC_free(ctx, n->name);
    npuC_free(ctx, n->inputs);
    npuC_free(ctx, n->controls);
    npuG_free_attrs(ctx, n->attrs, n->n_attrs);
  }
  npuC_free(ctx, g->nodes);
  npuC_free(ctx, g->values);
  npuC_free(ctx, g->regions);
  npuC_free(ctx, g->variables);
  npuC_free(ctx, g->name_slots);
  for (int i = 0; i < g->n_datasets; i++) g->dataset_release(g->datasets[i]);
  npuC_free(ctx, g->datasets);
  npuC_free(ctx, g);
  npu_context_release(ctx);
}

int npuG_find_node(const npu_graph *g, const char *name) {
  if (!g->n_name_slots || !name) return -1;
  uint32_t mask = (uint32_t)g->n_name_slots - 1;
  for (uint32_t i = npuC_hash_str(name) & mask;; i = (i + 1) & mask) {
    int slot = g->name_slots[i];
    if (slot == 0) return -1;
    if (strcmp(g->nodes[slot - 1].name, name) == 0) return slot - 1;
  }
}

static void index_name(npu_graph *g, int node) {
  uint32_t mask = (uint32_t)g->n_name_slots - 1;
  uint32_t i = npuC_hash_str(g->nodes[node].name) & mask;
  while (g->name_slots[i]) i = (i + 1) & mask;
  g->name_slots[i] = node + 1;
}

/* Keeps the name index at most half full. */
static npu_status reserve_names(npu_graph *g, int n_nodes) {
  if (g->n_name_slots >= 2 * n_nodes) return NPU_OK;
  int n = g->n_name_slots ? g->n_name_slots : 64;
  while (n < 2 * n_nodes) n *= 2;
  int *slots = npuC_calloc(g->ctx, (size_t)n, sizeof *slots);
  if (!slots) return NPU_ERR_NOMEM;
  npuC_free(g->ctx, g->name_slots);
  g->name_slots = slots;
  g->n_name_slots = n;
  for (int i = 0; i < g->n_nodes; i++) index_name(g, i);
  return NPU_OK;
}

/* TensorFlow's rule: a taken name gets the first free suffix _1, _2, ... */
static char *unique_name(npu_graph *g, const char *base) {
  if (npuG_find_node(g, base) < 0) return npuC_strdup(g->ctx, base);
  size_t len = strlen(base) + 24;
  char *buf = npuC_alloc(g->ctx, len);
  if (!buf) return NULL;
  for (long k = 1;; k++) {
    snprintf(buf, len, "%s_%ld", base, k);
    if (npuG_find_node(g, buf) < 0) return buf;
  }
}

npu_status npuG_check_growable(npu_graph *g, const char *what) {
  if (!atomic_load(&g->n_running)) return NPU_OK;
  return npuC_error(g->ctx, NPU_ERR_STATE, "cannot add %s: a session is running this graph (a "
                    "host or progress function may not grow it; add to it before or after the "
                    "run)", what);
}

npu_status npuG_append(npu_graph *g, npuG_node *node, const char *name, const char *default_name,
                       const npuG_value *outputs) {
  npu_context *ctx = g->ctx;
  if (atomic_load(&g->n_running)) {
    char what[160];
    snprintf(what, sizeof what, "node '%s'", name ? name : default_name);
    return npuG_check_growable(g, what);
  }
  if (name && (!*name || strchr(name, ':')))
    return npuC_error(ctx, NPU_ERR_ARG, "invalid node name '%s' (empty or containing ':')",
                      name);
  if (g->n_nodes == g->cap_nodes) {
    int cap = g->cap_nodes ? 2 * g->cap_nodes : 16;
    npuG_node *nodes = npuC_realloc(ctx, g->nodes, (size_t)cap * sizeof *nodes);
    if (!nodes) return NPU_ERR_NOMEM;
    g->nodes = nodes;
    g->cap_nodes = cap;
  }
  if (g->n_values + node->n_outputs > g->cap_values) {
    int cap = g->cap_values ? 2 * g->cap_values : 16;
    while (cap < g->n_values + node->n_outputs) cap *= 2;
    npuG_value *values = npuC_realloc(ctx, g->values, (size_t)cap * sizeof *values);
    if (!values) return NPU_ERR_NOMEM;
    g->values = values;
    g->cap_values = cap;
  }
  if (reserve_names(g, g->n_nodes + 1)) return NPU_ERR_NOMEM;
  char *unique = unique_name(g, name ? name : default_name);
  if (!unique) return NPU_ERR_NOMEM;
  int id = g->n_nodes;
  node->name = unique;
  node->first_output = g->n_values;
  node->region = g->cur_region;
  g->nodes[id] = *node;
  for (int i = 0; i < node->n_outputs; i++) {
    npuG_value v = outputs[i];
    v.node = id;
    v.index = i;
    g->values[g->n_values++] = v;
  }
  g->n_nodes++;
  index_name(g, id);
  return NPU_OK;
}

void npuG_truncate(npu_graph *g, int n_nodes) {
  if (n_nodes < 0 || n_nodes >= g->n_nodes) return;
  g->n_values = g->nodes[n_nodes].first_output;
  for (int i = n_nodes; i < g->n_nodes; i++) {
    npuG_node *n = &g->nodes[i];
    npuC_free(g->ctx, n->name);
    npuC_free(g->ctx, n->inputs);
    npuC_free(g->ctx, n->controls);
    npuG_free_attrs(g->ctx, n->attrs, n->n_attrs);
  }
  g->n_nodes = n_nodes;
  int kept = 0; /* the variables of the removed nodes go too, and initializers among them */
  for (int i = 0; i < g->n_variables; i++) {
    npuG_variable v = g->variables[i];
    if (v.node >= n_nodes) continue;
    if (v.initializer >= n_nodes) v.initializer = -1;
    g->variables[kept++] = v;
  }
  g->n_variables = kept;
  memset(g->name_slots, 0, (size_t)g->n_name_slots * sizeof *g->name_slots);
  for (int i = 0; i < g->n_nodes; i++) index_name(g, i);
}

bool npuG_value_known(const npuG_value *v) {
  if (v->ndim < 0) return false;
  for (int i = 0; i < v->ndim; i++)
    if (v->shape[i] < 0) return false;
  return true;
}

bool npuG_shape_fits(const npuG_value *want, int ndim, const int64_t *shape) {
  if (want->ndim < 0 || ndim < 0) return true;
  if (want->ndim != ndim) return false;
  for (int d = 0; d < ndim; d++)
    if (want->shape[d] >= 0 && shape[d] >= 0 && want->shape[d] != shape[d]) return false;
  return true;
}

bool npuG_region_within(const npu_graph *g, int inner, int outer) {
  while (inner != outer && inner > 0 && inner <= g->n_regions) inner = g->regions[inner - 1].parent;
  return inner == outer;
}

npu_status npu_graph_region_begin(npu_graph *g, int *region) {
  if (region) *region = -1;
  if (!g || !region) return NPU_ERR_ARG;
  if (g->n_regions == g->cap_regions) {
    int cap = g->cap_regions ? 2 * g->cap_regions : 8;
    npuG_region *r = npuC_realloc(g->ctx, g->regions, (size_t)cap * sizeof *r);
    if (!r) return NPU_ERR_NOMEM;
    g->regions = r;
    g->cap_regions = cap;
  }
  g->regions[g->n_regions++] = (npuG_region){.parent = g->cur_region, .owner = -1, .open = true};
  *region = g->cur_region = g->n_regions;
  return NPU_OK;
}

npu_status npu_graph_region_end(npu_graph *g, int region) {
  if (!g) return NPU_ERR_ARG;
  if (region <= 0 || region != g->cur_region)
    return npuC_error(g->ctx, NPU_ERR_STATE,
                      "npu_graph_region_end: region %d is not the one being built (%d): regions "
                      "close in the reverse order they opened", region, g->cur_region);
  g->regions[region - 1].open = false;
  g->cur_region = g->regions[region - 1].parent;
  return NPU_OK;
}

int npu_graph_region(const npu_graph *g) { return g ? g->cur_region : -1; }

int npu_graph_node_region(const npu_graph *g, int node) {
  return g && node >= 0 && node < g->n_nodes ? g->nodes[node].region : -1;
}

const npuG_attr *npuG_attr_find(const npuG_node *node, const char *name) {
  for (int i = 0; i < node->n_attrs; i++)
    if (strcmp(node->attrs[i].name, name) == 0) return &node->attrs[i];
  return NULL;
}

npu_status npu_graph_add_control(npu_graph *g, int node, int dep) {
  if (node < 0 || node >= g->n_nodes || dep < 0 || dep >= g->n_nodes)
    return npuC_error(g->ctx, NPU_ERR_ARG, "npu_graph_add_control: no node %d or %d", node, dep);
  if (dep >= node)
    return npuC_error(g->ctx, NPU_ERR_ARG,
                      "npu_graph_add_control: '%s' must be created before '%s' to be its "
                      "control dependency",
                      g->nodes[dep].name, g->nodes[node].name);
  if (atomic_load(&g->n_running)) {
    char what[300];
    snprintf(what, sizeof what, "a control edge '%.100s' -> '%.100s'", g->nodes[dep].name,
             g->nodes[node].name);
    return npuG_check_growable(g, what);
  }
  npuG_node *n = &g->nodes[node];
  int *c = npuC_realloc(g->ctx, n->controls, (size_t)(n->n_controls + 1) * sizeof *c);
  if (!c) return NPU_ERR_NOMEM;
  c[n->n_controls++] = dep;
  n->controls = c;
  return NPU_OK;
}

/* ---- accessors --------------------------------------------------------- */

int npu_graph_n_nodes(const npu_graph *g) { return g->n_nodes; }
int npu_graph_n_values(const npu_graph *g) { return g->n_values; }

static bool valid_node(const npu_graph *g, int node) { return node >= 0 && node < g->n_nodes; }
static bool valid_value(const npu_graph *g, int v) { return v >= 0 && v < g->n_values; }

int npu_graph_output(const npu_graph *g, int node, int i) {
  if (!valid_node(g, node) || i < 0 || i >= g->nodes[node].n_outputs) return -1;
  return g->nodes[node].first_output + i;
}
int npu_graph_n_outputs(const npu_graph *g, int node) {
  return valid_node(g, node) ? g->nodes[node].n_outputs : -1;
}
int npu_graph_n_inputs(const npu_graph *g, int node) {
  return valid_node(g, node) ? g->nodes[node].n_inputs : -1;
}
int npu_graph_input(const npu_graph *g, int node, int i) {
  if (!valid_node(g, node) || i < 0 || i >= g->nodes[node].n_inputs) return -1;
  return g->nodes[node].inputs[i];
}
const char *npu_graph_node_name(const npu_graph *g, int node) {
  return valid_node(g, node) ? g->nodes[node].name : NULL;
}
int npu_graph_find_node(const npu_graph *g, const char *name) { return npuG_find_node(g, name); }

npu_status npu_graph_keep_dtype(npu_graph *g, int value) {
  if (!g) return NPU_ERR_ARG;
  if (!valid_value(g, value))
    return npuC_error(g->ctx, NPU_ERR_ARG, "npu_graph_keep_dtype: %d is not a value of this graph",
                      value);
  g->nodes[g->values[value].node].keep_dtype = true;
  return NPU_OK;
}
int npu_graph_keeps_dtype(const npu_graph *g, int node) {
  return valid_node(g, node) && g->nodes[node].keep_dtype;
}

npu_status npu_graph_find_value(const npu_graph *g, const char *tensor_name, int *value) {
  *value = -1;
  if (!tensor_name)
    return npuC_error(g->ctx, NPU_ERR_ARG, "npu_graph_find_value: tensor name is NULL");
  char node_name[256];
  const char *colon = strrchr(tensor_name, ':');
  long index = 0;
  size_t len = colon ? (size_t)(colon - tensor_name) : strlen(tensor_name);
  if (colon) {
    char *end;
    index = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end || index < 0)
      return npuC_error(g->ctx, NPU_ERR_ARG,
                        "'%s' is not a tensor name (expected \"node:index\")", tensor_name);
  }
  if (len >= sizeof node_name)
    return npuC_error(g->ctx, NPU_ERR_NOT_FOUND, "no node named '%.*s...'", 64, tensor_name);
  memcpy(node_name, tensor_name, len);
  node_name[len] = 0;
  int node = npuG_find_node(g, node_name);
  if (node < 0) return npuC_error(g->ctx, NPU_ERR_NOT_FOUND, "no node named '%s'", node_name);
  if (index >= g->nodes[node].n_outputs)
    return npuC_error(g->ctx, NPU_ERR_NOT_FOUND, "node '%s' has %d output(s); there is no '%s'",
                      node_name, g->nodes[node].n_outputs, tensor_name);
  *value = g->nodes[node].first_output + (int)index;
  return NPU_OK;
}

int npu_graph_value_node(const npu_graph *g, int v) { return valid_value(g, v) ? g->values[v].node : -1; }
int npu_graph_value_index(const npu_graph *g, int v) {
  return valid_value(g, v) ? g->values[v].index : -1;
}
npu_dtype npu_graph_value_dtype(const npu_graph *g, int v) {
  return valid_value(g, v) ? g->values[v].dtype : NPU_DTYPE_COUNT;
}
int npu_graph_value_ndim(const npu_graph *g, int v) {
  return valid_value(g, v) ? g->values[v].ndim : -1;
}
const int64_t *npu_graph_value_shape(const npu_graph *g, int v) {
  return valid_value(g, v) ? g->values[v].shape : NULL;
}

/* ---- variables ---------------------------------------------------------------------------- */

npu_status npuG_reserve_variable(npu_graph *g) {
  if (g->n_variables < g->cap_variables) return NPU_OK;
  int cap = g->cap_variables ? 2 * g->cap_variables : 8;
  npuG_variable *v = npuC_realloc(g->ctx, g->variables, (size_t)cap * sizeof *v);
  if (!v) return NPU_ERR_NOMEM;
  g->variables = v;
  g->cap_variables = cap;
  return NPU_OK;
}

void npuG_register_variable(npu_graph *g, int node, bool trainable) {
  if (g->n_variables == g->cap_variables) return; /* not reserved: a caller's bug, not a crash */
  g->variables[g->n_variables++] = (npuG_variable){.node = node, .initializer = -1,
                                                   .trainable = trainable};
}

void npuG_note_assign(npu_graph *g, int node) {
  const npuG_node *a = &g->nodes[node];
  if (a->n_inputs < 1) return;
  int var_node = g->values[a->inputs[0]].node;
  int i = npu_graph_find_variable(g, var_node);
  if (i < 0 || g->variables[i].initializer >= 0) return;
  const char *vname = g->nodes[var_node].name;
  size_t n = strlen(vname);
  if (strncmp(a->name, vname, n) == 0 && strcmp(a->name + n, "/Assign") == 0)
    g->variables[i].initializer = node;
}

int npu_graph_n_variables(const npu_graph *g) { return g ? g->n_variables : 0; }

int npu_graph_find_variable(const npu_graph *g, int node) {
  if (!g) return -1;
  for (int i = 0; i < g->n_variables; i++)
    if (g->variables[i].node == node) return i;
  return -1;
}

npu_status npu_graph_variable_info(const npu_graph *g, int i, npu_variable_info *out) {
  if (!out) return g ? npuC_error(g->ctx, NPU_ERR_ARG, "npu_graph_variable_info: out is NULL")
                     : NPU_ERR_ARG;
  *out = (npu_variable_info){.node = -1, .value = -1, .initializer = -1};
  if (!g) return NPU_ERR_ARG;
  if (i < 0 || i >= g->n_variables)
    return npuC_error(g->ctx, NPU_ERR_ARG, "npu_graph_variable_info: no variable %d (the graph has %d)",
                      i, g->n_variables);
  const npuG_variable *v = &g->variables[i];
  const npuG_node *n = &g->nodes[v->node];
  const npuG_value *val = &g->values[n->first_output];
  *out = (npu_variable_info){.node = v->node, .value = n->first_output,
                             .initializer = v->initializer, .trainable = v->trainable,
                             .name = n->name, .dtype = val->dtype, .ndim = val->ndim,
                             .shape = val->shape};
  return NPU_OK;
}

npu_status npu_graph_set_variable_trainable(npu_graph *g, int i, int trainable) {
  if (!g) return NPU_ERR_ARG;
  if (i < 0 || i >= g->n_variables)
    return npuC_error(g->ctx, NPU_ERR_ARG,
                      "npu_graph_set_variable_trainable: no variable %d (the graph has %d)", i,
                      g->n_variables);
  g->variables[i].trainable = trainable != 0;
  return NPU_OK;
}

npu_status npu_graph_add_variable(npu_graph *g, const char *name, int initial_value,
                                  int *value_out) {
  if (!g) return NPU_ERR_ARG;
  if (!value_out) return npuC_error(g->ctx, NPU_ERR_ARG, "npu_graph_add_variable: value_out is NULL");
  *value_out = -1;
  const char *asked = name ? name : "Variable"; /* messages name the variable asked for */
  if (initial_value < 0 || initial_value >= g->n_values)
    return npuC_error(g->ctx, NPU_ERR_ARG,
                      "npu_graph_add_variable '%s': initial value %d is not a value of this "
                      "graph", asked, initial_value);
  const npuG_value *init = &g->values[initial_value];
  if (!npuG_value_known(init)) {
    char sb[96];
    return npuC_error(g->ctx, NPU_ERR_ARG,
                      "npu_graph_add_variable '%s': the initial value's shape must be fully "
                      "known: '%s:%d' has shape %s", asked, g->nodes[init->node].name,
                      init->index, npuC_shape_str(sb, sizeof sb, init->ndim, init->shape));
  }
  npu_attr attrs[2] = {
      {.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = init->dtype},
      {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {init->shape, init->ndim}}};
  int before = g->n_nodes, var_node, assign_node;
  npu_status st = npu_graph_add_op(g, "variable", name ? name : "Variable", 0, NULL, 2, attrs,
                                   &var_node);
  if (st) return st;
  const char *vname = g->nodes[var_node].name;
  size_t len = strlen(vname) + sizeof "/Assign";
  char *aname = npuC_alloc(g->ctx, len);
  if (!aname) {
    npuG_truncate(g, before);
    return NPU_ERR_NOMEM;
  }
  snprintf(aname, len, "%s/Assign", vname);
  int inputs[2] = {g->nodes[var_node].first_output, initial_value};
  st = npu_graph_add_op(g, "assign", aname, 2, inputs, 0, NULL, &assign_node);
  npuC_free(g->ctx, aname);
  if (st) {
    npuG_truncate(g, before);
    return st;
  }
  *value_out = g->nodes[var_node].first_output;
  return NPU_OK;
}

npu_status npu_graph_add_variables_initializer(npu_graph *g, const char *name, int *node_out) {
  if (!g) return NPU_ERR_ARG;
  if (!node_out)
    return npuC_error(g->ctx, NPU_ERR_ARG, "npu_graph_add_variables_initializer: node_out is NULL");
  *node_out = -1;
  int before = g->n_nodes, node;
  npu_status st = npu_graph_add_op(g, "no_op", name ? name : "init", 0, NULL, 0, NULL, &node);
  for (int i = 0; !st && i < g->n_variables; i++)
    if (g->variables[i].initializer >= 0)
      st = npu_graph_add_control(g, node, g->variables[i].initializer);
  if (st) {
    npuG_truncate(g, before);
    return st;
  }
  *node_out = node;
  return NPU_OK;
}
