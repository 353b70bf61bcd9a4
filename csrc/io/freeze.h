/*
 * freeze.h — what npu_graph_freeze keeps, shared with npu_session_freeze (session.c), which
 * must know which variables to read from the session before it can freeze them.
 */
#ifndef NPU_IO_FREEZE_H
#define NPU_IO_FREEZE_H

#include "core/npu_int.h"

/* Marks in mark[node] (g->n_nodes entries, zeroed by the caller) the nodes a frozen graph of
   these outputs keeps: the outputs' ancestors through inputs and control dependencies, and
   for each kept variable that stays a variable (frozen[variable index] false) its initializer
   and that initializer's ancestors; and every loop_var of a kept while.  frozen: g's
   n_variables entries.  Errors: NPU_ERR_ARG (a node id not of g, no outputs, an output inside
   a region, a kept node of a region whose cond / while is not kept: named), NPU_ERR_NOMEM;
   mark is then partly filled. */
npu_status npuI_freeze_reach(npu_graph *g, int n_outputs, const int *output_nodes,
                             const bool *frozen, bool *mark);

#endif
