/* Placeholder: the rnn op family (rnn, lstm, gru) is being written. */
#include <stddef.h>

#include "engine/op.h"

const struct dl_op_desc *const dl_ops_rnn[] = {NULL};
