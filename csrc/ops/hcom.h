/*
 * hcom.h — what the collective ops (op_hcom_*.c) share: their attributes, as TF Adapter's
 * hccl_ops gives them (reduction "sum"|"prod"|"max"|"min", root_rank, rank_size, fusion,
 * fusion_id, group; send/receive's sr_tag, dest_rank / src_rank), and the call into the run's
 * communicator (npuX_comm, ops.h).
 *
 * Every collective is NPUX_F_NO_FOLD (it must run, once per step, on every rank) and has no
 * gradient.  Dtypes: float32, float16, int32 (float16 is reduced in float32 and rounded once).
 */
#ifndef NPU_OPS_HCOM_H
#define NPU_OPS_HCOM_H

#include "ops/ops.h"

/* HCCL's group names are at most 127 characters. */
enum { NPUX_HCOM_GROUP_MAX = 128 };

typedef struct npuX_hcom_params {
  npuX_reduction reduction;
  int64_t root_rank, rank_size, fusion, fusion_id;
  int64_t sr_tag, peer; /* send: dest_rank, receive: src_rank */
  char group[NPUX_HCOM_GROUP_MAX]; /* "" : hccl_world_group (resolved when the step runs: a
                                      group may be created after the graph) */
} npuX_hcom_params;
_Static_assert(sizeof(npuX_hcom_params) <= sizeof(npuG_params), "params too big");

/* Which attributes an op takes. */
enum { NPUX_HCOM_REDUCTION = 1, NPUX_HCOM_ROOT = 2, NPUX_HCOM_RANK_SIZE = 4,
       NPUX_HCOM_DEST = 8, NPUX_HCOM_SRC = 16 /* sr_tag with dest_rank / src_rank */ };
/* sr_tag's range: two MPI tags per sr_tag, within the 32767 every MPI allows. */
enum { NPUX_HCOM_TAG_MAX = 16383 };

/* Reads the attributes `which` asks for (required ones missing: NPU_ERR_ARG), and fusion,
   fusion_id and group (a name of at most 127 characters; whether it exists is checked when
   the step runs). */
npu_status npuX_hcom_parse(npuX_infer *ic, npuX_hcom_params *p, unsigned which);
/* Inputs [first, n_inputs) are float32, float16 or int32, all of one dtype. */
npu_status npuX_hcom_check_dtypes(npuX_infer *ic, int first);
/* Describes the collective of call c on inputs [first, n_inputs) and runs it: start, then
   finish into c->out[0..). */
npu_status npuX_hcom_run(const npuX_call *c, npuX_coll_kind kind, int first);
/* "sum", ... */
const char *npuX_reduction_name(npuX_reduction r);

#endif
