/* Placeholder: the attention op family (attention, multihead_attention) is being written. */
#include <stddef.h>

#include "engine/op.h"

const struct dl_op_desc *const dl_ops_attention[] = {NULL};
