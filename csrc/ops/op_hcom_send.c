/*
 * op_hcom_send.c — hcom_send: sends x to rank dest_rank of group (HCCL's HcomSend,
 * hccl_ops.send(tensor, sr_tag, dest_rank, group)); the hcom_receive of that rank with the
 * same sr_tag (in [0, 16383]) and this rank as src_rank takes it.  No outputs: run it as a
 * target.  x is float32, float16 or int32 of a known shape, which must be the receiver's
 * declared shape and dtype (checked before any data moves: both ranks fail naming both).  The
 * step ends when the receiver has taken the tensor (a synchronous send), so two ranks that
 * exchange must order their send and receive oppositely.
 */
#include "ops/hcom.h"

static npu_status parse(npuX_infer *ic, void *params) {
  ic->n_outputs = 0;
  return npuX_hcom_parse(ic, params, NPUX_HCOM_DEST);
}

static npu_status infer(npuX_infer *ic, const void *params) {
  (void)params;
  ic->n_outputs = 0;
  return npuX_hcom_check_dtypes(ic, 0);
}

static npu_status run(const npuX_call *c) { return npuX_hcom_run(c, NPUX_COLL_SEND, 0); }

const npu_op_def npuX_op_hcom_send = {
    .name = "hcom_send", .tf_type = "HcomSend", .args = "sr_tag,dest_rank", .min_inputs = 1,
    .max_inputs = 1, .n_outputs = 0, .prec = NPUX_PREC_GRAY,
    .flags = NPUX_F_NO_FOLD | NPUX_F_SHARED, .parse = parse, .infer = infer, .run = run};
