/* Placeholder: the sequence op family (embedding, positional_encoding) is being written. */
#include <stddef.h>

#include "engine/op.h"

const struct dl_op_desc *const dl_ops_sequence[] = {NULL};
