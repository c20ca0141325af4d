/* 3-D pooling: max_pool3d, avg_pool3d and adaptive_avg_pool3d on
 * [N, C, D, H, W], with PyTorch's window, divisor and output-size rules
 * (those of the 2-D forms in pool.c with a third size). OpenMP over the
 * N C volumes; backward recomputes each window's winner from the input
 * instead of saving indices. */
#include <math.h>
#include <string.h>

#include "engine/op.h"
#include "engine/vmath.h"
#include "ops/spatial.h"

/* Run a loop over volumes in parallel when there is enough work. */
#define PAR_MIN 16384

/* ---- hyperparameters ---- */

enum { HP_KERNEL, HP_STRIDE, HP_PADDING, HP_DILATION, HP_CEIL, N_MAX_HP };
enum { HA_KERNEL, HA_STRIDE, HA_PADDING, HA_CEIL, HA_COUNT_PAD, N_AVG_HP };

static const struct dl_hp_desc max3_hp[N_MAX_HP] = {
	{"kernel_size", DL_HP_INTS, NULL, NULL, DL_HP_REQUIRED | DL_HP_POSITIVE},
	{"stride", DL_HP_INTS, "kernel_size", NULL, DL_HP_DERIVED | DL_HP_POSITIVE},
	{"padding", DL_HP_PADDING, "0", NULL, DL_HP_NONNEG},
	{"dilation", DL_HP_INTS, "1", NULL, DL_HP_POSITIVE},
	{"ceil_mode", DL_HP_BOOL, "false", NULL, 0},
};

static const struct dl_hp_desc avg3_hp[N_AVG_HP] = {
	{"kernel_size", DL_HP_INTS, NULL, NULL, DL_HP_REQUIRED | DL_HP_POSITIVE},
	{"stride", DL_HP_INTS, "kernel_size", NULL, DL_HP_DERIVED | DL_HP_POSITIVE},
	{"padding", DL_HP_PADDING, "0", NULL, DL_HP_NONNEG},
	{"ceil_mode", DL_HP_BOOL, "false", NULL, 0},
	{"count_include_pad", DL_HP_BOOL, "true", NULL, 0},
};

static const struct dl_hp_desc adaptive3_hp[] = {
	{"output_size", DL_HP_INTS, NULL, NULL, DL_HP_REQUIRED | DL_HP_POSITIVE},
};

/* ---- geometry ---- */

/* Volumes [I0, I1, I2] -> [O0, O1, O2] */
struct pgeom3 {
	int64_t N, C, I[3], O[3];
	int64_t k[3], s[3], d[3];
	int64_t pb[3], pa[3];   /* padding before and after */
	int count_pad;          /* avg: count_include_pad */
};

static int is_max(const struct dl_node *n) { return n->op->hp == max3_hp; }

static int64_t vol(const int64_t *v) { return v[0] * v[1] * v[2]; }

/* Checks the rank of the input [N, C, D, H, W] and fills N, C and I. */
static int volumes(const struct dl_node *n, const struct dl_shape *in,
		   struct pgeom3 *g, struct dl_error *err)
{
	char a[64];
	memset(g, 0, sizeof *g);
	if (in->ndim != 5)
		return dl_node_error(err, n, -1, "expects a %s input, got %s", dl_spatial_layout(3),
				     dl_shape_str(in, a, sizeof a));
	g->N = in->d[0];
	g->C = in->d[1];
	for (int i = 0; i < 3; i++)
		g->I[i] = in->d[2 + i];
	if (vol(g->I) == 0)
		return dl_node_error(err, n, -1, "expects a non-empty %s input, got %s",
				     dl_spatial_layout(3), dl_shape_str(in, a, sizeof a));
	return 0;
}

static int pool3_geometry(const struct dl_node *n, const struct dl_shape *in,
			  struct pgeom3 *g, struct dl_error *err)
{
	int mx = is_max(n), rc;
	if ((rc = volumes(n, in, g, err)))
		return rc;
	if ((rc = dl_spatial_tuple(n, HP_KERNEL, 3, g->k, err)))
		return rc;
	if (n->hp[HP_STRIDE].set) {
		if ((rc = dl_spatial_tuple(n, HP_STRIDE, 3, g->s, err)))
			return rc;
	} else {
		for (int i = 0; i < 3; i++)
			g->s[i] = g->k[i];
	}
	for (int i = 0; i < 3; i++)
		g->d[i] = 1;
	if (mx && (rc = dl_spatial_tuple(n, HP_DILATION, 3, g->d, err)))
		return rc;
	if ((rc = dl_spatial_padding(n, HP_PADDING, 3, g->I, g->k, g->s, g->d, g->pb, g->pa, err)))
		return rc;
	if ((rc = dl_spatial_fits3(n, HP_KERNEL, g->I, g->k, g->d, g->pb, g->pa, err)))
		return rc;
	int ceil_mode = (int)n->hp[mx ? HP_CEIL : HA_CEIL].i;
	for (int i = 0; i < 3; i++) {
		int64_t ek = g->d[i] * (g->k[i] - 1) + 1, padded = g->I[i] + g->pb[i] + g->pa[i];
		int64_t span = padded - ek;
		g->O[i] = (ceil_mode ? (span + g->s[i] - 1) / g->s[i] : span / g->s[i]) + 1;
		/* PyTorch's rule: the last window starts inside the input or
		 * its leading padding */
		while (ceil_mode && g->O[i] > 1 && (g->O[i] - 1) * g->s[i] >= g->I[i] + g->pb[i])
			g->O[i]--;
	}
	g->count_pad = mx ? 0 : (int)n->hp[HA_COUNT_PAD].i;
	return 0;
}

static int out_shape(struct dl_node *n, const struct pgeom3 *g, struct dl_shape *out,
		     int hp, struct dl_error *err)
{
	int64_t d[5] = {g->N, g->C, g->O[0], g->O[1], g->O[2]};
	*out = dl_shape_make(5, d);
	if (dl_shape_numel(out) < 0)
		return dl_node_error(err, n, hp, "the output would be too large");
	n->ws_bytes = 0;
	n->saved_bytes = 0;
	return 0;
}

static int pool3_infer(struct dl_node *n, const struct dl_shape *in,
		       struct dl_shape *out, struct dl_error *err)
{
	struct pgeom3 g;
	int rc = pool3_geometry(n, &in[0], &g, err);
	if (rc || (rc = out_shape(n, &g, out, -1, err)))
		return rc;
	n->macs = g.N * g.C * vol(g.O) * vol(g.k);
	return 0;
}

/* ---- max pooling ---- */

/* The taps [*lo, *hi) of a window starting at base (dilation d, k taps)
 * that fall inside [0, L). */
static void tap_range(int64_t base, int64_t d, int64_t k, int64_t L, int64_t *lo,
		      int64_t *hi)
{
	if (base >= 0 && base + (k - 1) * d < L) {
		/* inside: most windows, without the divisions */
		*lo = 0;
		*hi = k;
		return;
	}
	int64_t l = base >= 0 ? 0 : (-base + d - 1) / d;
	int64_t h = L - 1 - base < 0 ? 0 : (L - 1 - base) / d + 1;
	if (h > k)
		h = k;
	*lo = l;
	*hi = h > l ? h : l;
}

/* The in-bounds cell of volume x holding the maximum of window (o0, o1,
 * o2), as PyTorch picks it (scanning d, h, w: a cell replaces the best
 * when larger or NaN, so the first of ties), or -1 when the window
 * covers only padding. */
static int64_t max3_argmax(const float *x, const struct pgeom3 *g, int64_t o0,
			   int64_t o1, int64_t o2)
{
	int64_t b[3] = {o0 * g->s[0] - g->pb[0], o1 * g->s[1] - g->pb[1],
			o2 * g->s[2] - g->pb[2]};
	int64_t lo[3], hi[3];
	for (int a = 0; a < 3; a++)
		tap_range(b[a], g->d[a], g->k[a], g->I[a], &lo[a], &hi[a]);
	if (lo[0] == hi[0] || lo[1] == hi[1] || lo[2] == hi[2])
		return -1;
	int64_t best = ((b[0] + lo[0] * g->d[0]) * g->I[1] + b[1] + lo[1] * g->d[1]) * g->I[2] +
		       b[2] + lo[2] * g->d[2];
	float m = x[best];
	for (int64_t i = lo[0]; i < hi[0]; i++) {
		int64_t z = b[0] + i * g->d[0];
		for (int64_t j = lo[1]; j < hi[1]; j++) {
			int64_t row = (z * g->I[1] + b[1] + j * g->d[1]) * g->I[2] + b[2];
			for (int64_t l = lo[2]; l < hi[2]; l++) {
				/* branch-free: the data decides, not the predictor */
				int64_t at = row + l * g->d[2];
				float v = x[at];
				int take = (v > m) | (v != v);
				m = take ? v : m;
				best = take ? at : best;
			}
		}
	}
	return best;
}

/* One volume: y [O0, O1, O2] = the window maxima of x [I0, I1, I2] (-inf
 * for a window of padding only), tap by tap over whole output rows
 * (vectorised over the columns). Each output sees its taps in max3_argmax's
 * order, and a tap replaces the running maximum when larger or NaN, so
 * ties and NaNs come out as PyTorch's scan gives them. */
DL_CLONES static void maxpool3d_volume(float *restrict y, const float *restrict x,
				       const struct pgeom3 *g)
{
	int64_t s2 = g->s[2], O2 = g->O[2];
	for (int64_t o0 = 0; o0 < g->O[0]; o0++)
		for (int64_t o1 = 0; o1 < g->O[1]; o1++) {
			float *restrict yr = y + (o0 * g->O[1] + o1) * O2;
			#pragma omp simd
			for (int64_t q = 0; q < O2; q++)
				yr[q] = -INFINITY;
			for (int64_t i = 0; i < g->k[0]; i++) {
				int64_t z = o0 * g->s[0] - g->pb[0] + i * g->d[0];
				if (z < 0 || z >= g->I[0])
					continue;
				for (int64_t j = 0; j < g->k[1]; j++) {
					int64_t r = o1 * g->s[1] - g->pb[1] + j * g->d[1];
					if (r < 0 || r >= g->I[1])
						continue;
					for (int64_t l = 0; l < g->k[2]; l++) {
						int64_t off = l * g->d[2] - g->pb[2], lo, hi;
						dl_col_range(O2, g->I[2], s2, off, &lo, &hi);
						const float *restrict xs = x + (z * g->I[1] + r) * g->I[2] + off;
						#pragma omp simd
						for (int64_t q = lo; q < hi; q++) {
							float v = xs[q * s2];
							yr[q] = v > yr[q] || v != v ? v : yr[q];
						}
					}
				}
			}
		}
}

/* y = the window maxima; or, when dx is not NULL, dx += dy at each
 * window's argmax (then y is not written). */
static void maxpool3d(float *y, float *dx, const float *dy, const float *x,
		      const struct pgeom3 *g)
{
	int64_t nv = g->N * g->C, iv = vol(g->I), ov = vol(g->O);
	#pragma omp parallel for schedule(static) if (nv * ov * vol(g->k) > PAR_MIN)
	for (int64_t v = 0; v < nv; v++) {
		const float *xv = x + v * iv;
		if (!dx) {
			maxpool3d_volume(y + v * ov, xv, g);
			continue;
		}
		int64_t q = 0;
		for (int64_t o0 = 0; o0 < g->O[0]; o0++)
			for (int64_t o1 = 0; o1 < g->O[1]; o1++)
				for (int64_t o2 = 0; o2 < g->O[2]; o2++, q++) {
					int64_t a = max3_argmax(xv, g, o0, o1, o2);
					if (a >= 0)
						dx[v * iv + a] += dy[v * ov + q];
				}
	}
}

/* ---- average pooling ---- */

/* PyTorch's window along one dimension: it starts at o s - pb, is
 * clipped to the padded input (a ceil_mode window hanging off the end is
 * smaller) for the pool size, then to the input [*a, *e) for the sum. */
static int64_t avg_extent(int64_t o, int64_t s, int64_t k, int64_t pb, int64_t pa,
			  int64_t L, int64_t *a, int64_t *e)
{
	int64_t a0 = o * s - pb, e0 = a0 + k;
	if (e0 > L + pa)
		e0 = L + pa;
	*a = a0 < 0 ? 0 : a0;
	*e = e0 > L ? L : e0;
	if (*e < *a)
		*e = *a;
	return e0 - a0;
}

/* y = the window sums / PyTorch's divisor (the pool size with
 * count_include_pad, else the cells inside the input; a window of padding
 * only gives 0); or, when dx is not NULL, dx += dy / divisor over each
 * window. */
static void avgpool3d(float *y, float *dx, const float *dy, const float *x,
		      const struct pgeom3 *g)
{
	int64_t nv = g->N * g->C, iv = vol(g->I), ov = vol(g->O);
	#pragma omp parallel for schedule(static) if (nv * ov * vol(g->k) > PAR_MIN)
	for (int64_t v = 0; v < nv; v++) {
		int64_t q = 0;
		for (int64_t o0 = 0; o0 < g->O[0]; o0++) {
			int64_t a0, e0, p0 = avg_extent(o0, g->s[0], g->k[0], g->pb[0], g->pa[0],
							g->I[0], &a0, &e0);
			for (int64_t o1 = 0; o1 < g->O[1]; o1++) {
				int64_t a1, e1, p1 = avg_extent(o1, g->s[1], g->k[1], g->pb[1],
								g->pa[1], g->I[1], &a1, &e1);
				for (int64_t o2 = 0; o2 < g->O[2]; o2++, q++) {
					int64_t a2, e2, p2 = avg_extent(o2, g->s[2], g->k[2], g->pb[2],
									g->pa[2], g->I[2], &a2, &e2);
					int64_t inside = (e0 - a0) * (e1 - a1) * (e2 - a2);
					int64_t div = g->count_pad ? p0 * p1 * p2 : inside;
					if (inside == 0 || div <= 0) {
						if (!dx)
							y[v * ov + q] = 0.0f;
						continue;
					}
					if (dx) {
						float gv = dy[v * ov + q] / (float)div;
						for (int64_t z = a0; z < e0; z++)
							for (int64_t r = a1; r < e1; r++) {
								float *d = dx + v * iv + (z * g->I[1] + r) * g->I[2];
								for (int64_t w = a2; w < e2; w++)
									d[w] += gv;
							}
						continue;
					}
					float s = 0.0f;
					for (int64_t z = a0; z < e0; z++)
						for (int64_t r = a1; r < e1; r++) {
							const float *xr = x + v * iv + (z * g->I[1] + r) * g->I[2];
							for (int64_t w = a2; w < e2; w++)
								s += xr[w];
						}
					y[v * ov + q] = s / (float)div;
				}
			}
		}
	}
}

static void pool3_forward(struct dl_node *n, const struct dl_tensor *in,
			  struct dl_tensor *out, struct dl_ctx *ctx)
{
	struct pgeom3 g;
	(void)ctx;
	pool3_geometry(n, &in[0].shape, &g, NULL);
	if (is_max(n))
		maxpool3d(out->data, NULL, NULL, in[0].data, &g);
	else
		avgpool3d(out->data, NULL, NULL, in[0].data, &g);
}

static void pool3_backward(struct dl_node *n, const struct dl_tensor *in,
			   const struct dl_tensor *out, const float *dout,
			   float *const *din, struct dl_ctx *ctx)
{
	struct pgeom3 g;
	(void)out;
	(void)ctx;
	if (!din || !din[0])
		return;
	pool3_geometry(n, &in[0].shape, &g, NULL);
	if (is_max(n))
		maxpool3d(NULL, din[0], dout, in[0].data, &g);
	else
		avgpool3d(NULL, din[0], dout, in[0].data, &g);
}

/* ---- adaptive average pooling ---- */

static int adaptive3_geometry(const struct dl_node *n, const struct dl_shape *in,
			      struct pgeom3 *g, struct dl_error *err)
{
	int rc = volumes(n, in, g, err);
	if (rc)
		return rc;
	return dl_spatial_tuple(n, 0, 3, g->O, err);
}

static int adaptive3_infer(struct dl_node *n, const struct dl_shape *in,
			   struct dl_shape *out, struct dl_error *err)
{
	struct pgeom3 g;
	int rc = adaptive3_geometry(n, &in[0], &g, err);
	if (rc || (rc = out_shape(n, &g, out, 0, err)))
		return rc;
	n->macs = g.N * g.C * (vol(g.I) > vol(g.O) ? vol(g.I) : vol(g.O));
	return 0;
}

/* Output cell i of O over L input cells averages [floor(i L / O),
 * ceil((i + 1) L / O)). */
static int64_t ad_start(int64_t i, int64_t O, int64_t L) { return i * L / O; }
static int64_t ad_end(int64_t i, int64_t O, int64_t L) { return ((i + 1) * L + O - 1) / O; }

/* y = the mean of each adaptive window; or, when dx is not NULL, dx +=
 * dy / window size over each window */
static void adaptive3d(float *y, float *dx, const float *dy, const float *x,
		       const struct pgeom3 *g)
{
	int64_t nv = g->N * g->C, iv = vol(g->I), ov = vol(g->O);
	const int64_t *I = g->I, *O = g->O;
	#pragma omp parallel for schedule(static) if (nv * iv > PAR_MIN)
	for (int64_t v = 0; v < nv; v++) {
		int64_t q = 0;
		for (int64_t o0 = 0; o0 < O[0]; o0++) {
			int64_t a0 = ad_start(o0, O[0], I[0]), e0 = ad_end(o0, O[0], I[0]);
			for (int64_t o1 = 0; o1 < O[1]; o1++) {
				int64_t a1 = ad_start(o1, O[1], I[1]), e1 = ad_end(o1, O[1], I[1]);
				for (int64_t o2 = 0; o2 < O[2]; o2++, q++) {
					int64_t a2 = ad_start(o2, O[2], I[2]), e2 = ad_end(o2, O[2], I[2]);
					float cnt = (float)((e0 - a0) * (e1 - a1) * (e2 - a2));
					if (dx) {
						float gv = dy[v * ov + q] / cnt;
						for (int64_t z = a0; z < e0; z++)
							for (int64_t r = a1; r < e1; r++) {
								float *d = dx + v * iv + (z * I[1] + r) * I[2];
								for (int64_t w = a2; w < e2; w++)
									d[w] += gv;
							}
						continue;
					}
					float s = 0.0f;
					for (int64_t z = a0; z < e0; z++)
						for (int64_t r = a1; r < e1; r++) {
							const float *xr = x + v * iv + (z * I[1] + r) * I[2];
							for (int64_t w = a2; w < e2; w++)
								s += xr[w];
						}
					y[v * ov + q] = s / cnt;
				}
			}
		}
	}
}

static void adaptive3_forward(struct dl_node *n, const struct dl_tensor *in,
			      struct dl_tensor *out, struct dl_ctx *ctx)
{
	struct pgeom3 g;
	(void)ctx;
	adaptive3_geometry(n, &in[0].shape, &g, NULL);
	adaptive3d(out->data, NULL, NULL, in[0].data, &g);
}

static void adaptive3_backward(struct dl_node *n, const struct dl_tensor *in,
			       const struct dl_tensor *out, const float *dout,
			       float *const *din, struct dl_ctx *ctx)
{
	struct pgeom3 g;
	(void)out;
	(void)ctx;
	if (!din || !din[0])
		return;
	adaptive3_geometry(n, &in[0].shape, &g, NULL);
	adaptive3d(NULL, din[0], dout, in[0].data, &g);
}

/* y = max of x over each window; padding is -inf */
static const struct dl_op_desc max_pool3d_op = {
	.name = "max_pool3d",
	.doc = "y[d, h, w] = max over the window at (d sd - pd, h sh - ph, w sw - pw) of x (padding -inf)",
	.min_in = 1, .max_in = 1,
	.hp = max3_hp, .n_hp = N_MAX_HP,
	.infer = pool3_infer, .forward = pool3_forward, .backward = pool3_backward,
	.flags = DL_OP_BWD_NO_OUTPUT,
};

/* y = sum of x over each window / divisor (PyTorch's count_include_pad and
 * ceil_mode rules); padding is 0 */
static const struct dl_op_desc avg_pool3d_op = {
	.name = "avg_pool3d",
	.doc = "y[d, h, w] = mean of x over the window at (d sd - pd, h sh - ph, w sw - pw) (padding 0)",
	.min_in = 1, .max_in = 1,
	.hp = avg3_hp, .n_hp = N_AVG_HP,
	.infer = pool3_infer, .forward = pool3_forward, .backward = pool3_backward,
	.flags = DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

/* y[i, j, k] = mean of x over [floor(i D / OD), ceil((i + 1) D / OD)) and
 * likewise along H and W */
static const struct dl_op_desc adaptive_avg_pool3d_op = {
	.name = "adaptive_avg_pool3d",
	.doc = "y[i, j, k] = mean x[floor(i D/OD) : ceil((i+1) D/OD), (same for H, W)]",
	.min_in = 1, .max_in = 1,
	.hp = adaptive3_hp, .n_hp = 1,
	.infer = adaptive3_infer, .forward = adaptive3_forward, .backward = adaptive3_backward,
	.flags = DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

const struct dl_op_desc *const dl_ops_pool3d[] = {
	&max_pool3d_op, &avg_pool3d_op, &adaptive_avg_pool3d_op, NULL,
};
