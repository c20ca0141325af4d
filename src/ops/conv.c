/* Convolutions: conv1d, conv2d and their transposes. General convolutions
 * lower to GEMM (im2col, then dl_sgemm per image and group); depthwise ones
 * (one input channel per group) run a direct loop, since a GEMM with one
 * row of K is the wrong shape. 1D ops are the 2D kernels with H = 1. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "engine/gemm.h"
#include "engine/op.h"

#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
#include <cblas.h>
#endif

/* ---- hyperparameters (PyTorch's constructor names and defaults) ---- */

/* The first nine are shared by all four ops; transposed ones add
 * output_padding. */
enum {
	HP_IN, HP_OUT, HP_KERNEL, HP_STRIDE, HP_PADDING, HP_DILATION,
	HP_GROUPS, HP_BIAS, HP_PADMODE, HP_OUTPAD, N_HP_T,
	N_HP = HP_OUTPAD
};

static const struct dl_hp_desc conv_hp[N_HP_T] = {
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

/* Each geometric hyperparameter must stay below this, so that sizes and
 * products of a few of them never overflow int64. */
#define GEOM_MAX ((int64_t)1 << 30)

/* ---- geometry ---- */

/* Everything a kernel needs, for a 2D view of the op: 1D ops have H = 1,
 * kh = 1, sh = dh = 1 and no padding along H. */
struct geom {
	int64_t N, C, H, W;       /* input [N, C, H, W] */
	int64_t OC, OH, OW;       /* output [N, OC, OH, OW] */
	int64_t G;                /* groups */
	int64_t kh, kw, sh, sw, dh, dw;
	int64_t ph, pw;           /* conv: zero padding before;
	                           * transposed: cells cropped before */
	int64_t pha, pwa;         /* the same after */
	int has_bias;
	int transposed;
};

static int spatial_dims(const struct dl_node *n)
{
	size_t len = strlen(n->op->name);
	return n->op->name[len - 2] == '1' ? 1 : 2;   /* "conv1d", "conv_transpose1d" */
}

static int is_transposed(const struct dl_node *n)
{
	return n->op->n_hp == N_HP_T;
}

static const char *layout(int nsp)
{
	return nsp == 1 ? "[N, C, L]" : "[N, C, H, W]";
}

/* "5x7" for 2D sizes, "5" for 1D. */
static const char *dims_str(char *buf, size_t size, int nsp, int64_t a,
			    int64_t b)
{
	if (nsp == 1)
		snprintf(buf, size, "%lld", (long long)b);
	else
		snprintf(buf, size, "%lldx%lld", (long long)a, (long long)b);
	return buf;
}

/* An INTS hyperparameter as `nsp` values, each below GEOM_MAX. */
static int tuple(const struct dl_node *n, int hp, int nsp, int64_t *v,
		 struct dl_error *err)
{
	int rc = dl_hp_tuple(n, hp, nsp, v, err);
	if (rc)
		return rc;
	for (int i = 0; i < nsp; i++)
		if (v[i] >= GEOM_MAX)
			return dl_node_error(err, n, hp, "%s %lld is too large",
					     n->op->hp[hp].name, (long long)v[i]);
	return 0;
}

/* Padding before and after each spatial dimension. `same` pads like ONNX's
 * SAME_UPPER: output ceil(L / stride), the odd cell after. */
static int resolve_padding(const struct dl_node *n, int nsp, const int64_t *L,
			   const int64_t *k, const int64_t *s, const int64_t *d,
			   int64_t *pb, int64_t *pa, struct dl_error *err)
{
	const struct dl_hp_value *v = &n->hp[HP_PADDING];
	switch (v->pad) {
	case DL_PAD_VALID:
		for (int i = 0; i < nsp; i++)
			pb[i] = pa[i] = 0;
		return 0;
	case DL_PAD_SAME:
		for (int i = 0; i < nsp; i++) {
			int64_t out = (L[i] + s[i] - 1) / s[i];
			int64_t total = (out - 1) * s[i] + d[i] * (k[i] - 1) + 1 - L[i];
			if (total < 0)
				total = 0;
			pb[i] = total / 2;
			pa[i] = total - pb[i];
		}
		return 0;
	case DL_PAD_PAIRS:
		if (v->n != nsp)
			return dl_node_error(err, n, HP_PADDING,
				"padding has %d [before, after] pairs; give %d, one per spatial dimension",
				v->n, nsp);
		for (int i = 0; i < nsp; i++) {
			pb[i] = v->v[2 * i];
			pa[i] = v->v[2 * i + 1];
		}
		break;
	case DL_PAD_INTS:
		if (!(v->scalar || v->n == 1) && v->n != nsp)
			return dl_node_error(err, n, HP_PADDING,
				"padding has %d values; give one, %d (one per spatial dimension), "
				"or [before, after] pairs such as %s",
				v->n, nsp, nsp == 1 ? "[[1, 2]]" : "[[1, 2], [0, 1]]");
		for (int i = 0; i < nsp; i++)
			pb[i] = pa[i] = v->scalar || v->n == 1 ? v->v[0] : v->v[i];
		break;
	}
	for (int i = 0; i < nsp; i++)
		if (pb[i] < 0 || pa[i] < 0 || pb[i] >= GEOM_MAX || pa[i] >= GEOM_MAX)
			return dl_node_error(err, n, HP_PADDING,
				"padding must be between 0 and %lld",
				(long long)GEOM_MAX - 1);
	return 0;
}

/* Checks the input and the hyperparameters and fills g. err may be NULL
 * (forward and backward recompute what infer already checked). */
static int geometry(const struct dl_node *n, const struct dl_shape *in,
		    struct geom *g, struct dl_error *err)
{
	int nsp = spatial_dims(n), tr = is_transposed(n);
	char a[64], b[64];
	memset(g, 0, sizeof *g);
	g->transposed = tr;
	if (in->ndim != nsp + 2)
		return dl_node_error(err, n, -1, "expects a %s input, got %s",
				     layout(nsp), dl_shape_str(in, a, sizeof a));
	g->N = in->d[0];
	g->C = in->d[1];
	g->H = nsp == 1 ? 1 : in->d[2];
	g->W = in->d[nsp + 1];
	if (g->C == 0 || g->H == 0 || g->W == 0)
		return dl_node_error(err, n, -1, "expects a non-empty %s input, got %s",
				     layout(nsp), dl_shape_str(in, a, sizeof a));
	const struct dl_hp_value *hp = n->hp;
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
		return dl_node_error(err, n, HP_GROUPS,
			"groups %lld does not divide in_channels %lld",
			(long long)g->G, (long long)g->C);
	if (g->OC % g->G)
		return dl_node_error(err, n, HP_GROUPS,
			"groups %lld does not divide out_channels %lld",
			(long long)g->G, (long long)g->OC);
	g->has_bias = (int)hp[HP_BIAS].i;

	int64_t L[2], k[2], s[2], d[2], pb[2] = {0, 0}, pa[2] = {0, 0}, op[2] = {0, 0}, o[2];
	L[0] = g->H;
	L[nsp - 1] = g->W;
	int rc;
	if ((rc = tuple(n, HP_KERNEL, nsp, k, err)) || (rc = tuple(n, HP_STRIDE, nsp, s, err)) ||
	    (rc = tuple(n, HP_DILATION, nsp, d, err)))
		return rc;
	if (tr) {
		if (hp[HP_PADDING].pad == DL_PAD_SAME || hp[HP_PADDING].pad == DL_PAD_VALID)
			return dl_node_error(err, n, HP_PADDING,
				"transposed convolutions take no 'same' or 'valid' padding; "
				"give an integer, one per dimension, or [before, after] crop pairs");
		if ((rc = tuple(n, HP_OUTPAD, nsp, op, err)))
			return rc;
	}
	if ((rc = resolve_padding(n, nsp, L, k, s, d, pb, pa, err)))
		return rc;
	for (int i = 0; i < nsp; i++) {
		int64_t ek = d[i] * (k[i] - 1) + 1;    /* dilated kernel extent */
		if (!tr) {
			int64_t padded = L[i] + pb[i] + pa[i];
			if (ek > padded) {
				int64_t pH = g->H + (nsp == 2 ? pb[0] + pa[0] : 0);
				int64_t pW = g->W + pb[nsp - 1] + pa[nsp - 1];
				char kk[64];
				dims_str(kk, sizeof kk, nsp, k[0], k[nsp - 1]);
				if (nsp == 2 && k[0] == k[1])
					snprintf(kk, sizeof kk, "%lld", (long long)k[0]);
				if (ek != k[i])
					return dl_node_error(err, n, HP_KERNEL,
						"kernel_size %s with dilation spans %lld cells, more than the padded input %s",
						kk, (long long)ek, dims_str(b, sizeof b, nsp, pH, pW));
				return dl_node_error(err, n, HP_KERNEL,
					"kernel_size %s is larger than the padded input %s",
					kk, dims_str(b, sizeof b, nsp, pH, pW));
			}
			o[i] = (padded - ek) / s[i] + 1;
		} else {
			if (op[i] >= s[i] && op[i] >= d[i])
				return dl_node_error(err, n, HP_OUTPAD,
					"output_padding %lld must be smaller than the stride (%lld) or the dilation (%lld)",
					(long long)op[i], (long long)s[i], (long long)d[i]);
			int64_t full = (L[i] - 1) * s[i] + ek + op[i];
			if (pb[i] + pa[i] >= full)
				return dl_node_error(err, n, HP_PADDING,
					"padding crops %lld cells of a %lld-cell output; it must leave at least one",
					(long long)(pb[i] + pa[i]), (long long)full);
			o[i] = full - pb[i] - pa[i];
		}
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
	return 0;
}

/* Input channels per group, output channels per group. */
static int64_t cin_g(const struct geom *g) { return g->C / g->G; }
static int64_t cout_g(const struct geom *g) { return g->OC / g->G; }

/* One input channel per group: the direct depthwise loop. */
static int depthwise(const struct geom *g)
{
	return !g->transposed && g->G == g->C && g->G > 1;
}

/* A 1x1, stride 1, unpadded (uncropped, same-size) convolution: the input
 * already is the GEMM operand. */
static int pointwise(const struct geom *g)
{
	return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 &&
	       g->ph == 0 && g->pw == 0 && g->pha == 0 && g->pwa == 0 &&
	       g->OH == g->H && g->OW == g->W;
}

/* ---- im2col and col2im ---- */

/* The range of output columns ow in [0, OW) whose input column
 * ow * s + off falls inside [0, W). */
static void col_range(int64_t OW, int64_t W, int64_t s, int64_t off,
		      int64_t *lo, int64_t *hi)
{
	/* ow * s + off >= 0  <=>  ow >= ceil(-off / s) */
	int64_t l = off >= 0 ? 0 : (-off + s - 1) / s;
	/* ow * s + off <= W - 1  <=>  ow <= floor((W - 1 - off) / s) */
	int64_t h = W - 1 - off < 0 ? -1 : (W - 1 - off) / s;
	if (h > OW - 1)
		h = OW - 1;
	*lo = l;
	*hi = h + 1 > l ? h + 1 : l;
}

/* col[(c kh + i) kw + j, oh OW + ow] = img[c, oh sh - ph + i dh,
 * ow sw - pw + j dw] (0 outside): img [C, H, W], col [C kh kw, OH OW]. */
static void im2col(float *col, const float *img, int64_t C, int64_t H,
		   int64_t W, int64_t OH, int64_t OW, int64_t kh, int64_t kw,
		   int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
		   int64_t dw)
{
	int64_t rows = C * kh * kw;
	#pragma omp parallel for schedule(static) if (rows * OH * OW > 32768)
	for (int64_t r = 0; r < rows; r++) {
		int64_t c = r / (kh * kw), i = r / kw % kh, j = r % kw;
		const float *plane = img + c * H * W;
		float *dst = col + r * OH * OW;
		int64_t off = j * dw - pw, lo, hi;
		col_range(OW, W, sw, off, &lo, &hi);
		for (int64_t oh = 0; oh < OH; oh++, dst += OW) {
			int64_t ih = oh * sh - ph + i * dh;
			if (ih < 0 || ih >= H) {
				memset(dst, 0, (size_t)OW * sizeof *dst);
				continue;
			}
			const float *src = plane + ih * W + off;
			for (int64_t ow = 0; ow < lo; ow++)
				dst[ow] = 0.0f;
			if (sw == 1)
				memcpy(dst + lo, src + lo, (size_t)(hi - lo) * sizeof *dst);
			else
				for (int64_t ow = lo; ow < hi; ow++)
					dst[ow] = src[ow * sw];
			for (int64_t ow = hi; ow < OW; ow++)
				dst[ow] = 0.0f;
		}
	}
}

/* The adjoint of im2col: img += col scattered back (cells outside the
 * image dropped). Parallel over channels, whose planes are disjoint. */
static void col2im(float *img, const float *col, int64_t C, int64_t H,
		   int64_t W, int64_t OH, int64_t OW, int64_t kh, int64_t kw,
		   int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
		   int64_t dw)
{
	#pragma omp parallel for schedule(static) if (C * kh * kw * OH * OW > 32768)
	for (int64_t c = 0; c < C; c++) {
		float *plane = img + c * H * W;
		for (int64_t i = 0; i < kh; i++)
			for (int64_t j = 0; j < kw; j++) {
				const float *src = col + ((c * kh + i) * kw + j) * OH * OW;
				int64_t off = j * dw - pw, lo, hi;
				col_range(OW, W, sw, off, &lo, &hi);
				for (int64_t oh = 0; oh < OH; oh++, src += OW) {
					int64_t ih = oh * sh - ph + i * dh;
					if (ih < 0 || ih >= H)
						continue;
					float *dst = plane + ih * W + off;
					if (sw == 1)
						for (int64_t ow = lo; ow < hi; ow++)
							dst[ow] += src[ow];
					else
						for (int64_t ow = lo; ow < hi; ow++)
							dst[ow * sw] += src[ow];
				}
			}
	}
}

/* ---- depthwise kernels ---- */

/* One output plane of a depthwise convolution: y [OH, OW] = b + the
 * kh x kw kernel w slid over x [H, W]. Row-wise axpys, so the inner loop
 * runs over contiguous output cells. */
static void dw_plane_forward(float *restrict y, const float *restrict x,
			     const float *restrict w, float b,
			     const struct geom *g)
{
	for (int64_t oh = 0; oh < g->OH; oh++) {
		float *restrict yr = y + oh * g->OW;
		for (int64_t ow = 0; ow < g->OW; ow++)
			yr[ow] = b;
		for (int64_t i = 0; i < g->kh; i++) {
			int64_t ih = oh * g->sh - g->ph + i * g->dh;
			if (ih < 0 || ih >= g->H)
				continue;
			const float *restrict xr = x + ih * g->W;
			for (int64_t j = 0; j < g->kw; j++) {
				float wv = w[i * g->kw + j];
				int64_t off = j * g->dw - g->pw, lo, hi;
				col_range(g->OW, g->W, g->sw, off, &lo, &hi);
				const float *restrict xs = xr + off;
				if (g->sw == 1)
					for (int64_t ow = lo; ow < hi; ow++)
						yr[ow] += wv * xs[ow];
				else
					for (int64_t ow = lo; ow < hi; ow++)
						yr[ow] += wv * xs[ow * g->sw];
			}
		}
	}
}

/* dx [H, W] += the kernel's transpose applied to dy [OH, OW]; dw [kh kw]
 * += correlation of dy with x. Either may be NULL. */
static void dw_plane_backward(float *restrict dx, float *restrict dw,
			      const float *restrict dy, const float *restrict x,
			      const float *restrict w, const struct geom *g)
{
	for (int64_t oh = 0; oh < g->OH; oh++) {
		const float *restrict dyr = dy + oh * g->OW;
		for (int64_t i = 0; i < g->kh; i++) {
			int64_t ih = oh * g->sh - g->ph + i * g->dh;
			if (ih < 0 || ih >= g->H)
				continue;
			for (int64_t j = 0; j < g->kw; j++) {
				int64_t off = j * g->dw - g->pw, lo, hi;
				col_range(g->OW, g->W, g->sw, off, &lo, &hi);
				if (dx) {
					float wv = w[i * g->kw + j];
					float *restrict dxs = dx + ih * g->W + off;
					if (g->sw == 1)
						for (int64_t ow = lo; ow < hi; ow++)
							dxs[ow] += wv * dyr[ow];
					else
						for (int64_t ow = lo; ow < hi; ow++)
							dxs[ow * g->sw] += wv * dyr[ow];
				}
				if (dw) {
					const float *restrict xs = x + ih * g->W + off;
					float acc = 0.0f;
					if (g->sw == 1)
						for (int64_t ow = lo; ow < hi; ow++)
							acc += dyr[ow] * xs[ow];
					else
						for (int64_t ow = lo; ow < hi; ow++)
							acc += dyr[ow] * xs[ow * g->sw];
					dw[i * g->kw + j] += acc;
				}
			}
		}
	}
}

/* y [N, OC, OH, OW] from x [N, C, H, W], w [OC, 1, kh, kw], b [OC] or NULL;
 * output channel oc reads input channel oc / (OC / C). */
static void depthwise_forward(float *y, const float *x, const float *w,
			      const float *b, const struct geom *g)
{
	int64_t mult = g->OC / g->C, planes = g->N * g->OC;
	int64_t in_plane = g->H * g->W, out_plane = g->OH * g->OW;
	#pragma omp parallel for schedule(static) if (planes * out_plane > 16384)
	for (int64_t p = 0; p < planes; p++) {
		int64_t nn = p / g->OC, oc = p % g->OC;
		dw_plane_forward(y + p * out_plane,
				 x + (nn * g->C + oc / mult) * in_plane,
				 w + oc * g->kh * g->kw, b ? b[oc] : 0.0f, g);
	}
}

static void depthwise_backward(float *dx, float *dw, float *db,
			       const float *dy, const float *x, const float *w,
			       const struct geom *g)
{
	int64_t mult = g->OC / g->C, K = g->kh * g->kw;
	int64_t in_plane = g->H * g->W, out_plane = g->OH * g->OW;
	/* Parallel over input channels: each owns its dx planes and the
	 * weights of its `mult` output channels, so nothing is shared. */
	#pragma omp parallel for schedule(static) if (g->N * g->OC * out_plane > 16384)
	for (int64_t c = 0; c < g->C; c++)
		for (int64_t oc = c * mult; oc < (c + 1) * mult; oc++) {
			float bacc = 0.0f;
			for (int64_t nn = 0; nn < g->N; nn++) {
				const float *dyp = dy + (nn * g->OC + oc) * out_plane;
				dw_plane_backward(dx ? dx + (nn * g->C + c) * in_plane : NULL,
						  dw ? dw + oc * K : NULL, dyp,
						  x + (nn * g->C + c) * in_plane, w + oc * K, g);
				if (db)
					for (int64_t q = 0; q < out_plane; q++)
						bacc += dyp[q];
			}
			if (db)
				db[oc] += bacc;
		}
}

/* ---- GEMM-lowered kernels ---- */

/* y [N, OC, P] += b[oc] */
static void add_bias(float *y, const float *b, int64_t N, int64_t OC, int64_t P)
{
	#pragma omp parallel for schedule(static) if (N * OC * P > 65536)
	for (int64_t r = 0; r < N * OC; r++) {
		float bv = b[r % OC];
		float *yr = y + r * P;
		for (int64_t q = 0; q < P; q++)
			yr[q] += bv;
	}
}

/* db[oc] += sum over n, p of dy [N, OC, P] */
static void bias_backward(float *db, const float *dy, int64_t N, int64_t OC,
			  int64_t P)
{
	#pragma omp parallel for schedule(static) if (N * OC * P > 65536)
	for (int64_t oc = 0; oc < OC; oc++) {
		double acc = 0.0;
		for (int64_t nn = 0; nn < N; nn++) {
			const float *r = dy + (nn * OC + oc) * P;
			float s = 0.0f;
			for (int64_t q = 0; q < P; q++)
				s += r[q];
			acc += s;
		}
		db[oc] += (float)acc;
	}
}

/* y [N, OC, OH, OW] = conv(x [N, C, H, W], w [OC, C/G, kh, kw]) + b;
 * col: [C/G kh kw, OH OW] of scratch (unused for pointwise). */
static void conv_forward(float *y, const float *x, const float *w,
			 const float *b, float *col, const struct geom *g)
{
	int64_t Cg = cin_g(g), OCg = cout_g(g), K = Cg * g->kh * g->kw;
	int64_t P = g->OH * g->OW, HW = g->H * g->W;
	for (int64_t nn = 0; nn < g->N; nn++)
		for (int64_t gi = 0; gi < g->G; gi++) {
			const float *xg = x + (nn * g->C + gi * Cg) * HW;
			const float *B = xg;
			if (!pointwise(g)) {
				im2col(col, xg, Cg, g->H, g->W, g->OH, g->OW, g->kh, g->kw,
				       g->sh, g->sw, g->ph, g->pw, g->dh, g->dw);
				B = col;
			}
			dl_sgemm(0, 0, (int)OCg, (int)P, (int)K, 1.0f, w + gi * OCg * K,
				 (int)K, B, (int)P, 0.0f,
				 y + (nn * g->OC + gi * OCg) * P, (int)P);
		}
	if (b)
		add_bias(y, b, g->N, g->OC, P);
}

/* dx += conv^T(dy), dw += dy (x)^T, db += sum dy; any may be NULL.
 * col: [C/G kh kw, OH OW] of scratch. */
static void conv_backward(float *dx, float *dw, float *db, const float *dy,
			  const float *x, const float *w, float *col,
			  const struct geom *g)
{
	int64_t Cg = cin_g(g), OCg = cout_g(g), K = Cg * g->kh * g->kw;
	int64_t P = g->OH * g->OW, HW = g->H * g->W;
	int pw1 = pointwise(g);
	if (db)
		bias_backward(db, dy, g->N, g->OC, P);
	for (int64_t nn = 0; nn < g->N; nn++)
		for (int64_t gi = 0; gi < g->G; gi++) {
			const float *xg = x + (nn * g->C + gi * Cg) * HW;
			const float *dyg = dy + (nn * g->OC + gi * OCg) * P;
			const float *wg = w + gi * OCg * K;
			float *dxg = dx ? dx + (nn * g->C + gi * Cg) * HW : NULL;
			if (dw) {
				const float *B = xg;
				if (!pw1) {
					im2col(col, xg, Cg, g->H, g->W, g->OH, g->OW, g->kh,
					       g->kw, g->sh, g->sw, g->ph, g->pw, g->dh, g->dw);
					B = col;
				}
				/* dW_g [OCg, K] += dy_g [OCg, P] col^T [P, K] */
				dl_sgemm(0, 1, (int)OCg, (int)K, (int)P, 1.0f, dyg, (int)P,
					 B, (int)P, 1.0f, dw + gi * OCg * K, (int)K);
			}
			if (dxg && pw1) {
				/* dx_g [Cg, HW] += W_g^T [Cg, OCg] dy_g [OCg, HW] */
				dl_sgemm(1, 0, (int)K, (int)P, (int)OCg, 1.0f, wg, (int)K,
					 dyg, (int)P, 1.0f, dxg, (int)P);
			} else if (dxg) {
				dl_sgemm(1, 0, (int)K, (int)P, (int)OCg, 1.0f, wg, (int)K,
					 dyg, (int)P, 0.0f, col, (int)P);
				col2im(dxg, col, Cg, g->H, g->W, g->OH, g->OW, g->kh, g->kw,
				       g->sh, g->sw, g->ph, g->pw, g->dh, g->dw);
			}
		}
}

/* Transposed: y [N, OC, OH, OW] = conv^T(x [N, C, H, W]) with
 * w [C, OC/G, kh, kw], cropped by (ph, pw) before; col: [OC/G kh kw, H W]. */
static void convt_forward(float *y, const float *x, const float *w,
			  const float *b, float *col, const struct geom *g)
{
	int64_t Cg = cin_g(g), OCg = cout_g(g), K = OCg * g->kh * g->kw;
	int64_t P = g->OH * g->OW, HW = g->H * g->W;
	int pw1 = pointwise(g);
	for (int64_t nn = 0; nn < g->N; nn++)
		for (int64_t gi = 0; gi < g->G; gi++) {
			const float *xg = x + (nn * g->C + gi * Cg) * HW;
			const float *wg = w + gi * Cg * K;
			float *yg = y + (nn * g->OC + gi * OCg) * P;
			if (pw1) {
				/* y_g [OCg, HW] = W_g^T [OCg, Cg] x_g [Cg, HW] */
				dl_sgemm(1, 0, (int)K, (int)HW, (int)Cg, 1.0f, wg, (int)K,
					 xg, (int)HW, 0.0f, yg, (int)HW);
				continue;
			}
			dl_sgemm(1, 0, (int)K, (int)HW, (int)Cg, 1.0f, wg, (int)K, xg,
				 (int)HW, 0.0f, col, (int)HW);
			memset(yg, 0, (size_t)(OCg * P) * sizeof *yg);
			/* the output plays the image, the input grid the columns */
			col2im(yg, col, OCg, g->OH, g->OW, g->H, g->W, g->kh, g->kw,
			       g->sh, g->sw, g->ph, g->pw, g->dh, g->dw);
		}
	if (b)
		add_bias(y, b, g->N, g->OC, P);
}

static void convt_backward(float *dx, float *dw, float *db, const float *dy,
			   const float *x, const float *w, float *col,
			   const struct geom *g)
{
	int64_t Cg = cin_g(g), OCg = cout_g(g), K = OCg * g->kh * g->kw;
	int64_t P = g->OH * g->OW, HW = g->H * g->W;
	int pw1 = pointwise(g);
	if (db)
		bias_backward(db, dy, g->N, g->OC, P);
	for (int64_t nn = 0; nn < g->N; nn++)
		for (int64_t gi = 0; gi < g->G; gi++) {
			const float *xg = x + (nn * g->C + gi * Cg) * HW;
			const float *dyg = dy + (nn * g->OC + gi * OCg) * P;
			const float *B = dyg;
			if (!pw1) {
				im2col(col, dyg, OCg, g->OH, g->OW, g->H, g->W, g->kh, g->kw,
				       g->sh, g->sw, g->ph, g->pw, g->dh, g->dw);
				B = col;
			}
			/* dx_g [Cg, HW] += W_g [Cg, K] col [K, HW] */
			if (dx)
				dl_sgemm(0, 0, (int)Cg, (int)HW, (int)K, 1.0f, w + gi * Cg * K,
					 (int)K, B, (int)HW, 1.0f,
					 dx + (nn * g->C + gi * Cg) * HW, (int)HW);
			/* dW_g [Cg, K] += x_g [Cg, HW] col^T [HW, K] */
			if (dw)
				dl_sgemm(0, 1, (int)Cg, (int)K, (int)HW, 1.0f, xg, (int)HW, B,
					 (int)HW, 1.0f, dw + gi * Cg * K, (int)K);
		}
}

/* ---- the op interface ---- */

static int conv_infer(struct dl_node *n, const struct dl_shape *in,
		      struct dl_shape *out, struct dl_error *err)
{
	struct geom g;
	int nsp = spatial_dims(n);
	int rc = geometry(n, &in[0], &g, err);
	if (rc)
		return rc;
	int64_t Cg = cin_g(&g), OCg = cout_g(&g);
	int64_t d[4] = {g.N, g.OC, g.OH, g.OW};
	if (nsp == 1)
		d[2] = g.OW;
	*out = dl_shape_make(nsp + 2, d);
	if (dl_shape_numel(out) < 0)
		return dl_node_error(err, n, -1, "the output would be too large");

	int64_t wd[4], kk = g.kh * g.kw, fan_in;
	if (!g.transposed) {
		wd[0] = g.OC; wd[1] = Cg;
		fan_in = Cg * kk;
	} else {
		wd[0] = g.C; wd[1] = OCg;
		fan_in = OCg * kk;   /* PyTorch reads fan_in from weight dim 1 */
	}
	wd[2] = g.kh;
	wd[3] = g.kw;
	if (nsp == 1)
		wd[2] = g.kw;
	struct dl_shape ws = dl_shape_make(nsp + 2, wd);
	struct dl_shape bs = dl_shape_make(1, &g.OC);
	double bound = 1.0 / sqrt((double)fan_in);
	if ((rc = dl_node_param(n, "weight", &ws, DL_INIT_UNIFORM, bound, err)) < 0)
		return rc;
	if (g.has_bias && (rc = dl_node_param(n, "bias", &bs, DL_INIT_UNIFORM, bound, err)) < 0)
		return rc;

	/* im2col columns: [K, P] for the convolution (forward, and again in
	 * backward, where the same buffer then takes dcol). */
	double cols = 0;
	if (depthwise(&g) || pointwise(&g))
		cols = 0;
	else if (!g.transposed)
		cols = (double)Cg * kk * g.OH * g.OW;
	else
		cols = (double)OCg * kk * g.H * g.W;
	if (cols > (double)DL_MAX_NUMEL || cols > 2147483647.0 ||
	    (double)OCg * kk * Cg > 2147483647.0 || (double)g.OH * g.OW > 2147483647.0 ||
	    (double)g.H * g.W > 2147483647.0)
		return dl_node_error(err, n, HP_KERNEL,
			"this convolution is too large for one GEMM (more than 2^31 elements per operand)");
	n->ws_bytes = (size_t)cols * sizeof(float);
	n->saved_bytes = 0;
	n->macs = g.transposed ? g.N * g.C * g.H * g.W * OCg * kk
			       : g.N * g.OC * g.OH * g.OW * Cg * kk;
	return 0;
}

static const float *bias_of(const struct dl_node *n, const struct geom *g)
{
	return g->has_bias ? n->params[1].data : NULL;
}

static void conv_op_forward(struct dl_node *n, const struct dl_tensor *in,
			    struct dl_tensor *out, struct dl_ctx *ctx)
{
	struct geom g;
	geometry(n, &in[0].shape, &g, NULL);
	const float *w = n->params[0].data, *b = bias_of(n, &g);
	if (g.transposed)
		convt_forward(out->data, in[0].data, w, b, ctx->ws, &g);
	else if (depthwise(&g))
		depthwise_forward(out->data, in[0].data, w, b, &g);
	else
		conv_forward(out->data, in[0].data, w, b, ctx->ws, &g);
}

static void conv_op_backward(struct dl_node *n, const struct dl_tensor *in,
			     const struct dl_tensor *out, const float *dout,
			     float *const *din, struct dl_ctx *ctx)
{
	struct geom g;
	geometry(n, &in[0].shape, &g, NULL);
	const float *w = n->params[0].data;
	float *dx = din ? din[0] : NULL, *dw = n->params[0].grad;
	float *db = g.has_bias ? n->params[1].grad : NULL;
	(void)out;
	if (g.transposed)
		convt_backward(dx, dw, db, dout, in[0].data, w, ctx->ws, &g);
	else if (depthwise(&g))
		depthwise_backward(dx, dw, db, dout, in[0].data, w, &g);
	else
		conv_backward(dx, dw, db, dout, in[0].data, w, ctx->ws, &g);
}

/* y[n, o, l] = b[o] + sum over c in o's group and k of
 * w[o, c, k] x[n, c, l s - p + k d]; w ~ U(+-1/sqrt(fan_in)), fan_in =
 * in_channels / groups * kernel size (PyTorch's default) */
static const struct dl_op_desc conv1d_op = {
	.name = "conv1d",
	.doc = "y[o, l] = b[o] + sum_c,k w[o, c, k] x[c, l*stride - pad + k*dilation]",
	.min_in = 1, .max_in = 1,
	.hp = conv_hp, .n_hp = N_HP,
	.infer = conv_infer, .forward = conv_op_forward, .backward = conv_op_backward,
	.params = "weight [out_channels, in_channels/groups, kernel_size], bias [out_channels]",
};

static const struct dl_op_desc conv2d_op = {
	.name = "conv2d",
	.doc = "y[o, h, w] = b[o] + sum_c,i,j w[o, c, i, j] x[c, h*sh - ph + i*dh, w*sw - pw + j*dw]",
	.min_in = 1, .max_in = 1,
	.hp = conv_hp, .n_hp = N_HP,
	.infer = conv_infer, .forward = conv_op_forward, .backward = conv_op_backward,
	.params = "weight [out_channels, in_channels/groups, kh, kw], bias [out_channels]",
};

/* The adjoint of the convolution w.r.t. its input: each input cell
 * scatters w * x into the full output, of which padding crops
 * [before, after] cells; output_padding adds cells at the end. fan_in =
 * out_channels / groups * kernel size, as PyTorch reads it from weight
 * dimension 1. */
static const struct dl_op_desc conv_transpose1d_op = {
	.name = "conv_transpose1d",
	.doc = "y[o, l*stride + k*dilation - pad] += w[c, o, k] x[c, l]; y += b",
	.min_in = 1, .max_in = 1,
	.hp = conv_hp, .n_hp = N_HP_T,
	.infer = conv_infer, .forward = conv_op_forward, .backward = conv_op_backward,
	.params = "weight [in_channels, out_channels/groups, kernel_size], bias [out_channels]",
};

static const struct dl_op_desc conv_transpose2d_op = {
	.name = "conv_transpose2d",
	.doc = "y[o, h*sh + i*dh - ph, w*sw + j*dw - pw] += w[c, o, i, j] x[c, h, w]; y += b",
	.min_in = 1, .max_in = 1,
	.hp = conv_hp, .n_hp = N_HP_T,
	.infer = conv_infer, .forward = conv_op_forward, .backward = conv_op_backward,
	.params = "weight [in_channels, out_channels/groups, kh, kw], bias [out_channels]",
};

const struct dl_op_desc *const dl_ops_conv[] = {
	&conv1d_op, &conv2d_op, &conv_transpose1d_op, &conv_transpose2d_op, NULL,
};
