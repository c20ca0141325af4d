/* Composite ops that run inner graphs (node->sub: mixture_of_experts'
 * experts, the transformer layers) inside the one plan: the composite's
 * infer infers the inner graphs and plans their memory into the node's own
 * workspace and saved bytes, which the parent's plan counts and places;
 * the inner parameters are declared as the node's (so weights files, init
 * and optimizers see one model) and are views of them, in the model's one
 * parameter block. Once the parent is planned, running an inner graph
 * allocates nothing and cannot fail. */
#ifndef DL_SUBGRAPH_H
#define DL_SUBGRAPH_H

#include "engine/graph.h"
#include "engine/op.h"

/* What the inner graphs need, for their current shapes (the largest over
 * the copies). */
struct dl_sub_sizes {
	size_t arena;   /* inference: activations, liveness-planned */
	size_t train;   /* training: activations and their gradients kept
	                 * from forward to backward, then the inner nodes'
	                 * saved state */
	size_t ws;      /* the inner nodes' workspace (one node at a time) */
};

/* Shape inference of inner graph g on inputs of shapes in (batch first):
 * runs its ops' infer and sets its values' shapes. Allocates nothing once
 * the graph has been inferred before (parameters are declared then). */
int dl_sub_infer(struct dl_graph *g, const struct dl_shape *in,
		 struct dl_error *err);
/* Declares every parameter of the inner graphs in s as a parameter of n
 * named "SCOPE.NAME" (SCOPE the inner node's own scope), after the node's
 * own ones, and plans the inner graphs' memory for their current shapes
 * into *sz. Called from infer, after dl_sub_infer; the first call keeps
 * the mapping and the plan's offsets in n->priv (which must be unused by
 * the op). */
int dl_sub_plan(struct dl_node *n, const struct dl_subgraphs *s,
		struct dl_sub_sizes *sz, struct dl_error *err);
/* The sizes of the last dl_sub_plan of n. */
const struct dl_sub_sizes *dl_sub_planned(const struct dl_node *n);
/* Points the inner parameters (and gradients) at the node's. */
void dl_sub_link(struct dl_node *n, const struct dl_subgraphs *s);
/* Places inner graph s->g[i] as planned by dl_sub_plan: training, its
 * activations, gradients and saved state at base (sz.train bytes);
 * inference, its activations at base (sz.arena bytes), fused
 * (engine/fuse.c: bias, activations, residual adds in the products'
 * epilogues, dropouts skipped) when fuse is set (dl_ctx_fuses) and
 * plain otherwise; the inner workspace at ws (sz.ws bytes). Shapes may
 * since have shrunk (fewer rows: a mixture's expert on its share of the
 * tokens). */
void dl_sub_bind(struct dl_node *n, const struct dl_subgraphs *s, int i,
		 int train, int fuse, char *base, char *ws);
/* Training memory of g laid out one buffer after another (no reuse) for
 * its current shapes: bytes, each buffer's rounded up to 64 when aligned,
 * else exact (to bound a sum over calls). *terms: how many buffers. */
size_t dl_sub_packed_bytes(const struct dl_graph *g, int aligned, int *terms);
/* Places g's training memory that way at base (64-byte aligned), the
 * inner workspace at ws; returns the bytes used at base. */
size_t dl_sub_bind_packed(struct dl_graph *g, char *base, char *ws);

#endif
