/*
 * hcom.c — the collective ops' shared attribute parsing and their call into the communicator
 * (ops/hcom.h).  The communicator is the session's (csrc/dist/ over MPI); a call without one
 * (a graph evaluated outside a session) is NPU_ERR_STATE naming the node.  A receive hands its
 * output to the communicator as the description of what it expects.
 */
#include <stdint.h>
#include <string.h>

#include "ops/hcom.h"

static const char *const reduction_names[NPUX_RED_COUNT] = {
    [NPUX_RED_SUM] = "sum", [NPUX_RED_PROD] = "prod", [NPUX_RED_MAX] = "max",
    [NPUX_RED_MIN] = "min"};

const char *npuX_reduction_name(npuX_reduction r) {
  return r >= 0 && r < NPUX_RED_COUNT ? reduction_names[r] : "?";
}

static npu_status require(npuX_infer *ic, const char *name) {
  if (npuG_attr_find(ic->node, name)) return NPU_OK;
  return npuX_error(ic, NPU_ERR_ARG, "attribute '%s' is required", name);
}

npu_status npuX_hcom_parse(npuX_infer *ic, npuX_hcom_params *p, unsigned which) {
  npu_status st = NPU_OK;
  p->fusion = 1;
  p->fusion_id = -1;
  if (which & NPUX_HCOM_REDUCTION) {
    const char *r = NULL;
    st = require(ic, "reduction");
    if (!st) st = npuX_attr_string(ic, "reduction", &r);
    if (!st) {
      int k = 0;
      while (k < NPUX_RED_COUNT && strcmp(r, reduction_names[k])) k++;
      if (k == NPUX_RED_COUNT)
        return npuX_error(ic, NPU_ERR_ARG, "unknown reduction '%s' (sum, prod, max or min)", r);
      p->reduction = (npuX_reduction)k;
    }
  }
  if (!st && (which & NPUX_HCOM_ROOT)) {
    st = require(ic, "root_rank");
    if (!st) st = npuX_attr_int(ic, "root_rank", &p->root_rank);
    if (!st && p->root_rank < 0)
      st = npuX_error(ic, NPU_ERR_ARG, "root_rank %lld is negative", (long long)p->root_rank);
  }
  if (!st && (which & NPUX_HCOM_RANK_SIZE)) {
    st = require(ic, "rank_size");
    if (!st) st = npuX_attr_int(ic, "rank_size", &p->rank_size);
    if (!st && p->rank_size < 1)
      st = npuX_error(ic, NPU_ERR_ARG, "rank_size %lld must be at least 1",
                      (long long)p->rank_size);
  }
  if (!st) st = npuX_attr_int(ic, "fusion", &p->fusion);
  if (!st) st = npuX_attr_int(ic, "fusion_id", &p->fusion_id);
  if (!st && (p->fusion < 0 || p->fusion > 2))
    st = npuX_error(ic, NPU_ERR_ARG, "fusion %lld: 0 (none), 1 (by gradient split) or 2 (by "
                    "fusion_id)", (long long)p->fusion);
  if (!st && (which & (NPUX_HCOM_DEST | NPUX_HCOM_SRC))) {
    const char *peer = which & NPUX_HCOM_DEST ? "dest_rank" : "src_rank";
    st = require(ic, "sr_tag");
    if (!st) st = npuX_attr_int(ic, "sr_tag", &p->sr_tag);
    if (!st && (p->sr_tag < 0 || p->sr_tag > NPUX_HCOM_TAG_MAX))
      st = npuX_error(ic, NPU_ERR_ARG, "sr_tag %lld is outside [0, %d]", (long long)p->sr_tag,
                      NPUX_HCOM_TAG_MAX);
    if (!st) st = require(ic, peer);
    if (!st) st = npuX_attr_int(ic, peer, &p->peer);
    if (!st && (p->peer < 0 || p->peer > INT32_MAX))
      st = npuX_error(ic, NPU_ERR_ARG, "%s %lld is not a rank", peer, (long long)p->peer);
  }
  const char *group = NULL;
  if (!st) st = npuX_attr_string(ic, "group", &group);
  if (!st && group && !*group)
    st = npuX_error(ic, NPU_ERR_ARG, "group is an empty name");
  if (!st && group && strlen(group) >= NPUX_HCOM_GROUP_MAX)
    st = npuX_error(ic, NPU_ERR_ARG, "group name of %zu characters (at most %d)", strlen(group),
                    NPUX_HCOM_GROUP_MAX - 1);
  p->group[0] = 0;
  if (!st && group && strcmp(group, "hccl_world_group")) strcpy(p->group, group);
  return st;
}

npu_status npuX_hcom_check_dtypes(npuX_infer *ic, int first) {
  static const npu_dtype ok[] = {NPU_DTYPE_F32, NPU_DTYPE_F16, NPU_DTYPE_I32, NPU_DTYPE_COUNT};
  if (ic->n_inputs <= first) return npuX_error(ic, NPU_ERR_ARG, "needs at least one tensor");
  npu_status st = npuX_check_dtype(ic, first, ok);
  if (!st) st = npuX_check_same_dtype(ic, first);
  return st;
}

npu_status npuX_hcom_run(const npuX_call *c, npuX_coll_kind kind, int first) {
  const npuX_hcom_params *p = c->params;
  const char *op = npuX_op(c->node->op)->name;
  if (!c->comm)
    return npuC_error(c->ctx, NPU_ERR_STATE, "%s '%s': no communicator (collectives run in a "
                      "session)", op, c->node->name);
  npuX_coll coll = {.kind = kind, .reduction = p->reduction, .root = (int)p->root_rank,
                    .rank_size = (int)p->rank_size, .n = c->n_inputs - first,
                    .in = (const npu_tensor *const *)c->in + first, .op = op,
                    .node = c->node->name, .group = p->group[0] ? p->group : NULL,
                    .peer = (int)p->peer, .tag = (int)p->sr_tag};
  if (kind == NPUX_COLL_RECV) coll.n = 1, coll.in = (const npu_tensor *const *)c->out;
  int64_t ticket = 0;
  npu_status st = c->comm->start(c->comm, c->ctx, &coll, &ticket);
  if (!st) st = c->comm->finish(c->comm, c->ctx, ticket, c->pool, c->n_outputs, c->out);
  return st;
}
