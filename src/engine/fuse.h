/* Fused epilogues at inference: a convolution or linear entry applies the
 * bias, a folded batch norm, activations and a residual add to its output
 * while it is in cache, in place of the entries that follow it (the pass
 * that chooses them: fuse.c). */
#ifndef DL_FUSE_H
#define DL_FUSE_H

#include <stdint.h>

#include "engine/op.h"   /* enum dl_act */

struct dl_graph;
struct dl_node;

/* Per output channel c: y = act2(act1((y + bias[c]) * scale[c] + shift[c])
 * + r), r the residual's element at the same place. */
struct dl_epilogue {
	int bn;              /* node index of the folded batch norm, or -1 */
	int act1, act2;      /* enum dl_act */
	int res;             /* value id of the residual, or -1 */
	int last;            /* index of the chain's last node */
	int ready;           /* scale and shift made (at the first call) */
	const float *bias;   /* [C] the head's bias, or NULL */
	float *scale, *shift;/* [C] the folded batch norm, or NULL */
	const float *resp;   /* the residual's data for this call, or NULL */
};

/* The fusion pass over an inference plan (fuse.c); undoes an earlier one.
 * Returns 0, or -1 out of memory (then nothing is fused). */
int dl_graph_fuse(struct dl_graph *g);
/* Frees what dl_graph_fuse set on the nodes. */
void dl_graph_unfuse(struct dl_graph *g);
/* Makes e's scale and shift from the batch norm's parameters (once: the
 * weights are fixed), in the room dl_graph_fuse gave them. */
void dl_epilogue_prepare(struct dl_graph *g, struct dl_node *n);

/* y[0..n) of output channel c; r: the residual at the same place, or NULL
 * when there is none. */
void dl_epilogue_row(const struct dl_epilogue *e, float *y, const float *r,
		     int64_t c, int64_t n);
/* y[rows, C] (a linear entry's output; channels are columns), r the same
 * layout or NULL. */
void dl_epilogue_cols(const struct dl_epilogue *e, float *y, const float *r,
		      int64_t rows, int64_t C);
/* y [n, DL_EPI_LANES] with channels in lanes: lane l holds channel c0 + l
 * (l < L; the other lanes are left with unspecified values), p the
 * channels' parameters in lanes (3 DL_EPI_LANES floats) that
 * dl_epilogue_lanes_prepare made. For an epilogue without a residual
 * (e->res < 0); the same bits as dl_epilogue_row. */
#define DL_EPI_LANES 16
void dl_epilogue_lanes_prepare(const struct dl_epilogue *e, float *p, int64_t c0, int L);
void dl_epilogue_lanes(const struct dl_epilogue *e, const float *p, float *y, int64_t n);

#endif
