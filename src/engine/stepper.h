/* Stepping a model along its token sequence (dlrun generate): which nodes
 * run on the token positions, the state they keep between calls (KV
 * caches, recurrent states), and the generic rules most ops follow. A
 * stepped call feeds only the new positions of the token input; ops that
 * mix positions keep what they need of the earlier ones in their state. */
#ifndef DL_STEPPER_H
#define DL_STEPPER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/graph.h"
#include "engine/op.h"

/* Follows the token positions through g from its inputs (in_axis[i]: input
 * i's token axis counted from the end, 0: none), for the shapes of its
 * last inference: sets every node's step_axis and step_floats (inner
 * graphs through their composites' step functions). Fails naming the
 * first entry that cannot run a part of the sequence at a time. *out_axis
 * (may be NULL) gets each output's axis. */
int dl_graph_step_analyse(struct dl_graph *g, const int *in_axis,
			  int64_t max_len, int *out_axis, struct dl_error *err);
/* After dl_graph_step_analyse on g (the top graph): which values of the
 * entries that do not depend on the tokens are read by entries that do
 * (or are model outputs), kept per sequence: off[v] their offset in
 * floats in a sequence's store (-1: not kept), for the current shapes
 * (batch 1 or more); returns the floats a sequence needs. */
size_t dl_graph_step_konst(const struct dl_graph *g, int64_t *off);
/* Clears what dl_graph_step_analyse set (nodes of inner graphs too). */
void dl_graph_step_clear(struct dl_graph *g);
/* The state floats of one sequence over every node (inner graphs too). */
size_t dl_graph_step_floats(const struct dl_graph *g);
/* Places every node's state in base, which holds rows sequences of
 * dl_graph_step_floats floats, node by node. */
void dl_graph_step_bind(struct dl_graph *g, float *base, int64_t rows);
/* Copies sequence src's state to sequence dst in every node (beam
 * search's reordering). */
void dl_graph_step_copy(struct dl_graph *g, int64_t dst, int64_t src);

/* ---- step functions for the descriptors ---- */

/* Position by position, inputs broadcast from the right: every input on
 * the tokens has the same axis; another input must not span that axis
 * (size 1 or fewer dimensions), or it would be a fixed-length sequence
 * added to the tokens. */
int dl_step_pointwise(struct dl_node *n, const struct dl_shape *in,
		      const int *in_axis, int *out_axis, int64_t max_len,
		      struct dl_error *err);
/* The same, for ops that mix only the last dimension (linear, layer_norm
 * over the last size, an expert mixture per position): the token axis
 * must not be the last. */
int dl_step_rows(struct dl_node *n, const struct dl_shape *in,
		 const int *in_axis, int *out_axis, int64_t max_len,
		 struct dl_error *err);
/* An op that mixes dimension dim (of input 0's rank; negative from the
 * end) and keeps the others: the token axis must be another. */
int dl_step_check_dim(struct dl_node *n, const struct dl_shape *in,
		      const int *in_axis, int64_t dim, int hp,
		      struct dl_error *err);

#endif
