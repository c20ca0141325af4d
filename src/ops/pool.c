/* Pooling and resampling: max_pool1d/2d, avg_pool1d/2d,
 * adaptive_avg_pool1d/2d, adaptive_max_pool1d/2d, upsample. Single passes
 * over planes, OpenMP over batch x channel; backward recomputes what it
 * needs from the input instead of saving indices. 1D ops are the 2D
 * kernels with H = 1. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "engine/op.h"
#include "engine/vmath.h"
#include "ops/spatial.h"


/* Run a loop over planes in parallel when there is enough work. */
#define PAR_MIN 16384

static int spatial_dims(const struct dl_node *n)
{
	size_t len = strlen(n->op->name);
	return n->op->name[len - 2] == '1' ? 1 : 2;   /* "..._pool1d" */
}


/* Input [N, C, (H,) W] as planes of H x W: checks the rank. */
static int planes(const struct dl_node *n, const struct dl_shape *in, int nsp,
		  int64_t *N, int64_t *C, int64_t *H, int64_t *W,
		  struct dl_error *err)
{
	char a[64];
	if (in->ndim != nsp + 2)
		return dl_node_error(err, n, -1, "expects a %s input, got %s",
				     dl_spatial_layout(nsp), dl_shape_str(in, a, sizeof a));
	*N = in->d[0];
	*C = in->d[1];
	*H = nsp == 1 ? 1 : in->d[2];
	*W = in->d[nsp + 1];
	if (*H == 0 || *W == 0)
		return dl_node_error(err, n, -1, "expects a non-empty %s input, got %s",
				     dl_spatial_layout(nsp), dl_shape_str(in, a, sizeof a));
	return 0;
}

/* ---- max and average pooling: geometry ---- */

enum { HP_KERNEL, HP_STRIDE, HP_PADDING, HP_DILATION, HP_CEIL, N_MAX_HP };
/* avg pools: kernel_size, stride, padding, ceil_mode, count_include_pad */
enum { HA_KERNEL, HA_STRIDE, HA_PADDING, HA_CEIL, HA_COUNT_PAD, N_AVG_HP };

static const struct dl_hp_desc max_hp[N_MAX_HP] = {
	{"kernel_size", DL_HP_INTS, NULL, NULL, DL_HP_REQUIRED | DL_HP_POSITIVE},
	{"stride", DL_HP_INTS, "kernel_size", NULL, DL_HP_DERIVED | DL_HP_POSITIVE},
	{"padding", DL_HP_PADDING, "0", NULL, DL_HP_NONNEG},
	{"dilation", DL_HP_INTS, "1", NULL, DL_HP_POSITIVE},
	{"ceil_mode", DL_HP_BOOL, "false", NULL, 0},
};

static const struct dl_hp_desc avg_hp[N_AVG_HP] = {
	{"kernel_size", DL_HP_INTS, NULL, NULL, DL_HP_REQUIRED | DL_HP_POSITIVE},
	{"stride", DL_HP_INTS, "kernel_size", NULL, DL_HP_DERIVED | DL_HP_POSITIVE},
	{"padding", DL_HP_PADDING, "0", NULL, DL_HP_NONNEG},
	{"ceil_mode", DL_HP_BOOL, "false", NULL, 0},
	{"count_include_pad", DL_HP_BOOL, "true", NULL, 0},
};

/* A pooling window over planes [H, W] -> [OH, OW]; 1D: H = OH = kh = 1. */
struct pgeom {
	int64_t N, C, H, W, OH, OW;
	int64_t kh, kw, sh, sw, dh, dw;
	int64_t ph, pw, pha, pwa;   /* padding before and after */
	int count_pad;              /* avg: count_include_pad */
};

static int is_max(const struct dl_node *n)
{
	return n->op->hp == max_hp;
}


static int pool_geometry(const struct dl_node *n, const struct dl_shape *in,
			 struct pgeom *g, struct dl_error *err)
{
	int nsp = spatial_dims(n), mx = is_max(n), rc;
	int hk = HP_KERNEL, hs = HP_STRIDE, hpad = HP_PADDING;
	int hceil = mx ? HP_CEIL : HA_CEIL;
	memset(g, 0, sizeof *g);
	if ((rc = planes(n, in, nsp, &g->N, &g->C, &g->H, &g->W, err)))
		return rc;
	int64_t L[2], k[2], s[2], d[2] = {1, 1}, pb[2] = {0, 0}, pa[2] = {0, 0}, o[2];
	L[0] = g->H;
	L[nsp - 1] = g->W;
	if ((rc = dl_spatial_tuple(n, hk, nsp, k, err)))
		return rc;
	if (n->hp[hs].set) {
		if ((rc = dl_spatial_tuple(n, hs, nsp, s, err)))
			return rc;
	} else {
		for (int i = 0; i < nsp; i++)
			s[i] = k[i];
	}
	if (mx && (rc = dl_spatial_tuple(n, HP_DILATION, nsp, d, err)))
		return rc;

	if ((rc = dl_spatial_padding(n, hpad, nsp, L, k, s, d, pb, pa, err)))
		return rc;

	int ceil_mode = (int)n->hp[hceil].i;
	for (int i = 0; i < nsp; i++) {
		int64_t ek = d[i] * (k[i] - 1) + 1, padded = L[i] + pb[i] + pa[i];
		if (ek > padded) {
			char kk[64], b[64];
			int64_t pH = g->H + (nsp == 2 ? pb[0] + pa[0] : 0);
			int64_t pW = g->W + pb[nsp - 1] + pa[nsp - 1];
			if (nsp == 2 && k[0] != k[1])
				dl_spatial_dims(kk, sizeof kk, nsp, k[0], k[1]);
			else
				snprintf(kk, sizeof kk, "%lld", (long long)k[i]);
			if (ek != k[i])
				return dl_node_error(err, n, hk,
					"kernel_size %s with dilation spans %lld cells, more than the padded input %s",
					kk, (long long)ek, dl_spatial_dims(b, sizeof b, nsp, pH, pW));
			return dl_node_error(err, n, hk,
				"kernel_size %s is larger than the padded input %s",
				kk, dl_spatial_dims(b, sizeof b, nsp, pH, pW));
		}
		int64_t span = padded - ek;
		o[i] = (ceil_mode ? (span + s[i] - 1) / s[i] : span / s[i]) + 1;
		/* PyTorch's rule: the last window starts inside the input or
		 * its leading padding (with padding pairs, trailing padding
		 * can hold more than one window start) */
		while (ceil_mode && o[i] > 1 && (o[i] - 1) * s[i] >= L[i] + pb[i])
			o[i]--;
	}
	g->OH = nsp == 1 ? 1 : o[0];
	g->OW = o[nsp - 1];
	if (nsp == 2) {
		g->kh = k[0]; g->sh = s[0]; g->dh = d[0]; g->ph = pb[0]; g->pha = pa[0];
	} else {
		g->kh = 1; g->sh = 1; g->dh = 1; g->ph = 0; g->pha = 0;
	}
	g->kw = k[nsp - 1]; g->sw = s[nsp - 1]; g->dw = d[nsp - 1];
	g->pw = pb[nsp - 1]; g->pwa = pa[nsp - 1];
	g->count_pad = mx ? 0 : (int)n->hp[HA_COUNT_PAD].i;
	return 0;
}

static int pool_infer(struct dl_node *n, const struct dl_shape *in,
		      struct dl_shape *out, struct dl_error *err)
{
	struct pgeom g;
	int rc = pool_geometry(n, &in[0], &g, err);
	if (rc)
		return rc;
	int nsp = spatial_dims(n);
	int64_t d[4] = {g.N, g.C, g.OH, g.OW};
	if (nsp == 1)
		d[2] = g.OW;
	*out = dl_shape_make(nsp + 2, d);
	if (dl_shape_numel(out) < 0)
		return dl_node_error(err, n, -1, "the output would be too large");
	n->ws_bytes = 0;
	n->saved_bytes = 0;
	n->macs = g.N * g.C * g.OH * g.OW * g.kh * g.kw;
	return 0;
}

/* ---- max pooling ---- */

/* The in-bounds cell holding the window's maximum, as PyTorch picks it
 * (the first of ties; a NaN wins), or -1 when the window covers only
 * padding. Padding is -inf, so it never wins. */
static int64_t max_argmax(const float *x, const struct pgeom *g, int64_t oh,
			  int64_t ow)
{
	int64_t best = -1;
	float m = -INFINITY;
	for (int64_t i = 0; i < g->kh; i++) {
		int64_t ih = oh * g->sh - g->ph + i * g->dh;
		if (ih < 0 || ih >= g->H)
			continue;
		for (int64_t j = 0; j < g->kw; j++) {
			int64_t iw = ow * g->sw - g->pw + j * g->dw;
			if (iw < 0 || iw >= g->W)
				continue;
			float v = x[ih * g->W + iw];
			if (best < 0)
				best = ih * g->W + iw;
			if (v > m || isnan(v)) {
				m = v;
				best = ih * g->W + iw;
			}
		}
	}
	return best;
}

/* One plane: y [OH, OW] = max over each window of x [H, W]. Tap by tap
 * over whole output rows (vectorised over the columns); a tap replaces
 * the running maximum when larger or NaN, so ties, NaNs and windows of
 * padding only (-inf) come out as PyTorch's scan gives them. */
DL_CLONES static void maxpool_plane(float *restrict y, const float *restrict x,
				    const struct pgeom *g)
{
	int64_t sw = g->sw, OW = g->OW;
	for (int64_t oh = 0; oh < g->OH; oh++) {
		float *restrict yr = y + oh * OW;
		#pragma omp simd
		for (int64_t ow = 0; ow < OW; ow++)
			yr[ow] = -INFINITY;
		for (int64_t i = 0; i < g->kh; i++) {
			int64_t ih = oh * g->sh - g->ph + i * g->dh;
			if (ih < 0 || ih >= g->H)
				continue;
			for (int64_t j = 0; j < g->kw; j++) {
				int64_t off = j * g->dw - g->pw, lo, hi;
				dl_col_range(OW, g->W, sw, off, &lo, &hi);
				const float *restrict xs = x + ih * g->W + off;
				#pragma omp simd
				for (int64_t ow = lo; ow < hi; ow++) {
					float v = xs[ow * sw];
					yr[ow] = v > yr[ow] || v != v ? v : yr[ow];
				}
			}
		}
	}
}

/* ---- max pooling, every window inside the input ---- */

/* No padding and no ceil_mode window hanging off the end (LeNet's and
 * most classifiers' 2x2 pools), on planes whose offsets fit an int32: the
 * windows of a plane are walked as one flat run of outputs, each tap a
 * gather at a fixed offset from the window's first cell. Rows of a few
 * outputs (14 in LeNet-5) left the row-wise loop mostly in its scalar
 * remainder, whose select compiled to a branch on the data. */
static int max_inside(const struct pgeom *g)
{
	return g->ph == 0 && g->pw == 0 &&
	       (g->OH - 1) * g->sh + (g->kh - 1) * g->dh < g->H &&
	       (g->OW - 1) * g->sw + (g->kw - 1) * g->dw < g->W &&
	       g->H * g->W < INT32_MAX;
}

/* Outputs per chunk: offsets, values and arguments of a chunk stay in L1 */
#define MAX_CHUNK 1024

/* start[k] = offset in the plane of the first cell of window q0 + k */
static void window_starts(int32_t *start, int64_t q0, int64_t len,
			  const struct pgeom *g)
{
	int64_t oh = q0 / g->OW, ow = q0 % g->OW;
	for (int64_t k = 0; k < len; k++) {
		start[k] = (int32_t)(oh * g->sh * g->W + ow * g->sw);
		if (++ow == g->OW) {
			ow = 0;
			oh++;
		}
	}
}

/* m[k] = max of x over window q0 + k of one plane, taps in PyTorch's
 * order (a tap replaces the running maximum when larger or NaN); arg[k]
 * (when not NULL) = the winning cell's offset in the plane. */
DL_CLONES static void maxpool_chunk(float *restrict m, int32_t *restrict arg,
				    const float *restrict x,
				    const int32_t *restrict start, int64_t len,
				    const struct pgeom *g)
{
	for (int64_t i = 0; i < g->kh; i++)
		for (int64_t j = 0; j < g->kw; j++) {
			int32_t t = (int32_t)(i * g->dh * g->W + j * g->dw);
			if (i == 0 && j == 0) {
				#pragma omp simd
				for (int64_t k = 0; k < len; k++)
					m[k] = x[start[k]];
				if (arg)
					for (int64_t k = 0; k < len; k++)
						arg[k] = start[k];
			} else if (arg) {
				#pragma omp simd
				for (int64_t k = 0; k < len; k++) {
					int32_t a = start[k] + t;
					float v = x[a], c = m[k];
					int take = (v > c) | (v != v);
					m[k] = take ? v : c;
					arg[k] = take ? a : arg[k];
				}
			} else {
				#pragma omp simd
				for (int64_t k = 0; k < len; k++) {
					float v = x[start[k] + t], c = m[k];
					m[k] = ((v > c) | (v != v)) ? v : c;
				}
			}
		}
}

/* One plane, forward (dy NULL: y = the maxima) or backward (dx += dy at
 * each window's argmax). */
static void maxpool_inside_plane(float *y, float *dx, const float *dy,
				 const float *x, const struct pgeom *g)
{
	int32_t start[MAX_CHUNK], arg[MAX_CHUNK];
	float m[MAX_CHUNK];
	int64_t P = g->OH * g->OW;
	for (int64_t q0 = 0; q0 < P; q0 += MAX_CHUNK) {
		int64_t len = P - q0 < MAX_CHUNK ? P - q0 : MAX_CHUNK;
		window_starts(start, q0, len, g);
		if (!dy) {
			maxpool_chunk(y + q0, NULL, x, start, len, g);
			continue;
		}
		maxpool_chunk(m, arg, x, start, len, g);
		for (int64_t k = 0; k < len; k++)
			dx[arg[k]] += dy[q0 + k];
	}
}

/* y [N C, OH, OW] = max over each window of x [N C, H, W] (-inf when a
 * window covers only padding). */
static void maxpool_forward(float *y, const float *x, const struct pgeom *g)
{
	int64_t np = g->N * g->C, in_plane = g->H * g->W, out_plane = g->OH * g->OW;
	int inside = max_inside(g);
	#pragma omp parallel for schedule(static) if (np * out_plane * g->kh * g->kw > PAR_MIN)
	for (int64_t p = 0; p < np; p++) {
		if (inside)
			maxpool_inside_plane(y + p * out_plane, NULL, NULL,
					     x + p * in_plane, g);
		else
			maxpool_plane(y + p * out_plane, x + p * in_plane, g);
	}
}

/* The outputs [lo, hi) along one dimension whose windows lie inside the
 * input (start o s - p >= 0, end o s - p + (k - 1) d < L); lo = hi when
 * none does. */
static void inside_range(int64_t O, int64_t s, int64_t p, int64_t k,
			 int64_t d, int64_t L, int64_t *lo, int64_t *hi)
{
	int64_t a = (p + s - 1) / s, last = L - 1 + p - (k - 1) * d;
	int64_t b = last < 0 ? 0 : last / s + 1;
	*lo = a < O ? a : O;
	*hi = b < *lo ? *lo : b > O ? O : b;
}

/* One padded plane's backward, output row by output row in PyTorch's
 * order: the windows inside the input through maxpool_chunk (the same
 * taps and the same winner as max_argmax, which they skipped the bounds
 * checks of), the border windows through max_argmax. The additions into
 * dx come in the same order as the all-max_argmax loop's, so the same
 * bits. (A stem's 3x3 stride-2 pool with padding 1 spent 2.2% of a
 * densenet121 64x64 training step in max_argmax.) */
static void maxpool_padded_bwd_plane(float *dx, const float *dy,
				     const float *x, const struct pgeom *g)
{
	int32_t start[MAX_CHUNK], arg[MAX_CHUNK];
	float m[MAX_CHUNK];
	int64_t h0, h1, w0, w1;
	inside_range(g->OH, g->sh, g->ph, g->kh, g->dh, g->H, &h0, &h1);
	inside_range(g->OW, g->sw, g->pw, g->kw, g->dw, g->W, &w0, &w1);
	for (int64_t oh = 0; oh < g->OH; oh++) {
		const float *dyr = dy + oh * g->OW;
		int rows_in = oh >= h0 && oh < h1;
		int64_t a = rows_in ? w0 : g->OW, b = rows_in ? w1 : g->OW;
		for (int64_t ow = 0; ow < a; ow++) {
			int64_t t = max_argmax(x, g, oh, ow);
			if (t >= 0)
				dx[t] += dyr[ow];
		}
		for (int64_t c0 = a; c0 < b; c0 += MAX_CHUNK) {
			int64_t len = b - c0 < MAX_CHUNK ? b - c0 : MAX_CHUNK;
			int64_t base = (oh * g->sh - g->ph) * g->W - g->pw;
			for (int64_t k = 0; k < len; k++)
				start[k] = (int32_t)(base + (c0 + k) * g->sw);
			maxpool_chunk(m, arg, x, start, len, g);
			for (int64_t k = 0; k < len; k++)
				dx[arg[k]] += dyr[c0 + k];
		}
		for (int64_t ow = b > a ? b : a; ow < g->OW; ow++) {
			int64_t t = max_argmax(x, g, oh, ow);
			if (t >= 0)
				dx[t] += dyr[ow];
		}
	}
}

/* dx += dy routed to each window's argmax */
static void maxpool_backward(float *dx, const float *dy, const float *x,
			     const struct pgeom *g)
{
	int64_t np = g->N * g->C, in_plane = g->H * g->W, out_plane = g->OH * g->OW;
	int inside = max_inside(g), fits = g->H * g->W < INT32_MAX;
	#pragma omp parallel for schedule(static) if (np * out_plane * g->kh * g->kw > PAR_MIN)
	for (int64_t p = 0; p < np; p++) {
		const float *xp = x + p * in_plane;
		const float *dyp = dy + p * out_plane;
		float *dxp = dx + p * in_plane;
		if (inside) {
			maxpool_inside_plane(NULL, dxp, dyp, xp, g);
			continue;
		}
		if (fits) {
			maxpool_padded_bwd_plane(dxp, dyp, xp, g);
			continue;
		}
		for (int64_t oh = 0; oh < g->OH; oh++)
			for (int64_t ow = 0; ow < g->OW; ow++) {
				int64_t a = max_argmax(xp, g, oh, ow);
				if (a >= 0)
					dxp[a] += dyp[oh * g->OW + ow];
			}
	}
}

/* ---- average pooling ---- */

/* PyTorch's window and divisor: the window is clipped to the padded input
 * (so a ceil_mode window hanging off the end is smaller), then to the input
 * for the sum; the divisor counts padding when count_include_pad. A window
 * over padding only has divisor 0 and gives 0. */
struct window { int64_t h0, h1, w0, w1; float inv; };

static struct window avg_window(const struct pgeom *g, int64_t oh, int64_t ow)
{
	struct window w;
	int64_t h0 = oh * g->sh - g->ph, w0 = ow * g->sw - g->pw;
	int64_t h1 = h0 + g->kh, w1 = w0 + g->kw;
	if (h1 > g->H + g->pha)
		h1 = g->H + g->pha;
	if (w1 > g->W + g->pwa)
		w1 = g->W + g->pwa;
	int64_t pool = (h1 - h0) * (w1 - w0);
	w.h0 = h0 < 0 ? 0 : h0;
	w.w0 = w0 < 0 ? 0 : w0;
	w.h1 = h1 > g->H ? g->H : h1;
	w.w1 = w1 > g->W ? g->W : w1;
	int64_t inside = (w.h1 > w.h0 && w.w1 > w.w0) ? (w.h1 - w.h0) * (w.w1 - w.w0) : 0;
	int64_t div = g->count_pad ? pool : inside;
	w.inv = div > 0 && inside > 0 ? 1.0f / (float)div : 0.0f;
	return w;
}

/* The window extent along one dimension (start o s - pb, clipped to the
 * padded input): pool cells and cells inside the input. */
static void avg_extent(int64_t o, int64_t s, int64_t k, int64_t pb, int64_t pa,
		       int64_t L, int64_t *pool, int64_t *inside)
{
	int64_t a = o * s - pb, e = a + k;
	if (e > L + pa)
		e = L + pa;
	*pool = e - a;
	int64_t a1 = a < 0 ? 0 : a, e1 = e > L ? L : e;
	*inside = e1 > a1 ? e1 - a1 : 0;
}

/* One plane: sums tap by tap over whole output rows, then divides by
 * PyTorch's divisor, which factors into a row part and a column part
 * (the same as avg_window's). */
DL_CLONES static void avgpool_plane(float *restrict y, const float *restrict x,
				    const struct pgeom *g)
{
	int64_t sw = g->sw, OW = g->OW;
	for (int64_t oh = 0; oh < g->OH; oh++) {
		float *restrict yr = y + oh * OW;
		#pragma omp simd
		for (int64_t ow = 0; ow < OW; ow++)
			yr[ow] = 0.0f;
		for (int64_t i = 0; i < g->kh; i++) {
			int64_t ih = oh * g->sh - g->ph + i;
			if (ih < 0 || ih >= g->H)
				continue;
			for (int64_t j = 0; j < g->kw; j++) {
				int64_t off = j - g->pw, lo, hi;
				dl_col_range(OW, g->W, sw, off, &lo, &hi);
				const float *restrict xs = x + ih * g->W + off;
				#pragma omp simd
				for (int64_t ow = lo; ow < hi; ow++)
					yr[ow] += xs[ow * sw];
			}
		}
		int64_t hpool, hin;
		avg_extent(oh, g->sh, g->kh, g->ph, g->pha, g->H, &hpool, &hin);
		int64_t kw = g->kw, pw = g->pw, pwa = g->pwa, W = g->W;
		int count_pad = g->count_pad;
		#pragma omp simd
		for (int64_t ow = 0; ow < OW; ow++) {
			int64_t a = ow * sw - pw, e = a + kw;
			e = e > W + pwa ? W + pwa : e;
			int64_t a1 = a < 0 ? 0 : a, e1 = e > W ? W : e;
			int64_t win = e1 > a1 ? e1 - a1 : 0;
			int64_t div = count_pad ? hpool * (e - a) : hin * win;
			yr[ow] = div > 0 && hin * win > 0 ? yr[ow] / (float)div : 0.0f;
		}
	}
}

static void avgpool_forward(float *y, const float *x, const struct pgeom *g)
{
	int64_t np = g->N * g->C, in_plane = g->H * g->W, out_plane = g->OH * g->OW;
	#pragma omp parallel for schedule(static) if (np * out_plane * g->kh * g->kw > PAR_MIN)
	for (int64_t p = 0; p < np; p++)
		avgpool_plane(y + p * out_plane, x + p * in_plane, g);
}

static void avgpool_backward(float *dx, const float *dy, const struct pgeom *g)
{
	int64_t np = g->N * g->C, in_plane = g->H * g->W, out_plane = g->OH * g->OW;
	#pragma omp parallel for schedule(static) if (np * out_plane * g->kh * g->kw > PAR_MIN)
	for (int64_t p = 0; p < np; p++) {
		const float *dyp = dy + p * out_plane;
		float *dxp = dx + p * in_plane;
		for (int64_t oh = 0; oh < g->OH; oh++)
			for (int64_t ow = 0; ow < g->OW; ow++) {
				struct window w = avg_window(g, oh, ow);
				float gv = dyp[oh * g->OW + ow] * w.inv;
				for (int64_t ih = w.h0; ih < w.h1; ih++)
					for (int64_t iw = w.w0; iw < w.w1; iw++)
						dxp[ih * g->W + iw] += gv;
			}
	}
}

static void pool_forward(struct dl_node *n, const struct dl_tensor *in,
			 struct dl_tensor *out, struct dl_ctx *ctx)
{
	struct pgeom g;
	(void)ctx;
	pool_geometry(n, &in[0].shape, &g, NULL);
	if (is_max(n))
		maxpool_forward(out->data, in[0].data, &g);
	else
		avgpool_forward(out->data, in[0].data, &g);
}

static void pool_backward(struct dl_node *n, const struct dl_tensor *in,
			  const struct dl_tensor *out, const float *dout,
			  float *const *din, struct dl_ctx *ctx)
{
	struct pgeom g;
	(void)out;
	(void)ctx;
	if (!din || !din[0])
		return;
	pool_geometry(n, &in[0].shape, &g, NULL);
	if (is_max(n))
		maxpool_backward(din[0], dout, in[0].data, &g);
	else
		avgpool_backward(din[0], dout, &g);
}

/* y = max of x over each window; padding is -inf (any size, unlike
 * PyTorch's half-kernel limit) */
static const struct dl_op_desc max_pool1d_op = {
	.name = "max_pool1d",
	.doc = "y[l] = max over the window at l s - p of x (padding -inf)",
	.min_in = 1, .max_in = 1,
	.hp = max_hp, .n_hp = N_MAX_HP,
	.infer = pool_infer, .forward = pool_forward, .backward = pool_backward,
	.flags = DL_OP_BWD_NO_OUTPUT,
};

static const struct dl_op_desc max_pool2d_op = {
	.name = "max_pool2d",
	.doc = "y[h, w] = max over the window at (h sh - ph, w sw - pw) of x (padding -inf)",
	.min_in = 1, .max_in = 1,
	.hp = max_hp, .n_hp = N_MAX_HP,
	.infer = pool_infer, .forward = pool_forward, .backward = pool_backward,
	.flags = DL_OP_BWD_NO_OUTPUT,
};

/* y = sum of x over each window / divisor (PyTorch's count_include_pad and
 * ceil_mode rules); padding is 0 */
static const struct dl_op_desc avg_pool1d_op = {
	.name = "avg_pool1d",
	.doc = "y[l] = mean of x over the window at l s - p (padding 0)",
	.min_in = 1, .max_in = 1,
	.hp = avg_hp, .n_hp = N_AVG_HP,
	.infer = pool_infer, .forward = pool_forward, .backward = pool_backward,
	.flags = DL_OP_BWD_NO_OUTPUT,
};

static const struct dl_op_desc avg_pool2d_op = {
	.name = "avg_pool2d",
	.doc = "y[h, w] = mean of x over the window at (h sh - ph, w sw - pw) (padding 0)",
	.min_in = 1, .max_in = 1,
	.hp = avg_hp, .n_hp = N_AVG_HP,
	.infer = pool_infer, .forward = pool_forward, .backward = pool_backward,
	.flags = DL_OP_BWD_NO_OUTPUT,
};

/* ---- adaptive pooling (the forward of both; average pooling backward) ---- */

static const struct dl_hp_desc adaptive_hp[] = {
	{"output_size", DL_HP_INTS, NULL, NULL, DL_HP_REQUIRED | DL_HP_POSITIVE},
};

static int adaptive_geometry(const struct dl_node *n, const struct dl_shape *in,
			     struct pgeom *g, struct dl_error *err)
{
	int nsp = n->op->name[strlen(n->op->name) - 2] == '1' ? 1 : 2, rc;
	int64_t o[2];
	memset(g, 0, sizeof *g);
	if ((rc = planes(n, in, nsp, &g->N, &g->C, &g->H, &g->W, err)))
		return rc;
	if ((rc = dl_spatial_tuple(n, 0, nsp, o, err)))
		return rc;
	g->OH = nsp == 1 ? 1 : o[0];
	g->OW = o[nsp - 1];
	return 0;
}

static int adaptive_infer(struct dl_node *n, const struct dl_shape *in,
			  struct dl_shape *out, struct dl_error *err)
{
	struct pgeom g;
	int rc = adaptive_geometry(n, &in[0], &g, err);
	if (rc)
		return rc;
	int nsp = n->op->name[strlen(n->op->name) - 2] == '1' ? 1 : 2;
	int64_t d[4] = {g.N, g.C, g.OH, g.OW};
	if (nsp == 1)
		d[2] = g.OW;
	*out = dl_shape_make(nsp + 2, d);
	if (dl_shape_numel(out) < 0)
		return dl_node_error(err, n, 0, "the output would be too large");
	n->ws_bytes = 0;
	n->saved_bytes = 0;
	n->macs = g.N * g.C * (g.H > g.OH ? g.H : g.OH) * (g.W > g.OW ? g.W : g.OW);
	return 0;
}

/* Output cell i of O over L input cells averages [floor(i L / O),
 * ceil((i + 1) L / O)). */
static int64_t ad_start(int64_t i, int64_t O, int64_t L) { return i * L / O; }
static int64_t ad_end(int64_t i, int64_t O, int64_t L) { return ((i + 1) * L + O - 1) / O; }

/* The mean of the window [h0, h1) x [w0, w1) of the plane x [H, W]. */
static inline float window_mean(const float *x, int64_t W, int64_t h0, int64_t h1,
			 int64_t w0, int64_t w1)
{
	float s = 0.0f;
	for (int64_t ih = h0; ih < h1; ih++) {
		/* in vector lanes: one running sum waited 4 cycles an
		 * element (squeeze-excitation's global pools, 7% of
		 * efficientnet_b0's batch-32 forward) */
		#pragma omp simd reduction(+:s)
		for (int64_t iw = w0; iw < w1; iw++)
			s += x[ih * W + iw];
	}
	return s / (float)((h1 - h0) * (w1 - w0));
}

/* The cell of the window [h0, h1) x [w0, w1) of the plane x [H, W] that
 * holds its maximum, as PyTorch's adaptive max pool picks it: scanning row
 * by row, a cell replaces the best when larger or NaN (so the first of
 * ties, the last NaN). */
static int64_t window_argmax(const float *x, int64_t W, int64_t h0, int64_t h1,
			     int64_t w0, int64_t w1)
{
	int64_t best = h0 * W + w0;
	float m = -INFINITY;
	for (int64_t ih = h0; ih < h1; ih++)
		for (int64_t iw = w0; iw < w1; iw++) {
			float v = x[ih * W + iw];
			if (v > m || isnan(v)) {
				m = v;
				best = ih * W + iw;
			}
		}
	return best;
}

/* y [N C, OH, OW] = the mean (max: the maximum) of each adaptive window
 * of x [N C, H, W] */
DL_CLONES static void adaptive_forward(float *y, const float *x, const struct pgeom *g, int max)
{
	int64_t np = g->N * g->C, in_plane = g->H * g->W, out_plane = g->OH * g->OW;
	if (out_plane == 1 && !max) {
		/* the global average: one sum over the flat plane (the
		 * window's bookkeeping per plane of 4 cells cost more than
		 * the sum; squeeze-excitation pools 290 thousand planes in
		 * efficientnet_b0's 64x64 forward at batch 32) */
		#pragma omp parallel for schedule(static) if (np * in_plane > PAR_MIN)
		for (int64_t p = 0; p < np; p++) {
			const float *xp = x + p * in_plane;
			float s = 0.0f;
			#pragma omp simd reduction(+:s)
			for (int64_t q = 0; q < in_plane; q++)
				s += xp[q];
			y[p] = s / (float)in_plane;
		}
		return;
	}
	#pragma omp parallel for schedule(static) if (np * in_plane > PAR_MIN)
	for (int64_t p = 0; p < np; p++) {
		const float *xp = x + p * in_plane;
		float *yp = y + p * out_plane;
		for (int64_t oh = 0; oh < g->OH; oh++) {
			int64_t h0 = ad_start(oh, g->OH, g->H), h1 = ad_end(oh, g->OH, g->H);
			for (int64_t ow = 0; ow < g->OW; ow++) {
				int64_t w0 = ad_start(ow, g->OW, g->W), w1 = ad_end(ow, g->OW, g->W);
				yp[oh * g->OW + ow] = max ? xp[window_argmax(xp, g->W, h0, h1, w0, w1)]
							  : window_mean(xp, g->W, h0, h1, w0, w1);
			}
		}
	}
}

static void adaptive_backward(float *dx, const float *dy, const struct pgeom *g)
{
	int64_t np = g->N * g->C, in_plane = g->H * g->W, out_plane = g->OH * g->OW;
	#pragma omp parallel for schedule(static) if (np * in_plane > PAR_MIN)
	for (int64_t p = 0; p < np; p++) {
		const float *dyp = dy + p * out_plane;
		float *dxp = dx + p * in_plane;
		for (int64_t oh = 0; oh < g->OH; oh++) {
			int64_t h0 = ad_start(oh, g->OH, g->H), h1 = ad_end(oh, g->OH, g->H);
			for (int64_t ow = 0; ow < g->OW; ow++) {
				int64_t w0 = ad_start(ow, g->OW, g->W), w1 = ad_end(ow, g->OW, g->W);
				float gv = dyp[oh * g->OW + ow] / (float)((h1 - h0) * (w1 - w0));
				for (int64_t ih = h0; ih < h1; ih++)
					for (int64_t iw = w0; iw < w1; iw++)
						dxp[ih * g->W + iw] += gv;
			}
		}
	}
}

static void adaptive_op_forward(struct dl_node *n, const struct dl_tensor *in,
				struct dl_tensor *out, struct dl_ctx *ctx)
{
	struct pgeom g;
	(void)ctx;
	adaptive_geometry(n, &in[0].shape, &g, NULL);
	adaptive_forward(out->data, in[0].data, &g, 0);
}

static void adaptive_op_backward(struct dl_node *n, const struct dl_tensor *in,
				 const struct dl_tensor *out, const float *dout,
				 float *const *din, struct dl_ctx *ctx)
{
	struct pgeom g;
	(void)out;
	(void)ctx;
	if (!din || !din[0])
		return;
	adaptive_geometry(n, &in[0].shape, &g, NULL);
	adaptive_backward(din[0], dout, &g);
}

/* y[i] = mean of x[floor(i L / O) : ceil((i + 1) L / O)] */
static const struct dl_op_desc adaptive_avg_pool1d_op = {
	.name = "adaptive_avg_pool1d",
	.doc = "y[i] = mean x[floor(i L/O) : ceil((i+1) L/O)]",
	.min_in = 1, .max_in = 1,
	.hp = adaptive_hp, .n_hp = 1,
	.infer = adaptive_infer, .forward = adaptive_op_forward, .backward = adaptive_op_backward,
	.flags = DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

static const struct dl_op_desc adaptive_avg_pool2d_op = {
	.name = "adaptive_avg_pool2d",
	.doc = "y[i, j] = mean of x over rows [floor(i H/OH), ceil((i+1) H/OH)) and columns likewise (output_size: 1 is global average pooling)",
	.min_in = 1, .max_in = 1,
	.hp = adaptive_hp, .n_hp = 1,
	.infer = adaptive_infer, .forward = adaptive_op_forward, .backward = adaptive_op_backward,
	.flags = DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

/* ---- adaptive max pooling ---- */

/* dx += dy routed to each window's argmax */
static void adaptive_max_backward(float *dx, const float *dy, const float *x,
				  const struct pgeom *g)
{
	int64_t np = g->N * g->C, in_plane = g->H * g->W, out_plane = g->OH * g->OW;
	#pragma omp parallel for schedule(static) if (np * in_plane > PAR_MIN)
	for (int64_t p = 0; p < np; p++) {
		const float *xp = x + p * in_plane;
		const float *dyp = dy + p * out_plane;
		float *dxp = dx + p * in_plane;
		for (int64_t oh = 0; oh < g->OH; oh++) {
			int64_t h0 = ad_start(oh, g->OH, g->H), h1 = ad_end(oh, g->OH, g->H);
			for (int64_t ow = 0; ow < g->OW; ow++) {
				int64_t w0 = ad_start(ow, g->OW, g->W), w1 = ad_end(ow, g->OW, g->W);
				dxp[window_argmax(xp, g->W, h0, h1, w0, w1)] += dyp[oh * g->OW + ow];
			}
		}
	}
}

static void adaptive_max_op_forward(struct dl_node *n, const struct dl_tensor *in,
				    struct dl_tensor *out, struct dl_ctx *ctx)
{
	struct pgeom g;
	(void)ctx;
	adaptive_geometry(n, &in[0].shape, &g, NULL);
	adaptive_forward(out->data, in[0].data, &g, 1);
}

static void adaptive_max_op_backward(struct dl_node *n, const struct dl_tensor *in,
				     const struct dl_tensor *out, const float *dout,
				     float *const *din, struct dl_ctx *ctx)
{
	struct pgeom g;
	(void)out;
	(void)ctx;
	if (!din || !din[0])
		return;
	adaptive_geometry(n, &in[0].shape, &g, NULL);
	adaptive_max_backward(din[0], dout, in[0].data, &g);
}

/* y[i] = max of x[floor(i L / O) : ceil((i + 1) L / O)] */
static const struct dl_op_desc adaptive_max_pool1d_op = {
	.name = "adaptive_max_pool1d",
	.doc = "y[i] = max x[floor(i L/O) : ceil((i+1) L/O)]",
	.min_in = 1, .max_in = 1,
	.hp = adaptive_hp, .n_hp = 1,
	.infer = adaptive_infer, .forward = adaptive_max_op_forward,
	.backward = adaptive_max_op_backward,
	.flags = DL_OP_BWD_NO_OUTPUT,
};

static const struct dl_op_desc adaptive_max_pool2d_op = {
	.name = "adaptive_max_pool2d",
	.doc = "y[i, j] = max of x over rows [floor(i H/OH), ceil((i+1) H/OH)) and columns likewise (output_size: 1 is global max pooling)",
	.min_in = 1, .max_in = 1,
	.hp = adaptive_hp, .n_hp = 1,
	.infer = adaptive_infer, .forward = adaptive_max_op_forward,
	.backward = adaptive_max_op_backward,
	.flags = DL_OP_BWD_NO_OUTPUT,
};

/* ---- upsample ---- */

enum { HU_SCALE, HU_MODE, HU_ALIGN, HU_SIZE_OF, N_UP_HP };
enum { MODE_NEAREST, MODE_LINEAR, MODE_BILINEAR };

static const struct dl_hp_desc upsample_hp[N_UP_HP] = {
	{"scale_factor", DL_HP_FLOATS, NULL, NULL, DL_HP_POSITIVE},
	{"mode", DL_HP_ENUM, "nearest", "nearest|linear|bilinear", 0},
	{"align_corners", DL_HP_BOOL, "false", NULL, 0},
	/* the output's spatial sizes are those of this input (the node's
	 * second, added by the loader), as F.interpolate(x, size=y.shape[2:]) */
	{"size_of", DL_HP_INPUT, NULL, NULL, 0},
};

/* Per spatial dimension: sizes and the source-coordinate scale, computed
 * in float as PyTorch does for float tensors. */
struct ugeom {
	int64_t N, C, H, W, OH, OW;
	float rh, rw;      /* source step per output cell */
	int mode, align;
};

/* in[0] the input; with size_of, in[1] the input whose sizes to take */
static int up_geometry(const struct dl_node *n, const struct dl_shape *in,
		       struct ugeom *g, struct dl_error *err)
{
	char a[64], b[64];
	int mode = (int)n->hp[HU_MODE].i, rc;
	memset(g, 0, sizeof *g);
	g->mode = mode;
	g->align = (int)n->hp[HU_ALIGN].i;
	if (mode == MODE_LINEAR && in->ndim != 3)
		return dl_node_error(err, n, HU_MODE,
			"mode linear expects a [N, C, L] input, got %s (use bilinear for images)",
			dl_shape_str(in, a, sizeof a));
	if (mode == MODE_BILINEAR && in->ndim != 4)
		return dl_node_error(err, n, HU_MODE,
			"mode bilinear expects a [N, C, H, W] input, got %s (use linear for signals)",
			dl_shape_str(in, a, sizeof a));
	if (in->ndim != 3 && in->ndim != 4)
		return dl_node_error(err, n, -1,
			"expects a [N, C, L] or [N, C, H, W] input, got %s",
			dl_shape_str(in, a, sizeof a));
	if (g->align && mode == MODE_NEAREST)
		return dl_node_error(err, n, HU_ALIGN,
			"align_corners applies to linear and bilinear modes only");
	int nsp = in->ndim - 2;
	if ((rc = planes(n, in, nsp, &g->N, &g->C, &g->H, &g->W, err)))
		return rc;
	int sized = n->hp[HU_SIZE_OF].set;
	if (sized == n->hp[HU_SCALE].set)
		return dl_node_error(err, n, sized ? HU_SIZE_OF : -1,
			"needs exactly one of scale_factor and size_of");
	if (n->n_in != 1 + sized)
		return dl_node_error(err, n, -1,
			"takes one input (and the entry that size_of names), got %d", n->n_in);
	if (sized && (in[1].ndim != in->ndim))
		return dl_node_error(err, n, HU_SIZE_OF,
			"size_of names an entry of shape %s, but the input is %s: they need the same rank",
			dl_shape_str(&in[1], a, sizeof a), dl_shape_str(in, b, sizeof b));
	double s[2];
	if (!sized && (rc = dl_hp_ftuple(n, HU_SCALE, nsp, s, err)))
		return rc;
	int64_t L[2] = {g->H, g->W}, O[2];
	float r[2];
	if (nsp == 1)
		L[0] = g->W;
	for (int i = 0; i < nsp; i++) {
		if (sized) {
			/* PyTorch's scale from sizes: in / out, in float */
			O[i] = in[1].d[2 + i];
			if (O[i] < 1)
				return dl_node_error(err, n, HU_SIZE_OF,
					"size_of names an entry of shape %s: its spatial sizes must be positive",
					dl_shape_str(&in[1], a, sizeof a));
			if (g->align && mode != MODE_NEAREST)
				r[i] = O[i] > 1 ? (float)(L[i] - 1) / (float)(O[i] - 1) : 0.0f;
			else
				r[i] = (float)L[i] / (float)O[i];
			continue;
		}
		double o = floor((double)L[i] * s[i]);
		if (o < 1)
			return dl_node_error(err, n, HU_SCALE,
				"scale_factor %g turns size %lld into an empty output",
				s[i], (long long)L[i]);
		if (o > (double)GEOM_MAX * 64)
			return dl_node_error(err, n, HU_SCALE, "scale_factor %g is too large", s[i]);
		O[i] = (int64_t)o;
		if (g->align && mode != MODE_NEAREST)
			r[i] = O[i] > 1 ? (float)(L[i] - 1) / (float)(O[i] - 1) : 0.0f;
		else
			r[i] = (float)(1.0 / s[i]);
	}
	if (nsp == 1) {
		g->OH = 1;
		g->OW = O[0];
		g->rh = 0.0f;
		g->rw = r[0];
	} else {
		g->OH = O[0];
		g->OW = O[1];
		g->rh = r[0];
		g->rw = r[1];
	}
	return 0;
}

static int upsample_infer(struct dl_node *n, const struct dl_shape *in,
			  struct dl_shape *out, struct dl_error *err)
{
	struct ugeom g;
	int rc = up_geometry(n, &in[0], &g, err);
	if (rc)
		return rc;
	int64_t d[4] = {g.N, g.C, g.OH, g.OW};
	if (in[0].ndim == 3)
		d[2] = g.OW;
	*out = dl_shape_make(in[0].ndim, d);
	if (dl_shape_numel(out) < 0)
		return dl_node_error(err, n, HU_SCALE, "the output would be too large");
	n->ws_bytes = 0;
	n->saved_bytes = 0;
	n->macs = dl_shape_numel(out) * (g.mode == MODE_NEAREST ? 0 : 2 * (in[0].ndim - 2));
	return 0;
}

/* One source coordinate: nearest index, or the two neighbours and the
 * weight of the second. */
struct tap { int64_t i0, i1; float l1; };

static struct tap up_tap(const struct ugeom *g, int64_t i, int64_t L, float r)
{
	struct tap t;
	if (g->mode == MODE_NEAREST) {
		/* PyTorch: floor(i * (1 / s)) in float, clamped */
		int64_t k = (int64_t)floorf((float)i * r);
		t.i0 = t.i1 = k < L - 1 ? k : L - 1;
		t.l1 = 0.0f;
		return t;
	}
	float src = g->align ? r * (float)i : r * ((float)i + 0.5f) - 0.5f;
	if (src < 0.0f)
		src = 0.0f;
	int64_t k = (int64_t)src;
	if (k > L - 1)
		k = L - 1;
	t.i0 = k;
	t.i1 = k < L - 1 ? k + 1 : k;
	t.l1 = src - (float)k;
	if (t.i1 == t.i0)
		t.l1 = 0.0f;
	return t;
}

static void upsample_forward(float *y, const float *x, const struct ugeom *g)
{
	int64_t np = g->N * g->C, in_plane = g->H * g->W, out_plane = g->OH * g->OW;
	#pragma omp parallel for schedule(static) if (np * out_plane > PAR_MIN)
	for (int64_t p = 0; p < np; p++) {
		const float *xp = x + p * in_plane;
		float *yp = y + p * out_plane;
		for (int64_t oh = 0; oh < g->OH; oh++) {
			struct tap th = up_tap(g, oh, g->H, g->rh);
			for (int64_t ow = 0; ow < g->OW; ow++) {
				struct tap tw = up_tap(g, ow, g->W, g->rw);
				const float *r0 = xp + th.i0 * g->W, *r1 = xp + th.i1 * g->W;
				float top = (1.0f - tw.l1) * r0[tw.i0] + tw.l1 * r0[tw.i1];
				float bot = (1.0f - tw.l1) * r1[tw.i0] + tw.l1 * r1[tw.i1];
				yp[oh * g->OW + ow] = (1.0f - th.l1) * top + th.l1 * bot;
			}
		}
	}
}

static void upsample_backward(float *dx, const float *dy, const struct ugeom *g)
{
	int64_t np = g->N * g->C, in_plane = g->H * g->W, out_plane = g->OH * g->OW;
	#pragma omp parallel for schedule(static) if (np * out_plane > PAR_MIN)
	for (int64_t p = 0; p < np; p++) {
		const float *dyp = dy + p * out_plane;
		float *dxp = dx + p * in_plane;
		for (int64_t oh = 0; oh < g->OH; oh++) {
			struct tap th = up_tap(g, oh, g->H, g->rh);
			for (int64_t ow = 0; ow < g->OW; ow++) {
				struct tap tw = up_tap(g, ow, g->W, g->rw);
				float gv = dyp[oh * g->OW + ow];
				float *r0 = dxp + th.i0 * g->W, *r1 = dxp + th.i1 * g->W;
				float g0 = (1.0f - th.l1) * gv, g1 = th.l1 * gv;
				r0[tw.i0] += (1.0f - tw.l1) * g0;
				r0[tw.i1] += tw.l1 * g0;
				r1[tw.i0] += (1.0f - tw.l1) * g1;
				r1[tw.i1] += tw.l1 * g1;
			}
		}
	}
}

/* The shapes of the node's inputs (the input, and size_of's) in s. */
static const struct dl_shape *up_shapes(const struct dl_node *n,
					const struct dl_tensor *in, struct dl_shape *s)
{
	for (int i = 0; i < n->n_in && i < 2; i++)
		s[i] = in[i].shape;
	return s;
}

static void upsample_op_forward(struct dl_node *n, const struct dl_tensor *in,
				struct dl_tensor *out, struct dl_ctx *ctx)
{
	struct ugeom g;
	struct dl_shape s[2];
	(void)ctx;
	up_geometry(n, up_shapes(n, in, s), &g, NULL);
	upsample_forward(out->data, in[0].data, &g);
}

static void upsample_op_backward(struct dl_node *n, const struct dl_tensor *in,
				 const struct dl_tensor *out, const float *dout,
				 float *const *din, struct dl_ctx *ctx)
{
	struct ugeom g;
	struct dl_shape s[2];
	(void)out;
	(void)ctx;
	if (!din || !din[0])
		return;
	up_geometry(n, up_shapes(n, in, s), &g, NULL);
	upsample_backward(din[0], dout, &g);
}

/* nearest: y[i] = x[floor(i / s)]; (bi)linear: source (i + 0.5) / s - 0.5
 * clamped at 0, interpolated between its two neighbours */
static const struct dl_op_desc upsample_op = {
	.name = "upsample",
	.doc = "y[i] = x[floor(i/s)] (nearest) or x interpolated at (i + 0.5)/s - 0.5 (linear, bilinear)",
	.min_in = 1, .max_in = 2,
	.hp = upsample_hp, .n_hp = N_UP_HP,
	.infer = upsample_infer, .forward = upsample_op_forward, .backward = upsample_op_backward,
	.flags = DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

const struct dl_op_desc *const dl_ops_pool[] = {
	&max_pool1d_op, &max_pool2d_op, &avg_pool1d_op, &avg_pool2d_op,
	&adaptive_avg_pool1d_op, &adaptive_avg_pool2d_op, &upsample_op,
	&adaptive_max_pool1d_op, &adaptive_max_pool2d_op, NULL,
};
