/* Ops that run sub-models (node->sub: mixture_of_experts' experts, the
 * transformer layers): the sub-models' parameters are declared as the
 * node's own, so weights files, init and optimizers see one model, and
 * are pointed at the node's storage before each run. */
#ifndef DL_SUBGRAPH_H
#define DL_SUBGRAPH_H

#include "engine/graph.h"
#include "engine/op.h"

/* Declares every parameter of the sub-models in s as a parameter of n
 * named "SCOPE.NAME" (SCOPE the sub-model node's own scope), after the
 * node's own ones (first_param of them). Called from infer; the first call
 * records the mapping in n->priv (which must be unused by the op). */
int dl_sub_declare(struct dl_node *n, const struct dl_subgraphs *s,
		   struct dl_error *err);
/* Points the sub-models' parameters (and gradients) at the node's. */
void dl_sub_link(struct dl_node *n, const struct dl_subgraphs *s);
/* Infers, and plans for ctx->train, sub-model g on inputs of the given
 * shapes: 0, or an error. A training plan gets its gradients set up. */
int dl_sub_prepare(struct dl_graph *g, const struct dl_shape *in, int train,
		   struct dl_error *err);

#endif
