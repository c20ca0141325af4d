/* Every op the binary knows, looked up by name. */
#ifndef DL_REGISTRY_H
#define DL_REGISTRY_H

#include "engine/op.h"

/* The op called name, or NULL. */
const struct dl_op_desc *dl_op_find(const char *name);
/* All ops in registry order, NULL-terminated. */
const struct dl_op_desc *const *dl_op_all(void);
/* The registered op name closest to name, for "did you mean"; NULL when
 * none is close. Names of composites are included. */
const char *dl_op_suggest(const char *name);

#endif
