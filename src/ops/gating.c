/* Placeholder: the gating op family (highway, spatial_gating, graph_conv) is being written. */
#include <stddef.h>

#include "engine/op.h"

const struct dl_op_desc *const dl_ops_gating[] = {NULL};
