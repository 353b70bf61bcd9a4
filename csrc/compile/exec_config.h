/*
 * exec_config.h — graph-level options: set_graph_exec_config (002 §7.3) and the
 * ExperimentalConfig fields (004) a node carries, and what a session makes of them.
 *
 * npu_graph_set_exec_config stores an overlay on a node, as node attributes (so a .pb export
 * keeps them).  A run whose nodes (the fetches, the targets and everything they depend on, up
 * to the feeds) include such a node compiles with the session's options with the overlay on
 * top (graph level wins, 002 §7.3), checked by the same cross-option rules, and with an
 * npuP_config made from them.  The session keeps one npuP_graph_config per carrying node for
 * as long as it keeps plans (they borrow it); a change to any node's config (the graph's
 * exec_config_epoch) makes them all stale.
 */
#ifndef NPU_EXEC_CONFIG_H
#define NPU_EXEC_CONFIG_H

#include "compile/compile.h"

typedef struct npuP_graph_config {
  int node;             /* the node carrying the overlay */
  npu_options *options; /* the session's options with the overlay on top, checked (owned) */
  npuP_config compile;  /* made from options */
} npuP_graph_config;

/* A session's graph-level configs.  Zero-initialised is empty. */
typedef struct npuP_graph_configs {
  unsigned epoch;            /* the graph's exec_config_epoch these were made at */
  int n;
  npuP_graph_config **items; /* each allocated alone: plans hold &items[i]->compile */
} npuP_graph_configs;

/* The compile config of a run: base (the session's) when no node the run reaches carries a
   graph-level config, else the one of that node, made now (*made true) or found in set.
   Then, when the chosen options ask for it (dynamic_input with dynamic_inputs_shape_range),
   the ranges are checked against the run's placeholders and get_next outputs and against the
   feeds.  Errors: NPU_ERR_CONFLICT (two nodes of the run with different configs, named; or
   the merged options break a cross-option rule), NPU_ERR_OPTION / NPU_ERR_SHAPE (the shape
   ranges), what npuP_config_init fails with, NPU_ERR_NOMEM.  Runs on the compile path only. */
npu_status npuP_config_for_run(npuP_graph_configs *set, npu_context *ctx, const npu_graph *g,
                               const npu_options *session, npuP_config *base, int n_feeds,
                               const int *feeds, npu_tensor *const *feed_tensors,
                               int n_fetches, const int *fetches, int n_targets,
                               const int *targets, npuP_config **out, bool *made);
/* Whether some node's config changed since set was made (the caller drops its plans, then
   calls npuP_graph_configs_free, which also takes the graph's current epoch). */
bool npuP_graph_configs_stale(const npuP_graph_configs *set, const npu_graph *g);
void npuP_graph_configs_free(npu_context *ctx, npuP_graph_configs *set, const npu_graph *g);
/* Whether accelerate_train_mode is on in a config of set or in some node's overlay of g. */
bool npuP_graph_configs_accelerate(const npuP_graph_configs *set, const npu_graph *g);

/* The importer's side: whether a GraphDef attribute name is one of the graph-level options'
   ("_is_train_graph", "_graph_dynamic_input", ...), and putting such attributes (others are
   skipped) back on node as its config.  Errors: NPU_ERR_FORMAT (a value of the wrong type),
   NPU_ERR_OPTION (a value the option refuses), NPU_ERR_NOMEM. */
bool npuP_is_exec_config_attr(const char *name);
npu_status npuP_exec_config_import(npu_graph *g, int node, int n_attrs, const npu_attr *attrs);

#endif
