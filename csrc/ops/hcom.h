/*
 * hcom.h — what the collective ops (op_hcom_*.c) share: their attributes, as TF Adapter's
 * hccl_ops gives them (reduction "sum"|"prod"|"max"|"min", root_rank, rank_size, fusion,
 * fusion_id, group), and the call into the run's communicator (npuX_comm, ops.h).
 *
 * Every collective is NPUX_F_NO_FOLD (it must run, once per step, on every rank) and has no
 * gradient.  Dtypes: float32, float16, int32 (float16 is reduced in float32 and rounded once).
 */
#ifndef NPU_OPS_HCOM_H
#define NPU_OPS_HCOM_H

#include "ops/ops.h"

typedef struct npuX_hcom_params {
  npuX_reduction reduction;
  int64_t root_rank, rank_size, fusion, fusion_id;
} npuX_hcom_params;
_Static_assert(sizeof(npuX_hcom_params) <= sizeof(npuG_params), "params too big");

/* Which attributes an op takes. */
enum { NPUX_HCOM_REDUCTION = 1, NPUX_HCOM_ROOT = 2, NPUX_HCOM_RANK_SIZE = 4 };

/* Reads the attributes `which` asks for (required ones missing: NPU_ERR_ARG), and fusion,
   fusion_id and group ("hccl_world_group" only: other groups are NPU_ERR_UNSUPPORTED). */
npu_status npuX_hcom_parse(npuX_infer *ic, npuX_hcom_params *p, unsigned which);
/* Inputs [first, n_inputs) are float32, float16 or int32, all of one dtype. */
npu_status npuX_hcom_check_dtypes(npuX_infer *ic, int first);
/* Describes the collective of call c on inputs [first, n_inputs) and runs it: start, then
   finish into c->out[0..). */
npu_status npuX_hcom_run(const npuX_call *c, npuX_coll_kind kind, int first);
/* "sum", ... */
const char *npuX_reduction_name(npuX_reduction r);

#endif
