/* precision.h — precision modes as the compiler applies them (precision.c), and the files that
   adjust them: modify_mixlist and customize_dtypes (mixlist.c). */
#ifndef NPU_PRECISION_H
#define NPU_PRECISION_H
#include "ops/ops.h"

typedef enum npuP_precision {
  NPUP_ORIGIN = 0,     /* keep every dtype; customize_dtypes ignored (000) */
  NPUP_FORCE_FP16,     /* every op float16 in and out */
  NPUP_FP32_TO_FP16,   /* cube ops float16 in and out */
  NPUP_CUBE_FP16_IN,   /* cube ops float16 in, float32 out */
  NPUP_MIX_FP16,       /* trust-list ops float16, gray-list ops follow their upstream */
  NPUP_MIX_BF16,       /* the same in bfloat16 */
  NPUP_FP32_TO_BF16    /* keep every dtype (every op here supports float32); customize applies */
} npuP_precision;

/* The session's mode, from precision_mode_v2 or precision_mode (defaults by graph_run_mode). */
npuP_precision npuP_precision_mode(const npu_options *o);

/* One customize_dtypes line. */
typedef struct npuP_dtype_rule {
  char *name;        /* the node name of an "Opname::" line; NULL for an "OpType::" line */
  int op;            /* the op id of an "OpType::" line; -1 for a name line */
  int line;          /* 1-based, for messages */
  int n_in, n_out;   /* dtypes given for the first inputs / outputs (0 when a part is absent) */
  npu_dtype *dtypes; /* n_in then n_out (owned) */
} npuP_dtype_rule;

/* What modify_mixlist and customize_dtypes ask (mixlist.c); NULL when neither is set. */
struct npuP_mix_config {
  bool modified;               /* a modify_mixlist file was given */
  uint8_t list[NPUX_OP_COUNT]; /* npuX_prec by op id: the built-in list, then the file's moves */
  char *dtypes_path;           /* customize_dtypes, for messages at compile time (owned) */
  int n_rules;
  npuP_dtype_rule *rules;      /* in file order; name lines and type lines each unique */
  int type_rule[NPUX_OP_COUNT]; /* by op id: the index of its OpType:: rule, or -1 */
};

/* The precision list of op id in a mixed mode: the built-in one, or modify_mixlist's. */
npuX_prec npuP_mix_list(const struct npuP_mix_config *mix, int op);
/* The customize_dtypes rule for a node (name line first, then its op's type line), or NULL. */
const npuP_dtype_rule *npuP_mix_rule(const struct npuP_mix_config *mix, const char *node, int op);
#endif
