/* implmode.c — operator implementation modes.  Not yet written: high_precision everywhere. */
#include "compile/passes.h"

npu_status npuP_select_impl(npuP_build *b) { (void)b; return NPU_OK; }
