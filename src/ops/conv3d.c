/* 3-D convolutions: conv3d and conv_transpose3d on [N, C, D, H, W], with
 * PyTorch's hyperparameters, semantics and initialisation. Each (sample,
 * group) lowers to one GEMM per tile of output depth slices through
 * dl_sgemm: vol2col gathers the windows into columns, col2vol scatters
 * columns back (the transposed forward and the data gradient). Plain and
 * general; the 2-D ops' special paths (Winograd, depthwise) are not here. */
#include <math.h>
#include <string.h>

#include "engine/gemm.h"
#include "engine/op.h"
#include "ops/spatial.h"

/* Run vol2col and col2vol in parallel when there is enough work. */
#define PAR_MIN 16384
/* Columns per tile: at most this many floats of vol2col output (one depth
 * slice of output at least), so the scratch stays small for large volumes. */
#define TILE_FLOATS ((int64_t)1 << 20)

/* ---- hyperparameters (PyTorch's constructor names and defaults) ---- */

/* The first nine are conv3d's; conv_transpose3d adds output_padding. */
enum {
	HP_IN, HP_OUT, HP_KERNEL, HP_STRIDE, HP_PADDING, HP_DILATION,
	HP_GROUPS, HP_BIAS, HP_PADMODE, HP_OUTPAD, N_HP_T,
	N_HP = HP_OUTPAD
};

static const struct dl_hp_desc conv3d_hp[N_HP_T] = {
	{"in_channels", DL_HP_INT, "inferred", NULL, DL_HP_DERIVED | DL_HP_POSITIVE},
	{"out_channels", DL_HP_INT, NULL, NULL, DL_HP_REQUIRED | DL_HP_POSITIVE},
	{"kernel_size", DL_HP_INTS, NULL, NULL, DL_HP_REQUIRED | DL_HP_POSITIVE},
	{"stride", DL_HP_INTS, "1", NULL, DL_HP_POSITIVE},
	{"padding", DL_HP_PADDING, "0", NULL, DL_HP_NONNEG},
	{"dilation", DL_HP_INTS, "1", NULL, DL_HP_POSITIVE},
	{"groups", DL_HP_INT, "1", NULL, DL_HP_POSITIVE},
	{"bias", DL_HP_BOOL, "true", NULL, 0},
	{"padding_mode", DL_HP_ENUM, "zeros", "zeros", 0},
	{"output_padding", DL_HP_INTS, "0", NULL, DL_HP_NONNEG},
};

/* ---- geometry ---- */

struct geom3 {
	int64_t N, C, OC, G;
	int64_t in[3];            /* input D, H, W */
	int64_t out[3];           /* output D, H, W */
	int64_t k[3], s[3], d[3];
	int64_t pb[3], pa[3];     /* conv: zero padding before and after;
	                           * transposed: cells cropped */
	int has_bias;
	int transposed;
};

/* The convolution's relation between a volume img [ch, I0, I1, I2] and
 * its columns [ch k0 k1 k2, O0 O1 O2]: column row (c, i, j, l) at output
 * (o0, o1, o2) is img[c, o0 s0 - p0 + i d0, o1 s1 - p1 + j d1, o2 s2 - p2
 * + l d2], 0 outside. conv3d: img is the input, O the output; transposed:
 * img is the output, O the input (its adjoint). */
struct win3 {
	int64_t ch, I[3], O[3], k[3], s[3], d[3], p[3];
};

static int is_transposed(const struct dl_node *n)
{
	return n->op->n_hp == N_HP_T;
}

static int64_t vol(const int64_t *v) { return v[0] * v[1] * v[2]; }

/* Checks the input and the hyperparameters and fills g. err may be NULL
 * (forward and backward recompute what infer already checked). */
static int geometry(const struct dl_node *n, const struct dl_shape *in,
		    struct geom3 *g, struct dl_error *err)
{
	int tr = is_transposed(n), rc;
	char a[64];
	const struct dl_hp_value *hp = n->hp;
	memset(g, 0, sizeof *g);
	g->transposed = tr;
	if (in->ndim != 5)
		return dl_node_error(err, n, -1, "expects a %s input, got %s", dl_spatial_layout(3),
				     dl_shape_str(in, a, sizeof a));
	g->N = in->d[0];
	g->C = in->d[1];
	for (int i = 0; i < 3; i++)
		g->in[i] = in->d[2 + i];
	if (g->C == 0 || vol(g->in) == 0)
		return dl_node_error(err, n, -1, "expects a non-empty %s input, got %s",
				     dl_spatial_layout(3), dl_shape_str(in, a, sizeof a));
	if (hp[HP_IN].set && hp[HP_IN].i != g->C)
		return dl_node_error(err, n, HP_IN,
			"in_channels %lld does not match the input's %lld channels (input %s)",
			(long long)hp[HP_IN].i, (long long)g->C, dl_shape_str(in, a, sizeof a));
	g->OC = hp[HP_OUT].i;
	g->G = hp[HP_GROUPS].i;
	if (g->OC >= GEOM_MAX || g->G >= GEOM_MAX)
		return dl_node_error(err, n, g->OC >= GEOM_MAX ? HP_OUT : HP_GROUPS,
				     "%s is too large", g->OC >= GEOM_MAX ? "out_channels" : "groups");
	if (g->C % g->G)
		return dl_node_error(err, n, HP_GROUPS, "groups %lld does not divide in_channels %lld",
				     (long long)g->G, (long long)g->C);
	if (g->OC % g->G)
		return dl_node_error(err, n, HP_GROUPS, "groups %lld does not divide out_channels %lld",
				     (long long)g->G, (long long)g->OC);
	g->has_bias = (int)hp[HP_BIAS].i;

	int64_t op[3] = {0, 0, 0};
	if ((rc = dl_spatial_tuple(n, HP_KERNEL, 3, g->k, err)) ||
	    (rc = dl_spatial_tuple(n, HP_STRIDE, 3, g->s, err)) ||
	    (rc = dl_spatial_tuple(n, HP_DILATION, 3, g->d, err)))
		return rc;
	if (tr) {
		if (hp[HP_PADDING].pad == DL_PAD_SAME || hp[HP_PADDING].pad == DL_PAD_VALID)
			return dl_node_error(err, n, HP_PADDING,
				"transposed convolutions take no 'same' or 'valid' padding; "
				"give an integer, one per dimension, or [before, after] crop pairs");
		if ((rc = dl_spatial_tuple(n, HP_OUTPAD, 3, op, err)))
			return rc;
	}
	if ((rc = dl_spatial_padding(n, HP_PADDING, 3, g->in, g->k, g->s, g->d, g->pb, g->pa, err)))
		return rc;
	if (!tr && (rc = dl_spatial_fits3(n, HP_KERNEL, g->in, g->k, g->d, g->pb, g->pa, err)))
		return rc;
	for (int i = 0; i < 3; i++) {
		int64_t ek = g->d[i] * (g->k[i] - 1) + 1;   /* dilated kernel extent */
		if (!tr) {
			g->out[i] = (g->in[i] + g->pb[i] + g->pa[i] - ek) / g->s[i] + 1;
		} else {
			if (op[i] >= g->s[i] && op[i] >= g->d[i])
				return dl_node_error(err, n, HP_OUTPAD,
					"output_padding %lld must be smaller than the stride (%lld) or the dilation (%lld)",
					(long long)op[i], (long long)g->s[i], (long long)g->d[i]);
			int64_t full = (g->in[i] - 1) * g->s[i] + ek + op[i];
			if (g->pb[i] + g->pa[i] >= full)
				return dl_node_error(err, n, HP_PADDING,
					"padding crops %lld cells of a %lld-cell output; it must leave at least one",
					(long long)(g->pb[i] + g->pa[i]), (long long)full);
			g->out[i] = full - g->pb[i] - g->pa[i];
		}
	}
	return 0;
}

static int64_t cin_g(const struct geom3 *g) { return g->C / g->G; }
static int64_t cout_g(const struct geom3 *g) { return g->OC / g->G; }

/* The columns' relation of one group (struct win3). */
static struct win3 win_of(const struct geom3 *g)
{
	struct win3 w;
	w.ch = g->transposed ? cout_g(g) : cin_g(g);
	for (int i = 0; i < 3; i++) {
		w.I[i] = g->transposed ? g->out[i] : g->in[i];
		w.O[i] = g->transposed ? g->in[i] : g->out[i];
		w.k[i] = g->k[i];
		w.s[i] = g->s[i];
		w.d[i] = g->d[i];
		w.p[i] = g->pb[i];
	}
	return w;
}

/* Rows of the column matrix (the GEMM's inner size K) */
static int64_t col_rows(const struct win3 *w) { return w->ch * vol(w->k); }

/* A 1x1x1 kernel, unit stride, no padding: the columns are img itself. */
static int is_pointwise(const struct win3 *w)
{
	for (int i = 0; i < 3; i++)
		if (w->k[i] != 1 || w->s[i] != 1 || w->p[i] != 0 || w->I[i] != w->O[i])
			return 0;
	return 1;
}

/* Output depth slices per tile (at least one). */
static int64_t tile_depth(const struct win3 *w)
{
	int64_t slice = col_rows(w) * w->O[1] * w->O[2];
	int64_t t = slice > 0 ? TILE_FLOATS / slice : 1;
	if (t < 1)
		t = 1;
	return t < w->O[0] ? t : w->O[0];
}

/* ---- vol2col and col2vol ---- */

/* col [K, (o0b - o0a) O1 O2] = the windows of img at output depths
 * [o0a, o0b) (struct win3). */
static void vol2col(float *col, const float *img, const struct win3 *w,
		    int64_t o0a, int64_t o0b)
{
	int64_t k12 = w->k[1] * w->k[2], kv = w->k[0] * k12, K = w->ch * kv;
	int64_t plane = w->O[1] * w->O[2], cols = (o0b - o0a) * plane;
	int64_t ivol = vol(w->I);
	#pragma omp parallel for schedule(static) if (K * cols > PAR_MIN)
	for (int64_t r = 0; r < K; r++) {
		int64_t c = r / kv, t = r % kv;
		int64_t i = t / k12, j = t / w->k[2] % w->k[1], l = t % w->k[2];
		const float *src = img + c * ivol;
		int64_t off = l * w->d[2] - w->p[2], lo, hi;
		dl_col_range(w->O[2], w->I[2], w->s[2], off, &lo, &hi);
		for (int64_t o0 = o0a; o0 < o0b; o0++) {
			float *dp = col + r * cols + (o0 - o0a) * plane;
			int64_t z = o0 * w->s[0] - w->p[0] + i * w->d[0];
			if (z < 0 || z >= w->I[0]) {
				memset(dp, 0, (size_t)plane * sizeof *dp);
				continue;
			}
			for (int64_t o1 = 0; o1 < w->O[1]; o1++) {
				float *dr = dp + o1 * w->O[2];
				int64_t y = o1 * w->s[1] - w->p[1] + j * w->d[1];
				if (y < 0 || y >= w->I[1]) {
					memset(dr, 0, (size_t)w->O[2] * sizeof *dr);
					continue;
				}
				const float *sr = src + (z * w->I[1] + y) * w->I[2] + off;
				for (int64_t o2 = 0; o2 < lo; o2++)
					dr[o2] = 0.0f;
				for (int64_t o2 = lo; o2 < hi; o2++)
					dr[o2] = sr[o2 * w->s[2]];
				for (int64_t o2 = hi; o2 < w->O[2]; o2++)
					dr[o2] = 0.0f;
			}
		}
	}
}

/* img += the columns col [K, (o0b - o0a) O1 O2] scattered back to their
 * windows (vol2col's adjoint); one channel per thread, so no two threads
 * write the same cell. */
static void col2vol(float *img, const float *col, const struct win3 *w,
		    int64_t o0a, int64_t o0b)
{
	int64_t k12 = w->k[1] * w->k[2], kv = w->k[0] * k12;
	int64_t plane = w->O[1] * w->O[2], cols = (o0b - o0a) * plane;
	int64_t ivol = vol(w->I);
	#pragma omp parallel for schedule(static) if (w->ch * kv * cols > PAR_MIN)
	for (int64_t c = 0; c < w->ch; c++) {
		float *dst = img + c * ivol;
		for (int64_t t = 0; t < kv; t++) {
			int64_t i = t / k12, j = t / w->k[2] % w->k[1], l = t % w->k[2];
			const float *src = col + (c * kv + t) * cols;
			int64_t off = l * w->d[2] - w->p[2], lo, hi;
			dl_col_range(w->O[2], w->I[2], w->s[2], off, &lo, &hi);
			for (int64_t o0 = o0a; o0 < o0b; o0++) {
				int64_t z = o0 * w->s[0] - w->p[0] + i * w->d[0];
				if (z < 0 || z >= w->I[0])
					continue;
				for (int64_t o1 = 0; o1 < w->O[1]; o1++) {
					int64_t y = o1 * w->s[1] - w->p[1] + j * w->d[1];
					if (y < 0 || y >= w->I[1])
						continue;
					const float *sr = src + ((o0 - o0a) * w->O[1] + o1) * w->O[2];
					float *dr = dst + (z * w->I[1] + y) * w->I[2] + off;
					for (int64_t o2 = lo; o2 < hi; o2++)
						dr[o2 * w->s[2]] += sr[o2];
				}
			}
		}
	}
}

/* ---- kernels ---- */

/* y [OCg rows of P] += b per row */
static void add_bias(float *y, const float *b, int64_t rows, int64_t P)
{
	for (int64_t r = 0; r < rows; r++)
		for (int64_t q = 0; q < P; q++)
			y[r * P + q] += b[r];
}

/* db [OC] += the sums of dy [N, OC, P] over N and P, in double */
static void bias_backward(float *db, const float *dy, int64_t N, int64_t OC, int64_t P)
{
	for (int64_t o = 0; o < OC; o++) {
		double s = 0.0;
		for (int64_t nn = 0; nn < N; nn++)
			for (int64_t q = 0; q < P; q++)
				s += dy[(nn * OC + o) * P + q];
		db[o] += (float)s;
	}
}

/* conv3d: y [N, OC, OD OH OW] = W_g [OCg, K] vol2col(x_g) + b, per sample
 * and group, tile by tile of output depth slices. */
static void conv3d_forward(float *y, const float *x, const float *w, const float *b,
			   float *col, const struct geom3 *g)
{
	struct win3 wn = win_of(g);
	int64_t Cg = cin_g(g), OCg = cout_g(g), K = col_rows(&wn);
	int64_t IV = vol(g->in), P = vol(g->out), plane = g->out[1] * g->out[2];
	int64_t td = tile_depth(&wn);
	int pw = is_pointwise(&wn);
	for (int64_t nn = 0; nn < g->N; nn++)
		for (int64_t gi = 0; gi < g->G; gi++) {
			const float *xg = x + (nn * g->C + gi * Cg) * IV;
			const float *wg = w + gi * OCg * K;
			float *yg = y + (nn * g->OC + gi * OCg) * P;
			for (int64_t a = 0; a < g->out[0]; a += td) {
				int64_t e = a + td < g->out[0] ? a + td : g->out[0];
				int64_t cols = (e - a) * plane;
				const float *B = xg + a * plane;
				int64_t ldb = IV;
				if (!pw) {
					vol2col(col, xg, &wn, a, e);
					B = col;
					ldb = cols;
				}
				dl_sgemm(0, 0, (int)OCg, (int)cols, (int)K, 1.0f, wg, (int)K,
					 B, (int)ldb, 0.0f, yg + a * plane, (int)P);
			}
			if (b)
				add_bias(yg, b + gi * OCg, OCg, P);
		}
}

/* conv3d's gradients: dW_g += dy_g col^T, dx_g += col2vol(W_g^T dy_g),
 * db += sums of dy. */
static void conv3d_backward(float *dx, float *dw, float *db, const float *dy,
			    const float *x, const float *w, float *col,
			    const struct geom3 *g)
{
	struct win3 wn = win_of(g);
	int64_t Cg = cin_g(g), OCg = cout_g(g), K = col_rows(&wn);
	int64_t IV = vol(g->in), P = vol(g->out), plane = g->out[1] * g->out[2];
	int64_t td = tile_depth(&wn);
	int pw = is_pointwise(&wn);
	if (db)
		bias_backward(db, dy, g->N, g->OC, P);
	for (int64_t nn = 0; nn < g->N; nn++)
		for (int64_t gi = 0; gi < g->G; gi++) {
			const float *xg = x + (nn * g->C + gi * Cg) * IV;
			const float *wg = w + gi * OCg * K;
			const float *dyg = dy + (nn * g->OC + gi * OCg) * P;
			float *dxg = dx ? dx + (nn * g->C + gi * Cg) * IV : NULL;
			for (int64_t a = 0; a < g->out[0]; a += td) {
				int64_t e = a + td < g->out[0] ? a + td : g->out[0];
				int64_t cols = (e - a) * plane;
				const float *dyt = dyg + a * plane;
				if (dw) {
					const float *B = xg + a * plane;
					int64_t ldb = IV;
					if (!pw) {
						vol2col(col, xg, &wn, a, e);
						B = col;
						ldb = cols;
					}
					/* dW_g [OCg, K] += dy_t [OCg, cols] col^T */
					dl_sgemm(0, 1, (int)OCg, (int)K, (int)cols, 1.0f, dyt, (int)P,
						 B, (int)ldb, 1.0f, dw + gi * OCg * K, (int)K);
				}
				if (!dxg)
					continue;
				if (pw) {
					/* dx_t [Cg, cols] += W_g^T dy_t */
					dl_sgemm(1, 0, (int)K, (int)cols, (int)OCg, 1.0f, wg, (int)K,
						 dyt, (int)P, 1.0f, dxg + a * plane, (int)IV);
					continue;
				}
				/* dcol [K, cols] = W_g^T [K, OCg] dy_t, scattered into dx */
				dl_sgemm(1, 0, (int)K, (int)cols, (int)OCg, 1.0f, wg, (int)K,
					 dyt, (int)P, 0.0f, col, (int)cols);
				col2vol(dxg, col, &wn, a, e);
			}
		}
}

/* conv_transpose3d: y_g = col2vol(W_g^T [K, Cg] x_g) + b, with the
 * weights [C, OCg, kD, kH, kW] and K = OCg kD kH kW, tile by tile of input
 * depth slices. */
static void convt3d_forward(float *y, const float *x, const float *w, const float *b,
			    float *col, const struct geom3 *g)
{
	struct win3 wn = win_of(g);
	int64_t Cg = cin_g(g), OCg = cout_g(g), K = col_rows(&wn);
	int64_t IV = vol(g->in), P = vol(g->out), plane = g->in[1] * g->in[2];
	int64_t td = tile_depth(&wn);
	int pw = is_pointwise(&wn);
	for (int64_t nn = 0; nn < g->N; nn++)
		for (int64_t gi = 0; gi < g->G; gi++) {
			const float *xg = x + (nn * g->C + gi * Cg) * IV;
			const float *wg = w + gi * Cg * K;
			float *yg = y + (nn * g->OC + gi * OCg) * P;
			memset(yg, 0, (size_t)(OCg * P) * sizeof *yg);
			for (int64_t a = 0; a < g->in[0]; a += td) {
				int64_t e = a + td < g->in[0] ? a + td : g->in[0];
				int64_t cols = (e - a) * plane;
				if (pw) {
					dl_sgemm(1, 0, (int)K, (int)cols, (int)Cg, 1.0f, wg, (int)K,
						 xg + a * plane, (int)IV, 0.0f, yg + a * plane, (int)P);
					continue;
				}
				dl_sgemm(1, 0, (int)K, (int)cols, (int)Cg, 1.0f, wg, (int)K,
					 xg + a * plane, (int)IV, 0.0f, col, (int)cols);
				col2vol(yg, col, &wn, a, e);
			}
			if (b)
				add_bias(yg, b + gi * OCg, OCg, P);
		}
}

/* conv_transpose3d's gradients: with dcol = vol2col(dy_g), dx_g += W_g
 * dcol and dW_g += x_g dcol^T; db += sums of dy. */
static void convt3d_backward(float *dx, float *dw, float *db, const float *dy,
			     const float *x, const float *w, float *col,
			     const struct geom3 *g)
{
	struct win3 wn = win_of(g);
	int64_t Cg = cin_g(g), OCg = cout_g(g), K = col_rows(&wn);
	int64_t IV = vol(g->in), P = vol(g->out), plane = g->in[1] * g->in[2];
	int64_t td = tile_depth(&wn);
	int pw = is_pointwise(&wn);
	if (db)
		bias_backward(db, dy, g->N, g->OC, P);
	for (int64_t nn = 0; nn < g->N; nn++)
		for (int64_t gi = 0; gi < g->G; gi++) {
			const float *xg = x + (nn * g->C + gi * Cg) * IV;
			const float *wg = w + gi * Cg * K;
			const float *dyg = dy + (nn * g->OC + gi * OCg) * P;
			for (int64_t a = 0; a < g->in[0]; a += td) {
				int64_t e = a + td < g->in[0] ? a + td : g->in[0];
				int64_t cols = (e - a) * plane;
				const float *B = dyg + a * plane;
				int64_t ldb = P;
				if (!pw) {
					vol2col(col, dyg, &wn, a, e);
					B = col;
					ldb = cols;
				}
				/* dx_t [Cg, cols] += W_g [Cg, K] dcol [K, cols] */
				if (dx)
					dl_sgemm(0, 0, (int)Cg, (int)cols, (int)K, 1.0f, wg, (int)K,
						 B, (int)ldb, 1.0f,
						 dx + (nn * g->C + gi * Cg) * IV + a * plane, (int)IV);
				/* dW_g [Cg, K] += x_t [Cg, cols] dcol^T */
				if (dw)
					dl_sgemm(0, 1, (int)Cg, (int)K, (int)cols, 1.0f, xg + a * plane,
						 (int)IV, B, (int)ldb, 1.0f, dw + gi * Cg * K, (int)K);
			}
		}
}

/* ---- the op interface ---- */

static int conv3d_infer(struct dl_node *n, const struct dl_shape *in,
			struct dl_shape *out, struct dl_error *err)
{
	struct geom3 g;
	int rc = geometry(n, &in[0], &g, err);
	if (rc)
		return rc;
	int64_t d[5] = {g.N, g.OC, g.out[0], g.out[1], g.out[2]};
	*out = dl_shape_make(5, d);
	if (dl_shape_numel(out) < 0)
		return dl_node_error(err, n, -1, "the output would be too large");

	/* PyTorch's kaiming_uniform(a = sqrt(5)) and its bias bound: both
	 * 1 / sqrt(fan_in), fan_in read from weight dimension 1 */
	int64_t kv = vol(g.k);
	int64_t wd[5] = {g.transposed ? g.C : g.OC, g.transposed ? cout_g(&g) : cin_g(&g),
			 g.k[0], g.k[1], g.k[2]};
	struct dl_shape ws = dl_shape_make(5, wd);
	struct dl_shape bs = dl_shape_make(1, &g.OC);
	double bound = 1.0 / sqrt((double)(wd[1] * kv));
	if ((rc = dl_node_param(n, "weight", &ws, DL_INIT_UNIFORM, bound, err)) < 0)
		return rc;
	if (g.has_bias && (rc = dl_node_param(n, "bias", &bs, DL_INIT_UNIFORM, bound, err)) < 0)
		return rc;

	/* every GEMM size, leading dimension and operand must fit BLAS's int */
	struct win3 wn = win_of(&g);
	double big = 2147483647.0, K = (double)col_rows(&wn);
	double slice = K * (double)wn.O[1] * wn.O[2];
	if (slice > big || (double)vol(g.in) * cin_g(&g) > big ||
	    (double)vol(g.out) * cout_g(&g) > big || (double)wd[0] * wd[1] * kv > big)
		return dl_node_error(err, n, HP_KERNEL,
			"this convolution is too large for one GEMM (more than 2^31 elements per operand)");
	n->ws_bytes = is_pointwise(&wn) ? 0
		: (size_t)(col_rows(&wn) * tile_depth(&wn) * wn.O[1] * wn.O[2]) * sizeof(float);
	n->saved_bytes = 0;
	n->macs = g.N * vol(g.transposed ? g.in : g.out) *
		  (g.transposed ? g.C * cout_g(&g) : g.OC * cin_g(&g)) * kv;
	return 0;
}

static void conv3d_op_forward(struct dl_node *n, const struct dl_tensor *in,
			      struct dl_tensor *out, struct dl_ctx *ctx)
{
	struct geom3 g;
	geometry(n, &in[0].shape, &g, NULL);
	const float *w = n->params[0].data, *b = g.has_bias ? n->params[1].data : NULL;
	if (g.transposed)
		convt3d_forward(out->data, in[0].data, w, b, ctx->ws, &g);
	else
		conv3d_forward(out->data, in[0].data, w, b, ctx->ws, &g);
}

static void conv3d_op_backward(struct dl_node *n, const struct dl_tensor *in,
			       const struct dl_tensor *out, const float *dout,
			       float *const *din, struct dl_ctx *ctx)
{
	struct geom3 g;
	(void)out;
	geometry(n, &in[0].shape, &g, NULL);
	const float *w = n->params[0].data;
	float *dx = din ? din[0] : NULL, *dw = n->params[0].grad;
	float *db = g.has_bias ? n->params[1].grad : NULL;
	if (g.transposed)
		convt3d_backward(dx, dw, db, dout, in[0].data, w, ctx->ws, &g);
	else
		conv3d_backward(dx, dw, db, dout, in[0].data, w, ctx->ws, &g);
}

static const struct dl_op_desc conv3d_op = {
	.name = "conv3d",
	.doc = "y[o, d, h, w] = b[o] + sum_c,i,j,l w[o, c, i, j, l] "
	       "x[c, d*sd - pd + i*dd, h*sh - ph + j*dh, w*sw - pw + l*dw]",
	.min_in = 1, .max_in = 1,
	.hp = conv3d_hp, .n_hp = N_HP,
	.infer = conv3d_infer, .forward = conv3d_op_forward, .backward = conv3d_op_backward,
	.params = "weight [out_channels, in_channels/groups, kd, kh, kw], bias [out_channels]",
	.flags = DL_OP_BWD_NO_OUTPUT,
};

/* The adjoint of conv3d w.r.t. its input: each input cell scatters w * x
 * into the full output, of which padding crops [before, after] cells;
 * output_padding adds cells at the end. */
static const struct dl_op_desc conv_transpose3d_op = {
	.name = "conv_transpose3d",
	.doc = "y[o, d*sd + i*dd - pd, h*sh + j*dh - ph, w*sw + l*dw - pw] += "
	       "w[c, o, i, j, l] x[c, d, h, w]; y += b",
	.min_in = 1, .max_in = 1,
	.hp = conv3d_hp, .n_hp = N_HP_T,
	.infer = conv3d_infer, .forward = conv3d_op_forward, .backward = conv3d_op_backward,
	.params = "weight [in_channels, out_channels/groups, kd, kh, kw], bias [out_channels]",
	.flags = DL_OP_BWD_NO_OUTPUT,
};

const struct dl_op_desc *const dl_ops_conv3d[] = {
	&conv3d_op, &conv_transpose3d_op, NULL,
};
