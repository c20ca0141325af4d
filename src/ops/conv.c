/* Convolutions: conv1d, conv2d and their transposes. General convolutions
 * lower to GEMM through dl_sgemm: im2col over tiles of output rows, or
 * Winograd F(4x4, 3x3) or F(2x2, 3x3) for 3x3 stride-1 layers; depthwise
 * ones (one input channel per group) run a direct loop, since a GEMM with
 * one row of K is the wrong shape: forward with 16 channels in the vector
 * lanes (dw_cb_*), or row by row where a strip of rows is too large. 1D ops are the 2D kernels with H = 1.
 * Scratch comes from the planned workspace, one slot per thread. */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#include "engine/fuse.h"
#include "engine/gemm.h"
#include "engine/op.h"
#include "engine/threads.h"
#include "ops/spatial.h"

#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
#include <cblas.h>
#endif
#ifdef _OPENMP
#include <omp.h>
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
	int im2col_only;          /* Winograd not worth it here (wino_pays) */
	int adjoint;              /* the data gradient of a 3x3 convolution run
	                           * as one (adjoint_of): the weights are the
	                           * forward's, read transposed and flipped, and
	                           * the output is added to y */
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
				     dl_spatial_layout(nsp), dl_shape_str(in, a, sizeof a));
	g->N = in->d[0];
	g->C = in->d[1];
	g->H = nsp == 1 ? 1 : in->d[2];
	g->W = in->d[nsp + 1];
	if (g->C == 0 || g->H == 0 || g->W == 0)
		return dl_node_error(err, n, -1, "expects a non-empty %s input, got %s",
				     dl_spatial_layout(nsp), dl_shape_str(in, a, sizeof a));
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
	if ((rc = dl_spatial_tuple(n, HP_KERNEL, nsp, k, err)) ||
	    (rc = dl_spatial_tuple(n, HP_STRIDE, nsp, s, err)) ||
	    (rc = dl_spatial_tuple(n, HP_DILATION, nsp, d, err)))
		return rc;
	if (tr) {
		if (hp[HP_PADDING].pad == DL_PAD_SAME || hp[HP_PADDING].pad == DL_PAD_VALID)
			return dl_node_error(err, n, HP_PADDING,
				"transposed convolutions take no 'same' or 'valid' padding; "
				"give an integer, one per dimension, or [before, after] crop pairs");
		if ((rc = dl_spatial_tuple(n, HP_OUTPAD, nsp, op, err)))
			return rc;
	}
	if ((rc = dl_spatial_padding(n, HP_PADDING, nsp, L, k, s, d, pb, pa, err)))
		return rc;
	for (int i = 0; i < nsp; i++) {
		int64_t ek = d[i] * (k[i] - 1) + 1;    /* dilated kernel extent */
		if (!tr) {
			int64_t padded = L[i] + pb[i] + pa[i];
			if (ek > padded) {
				int64_t pH = g->H + (nsp == 2 ? pb[0] + pa[0] : 0);
				int64_t pW = g->W + pb[nsp - 1] + pa[nsp - 1];
				char kk[64];
				dl_spatial_dims(kk, sizeof kk, nsp, k[0], k[nsp - 1]);
				if (nsp == 2 && k[0] == k[1])
					snprintf(kk, sizeof kk, "%lld", (long long)k[0]);
				if (ek != k[i])
					return dl_node_error(err, n, HP_KERNEL,
						"kernel_size %s with dilation spans %lld cells, more than the padded input %s",
						kk, (long long)ek, dl_spatial_dims(b, sizeof b, nsp, pH, pW));
				return dl_node_error(err, n, HP_KERNEL,
					"kernel_size %s is larger than the padded input %s",
					kk, dl_spatial_dims(b, sizeof b, nsp, pH, pW));
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

/* An image [C, H, W] seen through kh x kw windows placed at the cells of a
 * grid [OH, OW]: cell (oh, ow), tap (i, j) reads image cell
 * (oh sh - ph + i dh, ow sw - pw + j dw). For a convolution the image is
 * the input and the grid the output; for a transposed one the image is
 * the output and the grid the input. */
struct win {
	int64_t C, H, W, OH, OW;
	int64_t kh, kw, sh, sw, ph, pw, dh, dw;
};

static struct win conv_win(const struct geom *g)
{
	struct win w = {g->C / g->G, g->H, g->W, g->OH, g->OW, g->kh, g->kw,
			g->sh, g->sw, g->ph, g->pw, g->dh, g->dw};
	return w;
}

static struct win convt_win(const struct geom *g)
{
	struct win w = {g->OC / g->G, g->OH, g->OW, g->H, g->W, g->kh, g->kw,
			g->sh, g->sw, g->ph, g->pw, g->dh, g->dw};
	return w;
}

/* Grid rows [oh0, oh1) of the columns: col [C kh kw, (oh1 - oh0) OW],
 * col[(c kh + i) kw + j, (oh - oh0) OW + ow] = img[c, oh sh - ph + i dh,
 * ow sw - pw + j dw], 0 outside the image; only column rows [r0, r1)
 * (threads sharing one tile of columns each fill a part). Rows of col are
 * ld floats apart (the columns of several images side by side), or
 * (oh1 - oh0) OW when ld is 0. */
/* Short rows (a 3x3 convolution's taps on 8x8 planes: 7 or 8 floats)
 * copied and zeroed inline: perf on the resnet-block example's training
 * step showed memcpy and memset calls, one per tap row, at 8.5% beside
 * im2col's own 16%. Long rows still go to the library. */
typedef float row_v8 __attribute__((vector_size(32)));
typedef float row_v4 __attribute__((vector_size(16)));

/* n floats through vectors of 8 (or 4), the last one overlapping the one
 * before; fewer than 4 one by one. Written out, not as a loop over the
 * vectors: GCC 12 turned that loop into `rep movsq`, whose start-up took
 * 59% of im2col_part's samples on lenet5's c3 (rows of 10 floats), 27% of
 * its training step. */
static inline __attribute__((always_inline)) void
copy_row(float *restrict dst, const float *restrict src, int64_t n)
{
	if (n > 32) {
		memcpy(dst, src, (size_t)n * sizeof *dst);
	} else if (n >= 8) {
		row_v8 a, b, c, d;
		memcpy(&a, src, sizeof a);
		memcpy(&d, src + n - 8, sizeof d);
		if (n > 16)
			memcpy(&b, src + 8, sizeof b);
		if (n > 24)
			memcpy(&c, src + 16, sizeof c);
		memcpy(dst, &a, sizeof a);
		if (n > 16)
			memcpy(dst + 8, &b, sizeof b);
		if (n > 24)
			memcpy(dst + 16, &c, sizeof c);
		memcpy(dst + n - 8, &d, sizeof d);
	} else if (n >= 4) {
		row_v4 a, b;
		memcpy(&a, src, sizeof a);
		memcpy(&b, src + n - 4, sizeof b);
		memcpy(dst, &a, sizeof a);
		memcpy(dst + n - 4, &b, sizeof b);
	} else {
		if (n > 0)
			dst[0] = src[0];
		if (n > 1)
			dst[1] = src[1];
		if (n > 2)
			dst[2] = src[2];
	}
}

/* n zeros: copy_row's vectors from a row of zeros */
static inline __attribute__((always_inline)) void zero_row(float *dst, int64_t n)
{
	static const float zeros[32];
	if (n > 32)
		memset(dst, 0, (size_t)n * sizeof *dst);
	else
		copy_row(dst, zeros, n);
}

/* im2col's row r for a stride-1 convolution whose output rows are as
 * wide as the input's (OW = W: "same" padding): the tap's rows are the
 * plane shifted by (di, dj), so the valid rows are one run of memory: one
 * copy, then zeros over the columns the shift wrapped around and over
 * the rows outside the image. Small planes (8 x 8: rows of 7 and 8
 * floats) spent their im2col time per row: 19% of the resnet-block
 * example's training step at batch 32. */
static void im2col_shift(float *restrict dst, const float *restrict plane,
			 const struct win *w, int64_t oh0, int64_t oh1,
			 int64_t di, int64_t dj)
{
	int64_t W = w->W;
	int64_t a = -di > oh0 ? -di : oh0, b = w->H - di < oh1 ? w->H - di : oh1;
	if (b < a)
		b = a;
	zero_row(dst, (a - oh0) * W);
	zero_row(dst + (b - oh0) * W, (oh1 - b) * W);
	if (b == a)
		return;
	float *d = dst + (a - oh0) * W;
	const float *src = plane + (a + di) * W;
	int64_t n = (b - a) * W;
	/* never read before the first valid row or after the last */
	if (dj >= 0)
		copy_row(d, src + dj, n - dj);
	else
		copy_row(d - dj, src, n + dj);
	for (int64_t oh = a; oh < b; oh++, d += W)
		if (dj >= 0)
			zero_row(d + W - dj, dj);
		else
			zero_row(d, -dj);
}

/* Planes of at most 16 cells, in and out (densenet121's dense blocks 3
 * and 4 at 64x64 input: 4x4 and 2x2; resnet18's layer4 there): a plane
 * fits one vector of 16 floats, and each tap's row of the columns is a
 * fixed shuffle of it, zeros where the tap falls outside the image. Row
 * by row im2col_shift spent its time per 4-float row: 30% of a 4x4
 * 3x3 layer's backward at batch 32. Taps per shuffle table at most
 * SMALL_TAPS (a 7x7 kernel). */
#define SMALL_CELLS 16
#define SMALL_TAPS 49
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

static int im2col_small_fits(const struct win *w)
{
	return w->H * w->W <= SMALL_CELLS && w->OH * w->OW <= SMALL_CELLS &&
	       w->kh * w->kw <= SMALL_TAPS;
}

/* The rows [r0, r1) of the columns from the shuffle table idx (one
 * vector of cell indices per tap; SMALL_CELLS and up pick a zero): each
 * row is a pure copy, so every variant gives the same bits. */
static void small_rows(float *restrict col, const float *restrict img, const v16i *idx,
		       int64_t taps, int64_t HW, int64_t P, int64_t r0, int64_t r1,
		       int64_t cols)
{
	/* the plane, then the zero vector's cells */
	float cells[2 * SMALL_CELLS] = {0};
	int64_t loaded = -1;
	for (int64_t r = r0; r < r1; r++) {
		int64_t c = r / taps, t = r % taps;
		if (c != loaded) {
			memcpy(cells, img + c * HW, (size_t)HW * sizeof(float));
			loaded = c;
		}
		float *dst = col + r * cols;
		for (int64_t k = 0; k < P; k++)
			dst[k] = cells[idx[t][k]];
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
#define SMALL_AVX512 1
/* small_rows with AVX-512's two-source permute, one instruction a row
 * (GCC and clang both have the intrinsic; the caller checks the CPU) */
__attribute__((target("avx512f"))) static void
small_rows_avx512(float *restrict col, const float *restrict img, const v16i *idx,
		  int64_t taps, int64_t HW, int64_t P, int64_t r0, int64_t r1, int64_t cols)
{
	const __m512 zero = _mm512_setzero_ps();
	const __mmask16 in = (__mmask16)((1u << HW) - 1), out = (__mmask16)((1u << P) - 1);
	__m512 v = zero;
	int64_t loaded = -1;
	for (int64_t r = r0; r < r1; r++) {
		int64_t c = r / taps, t = r % taps;
		if (c != loaded) {
			v = _mm512_maskz_loadu_ps(in, img + c * HW);
			loaded = c;
		}
		__m512i ix = _mm512_loadu_si512((const void *)&idx[t]);
		_mm512_mask_storeu_ps(col + r * cols, out, _mm512_permutex2var_ps(v, ix, zero));
	}
}
#endif

/* im2col_part's rows [r0, r1) of a whole small plane (im2col_small_fits) */
DL_CLONES static void im2col_small(float *restrict col, const float *restrict img,
				   const struct win *w, int64_t r0, int64_t r1, int64_t cols)
{
	int64_t taps = w->kh * w->kw, P = w->OH * w->OW, HW = w->H * w->W;
	/* the shuffles' indices, as vector arithmetic: the table is made
	 * at every call (an image of a grouped backward), and made cell by
	 * cell it took as long as the shuffles */
	v16i q, oh, ow, idx[SMALL_TAPS];
	for (int k = 0; k < SMALL_CELLS; k++) {
		q[k] = k;
		oh[k] = (int32_t)(k / w->OW);
		ow[k] = (int32_t)(k % w->OW);
	}
	v16i in_plane = q < (int32_t)P;
	oh *= (int32_t)w->sh;
	ow *= (int32_t)w->sw;
	for (int64_t t = 0; t < taps; t++) {
		v16i ih = oh + (int32_t)(t / w->kw * w->dh - w->ph);
		v16i iw = ow + (int32_t)(t % w->kw * w->dw - w->pw);
		v16i ok = in_plane & (ih >= 0) & (ih < (int32_t)w->H) & (iw >= 0) &
			  (iw < (int32_t)w->W);
		/* SMALL_CELLS and up: the zero vector's */
		idx[t] = (ok & (ih * (int32_t)w->W + iw)) | (~ok & SMALL_CELLS);
	}
#ifdef SMALL_AVX512
	if (__builtin_cpu_supports("avx512f")) {
		small_rows_avx512(col, img, idx, taps, HW, P, r0, r1, cols);
		return;
	}
#endif
	small_rows(col, img, idx, taps, HW, P, r0, r1, cols);
}

DL_CLONES static void im2col_part(float *restrict col, const float *restrict img,
		   const struct win *w, int64_t oh0, int64_t oh1, int64_t r0, int64_t r1,
		   int64_t ld)
{
	int64_t cols = ld ? ld : (oh1 - oh0) * w->OW;
	int shift = w->sh == 1 && w->sw == 1 && w->OW == w->W;
	if (oh0 == 0 && oh1 == w->OH && im2col_small_fits(w)) {
		im2col_small(col, img, w, r0, r1, cols);
		return;
	}
	for (int64_t r = r0; r < r1; r++) {
		int64_t c = r / (w->kh * w->kw), i = r / w->kw % w->kh, j = r % w->kw;
		const float *plane = img + c * w->H * w->W;
		float *dst = col + r * cols;
		if (shift && j * w->dw - w->pw > -w->W && j * w->dw - w->pw < w->W) {
			im2col_shift(dst, plane, w, oh0, oh1, i * w->dh - w->ph,
				     j * w->dw - w->pw);
			continue;
		}
		int64_t off = j * w->dw - w->pw, lo, hi;
		dl_col_range(w->OW, w->W, w->sw, off, &lo, &hi);
		for (int64_t oh = oh0; oh < oh1; oh++, dst += w->OW) {
			int64_t ih = oh * w->sh - w->ph + i * w->dh;
			if (ih < 0 || ih >= w->H) {
				zero_row(dst, w->OW);
				continue;
			}
			const float *src = plane + ih * w->W + off;
			zero_row(dst, lo);
			if (w->sw == 1)
				copy_row(dst + lo, src + lo, hi - lo);
			else
				for (int64_t ow = lo; ow < hi; ow++)
					dst[ow] = src[ow * w->sw];
			zero_row(dst + hi, w->OW - hi);
		}
	}
}

static void im2col(float *col, const float *img, const struct win *w, int64_t oh0,
		   int64_t oh1)
{
	im2col_part(col, img, w, oh0, oh1, 0, w->C * w->kh * w->kw, 0);
}

/* Cells col2im_shift keeps aside on its stack; a tap that would wrap
 * more goes row by row. */
#define SHIFT_KEEP 256

/* col2im's tap (di, dj) for a stride-1 convolution whose output rows are
 * as wide as the input's (OW = W), the adjoint of im2col_shift: the valid
 * rows as one run, plane[(a + di) W + dj + e] += src[e]. The run wraps
 * |dj| cells of each row onto the next image row (dj > 0) or the previous
 * one (dj < 0), cells the tap does not reach: they are kept before the
 * run's additions and put back after, and every other cell gets the one
 * addition the row-by-row loop gives it, so the bits are the same. Row by
 * row, rows of 2 to 16 floats (densenet121 at 64x64) spent 6.9% of a
 * training step in col2im. Returns 0 (nothing done) when the cells to
 * keep do not fit SHIFT_KEEP. */
static inline __attribute__((always_inline)) int col2im_shift(float *restrict plane, const float *restrict src,
			const struct win *w, int64_t oh0, int64_t oh1, int64_t di,
			int64_t dj)
{
	int64_t W = w->W, adj = dj < 0 ? -dj : dj;
	int64_t a = -di > oh0 ? -di : oh0, b = w->H - di < oh1 ? w->H - di : oh1;
	if (b <= a || adj >= W)
		return 1;
	if ((b - a - 1) * adj > SHIFT_KEEP)
		return 0;
	float keep[SHIFT_KEEP];
	float *d = plane + (a + di) * W;
	const float *s = src + (a - oh0) * W;
	int64_t n = (b - a) * W - adj;
	/* the wrapped cells: row r's first dj (dj > 0, rows 1 .. b - a - 1)
	 * or row r - 1's last -dj (dj < 0, the same rows' starts less adj) */
	int64_t first = dj > 0 ? W : W - adj;
	for (int64_t r = 0, k = 0; r < b - a - 1; r++)
		for (int64_t t = 0; t < adj; t++)
			keep[k++] = d[first + r * W + t];
	if (dj >= 0) {
		float *dd = d + dj;
		#pragma omp simd
		for (int64_t e = 0; e < n; e++)
			dd[e] += s[e];
	} else {
		const float *ss = s + adj;
		#pragma omp simd
		for (int64_t e = 0; e < n; e++)
			d[e] += ss[e];
	}
	for (int64_t r = 0, k = 0; r < b - a - 1; r++)
		for (int64_t t = 0; t < adj; t++)
			d[first + r * W + t] = keep[k++];
	return 1;
}

/* The adjoint of im2col for grid rows [oh0, oh1): img += col scattered
 * back (taps outside the image dropped). col [C kh kw, (oh1 - oh0) OW],
 * its rows ld floats apart (0: (oh1 - oh0) OW). */
DL_CLONES static void col2im(float *restrict img, const float *restrict col,
			     const struct win *w, int64_t oh0, int64_t oh1, int64_t ld)
{
	int64_t cols = ld ? ld : (oh1 - oh0) * w->OW;
	int shift = w->sh == 1 && w->sw == 1 && w->OW == w->W;
	for (int64_t c = 0; c < w->C; c++) {
		float *plane = img + c * w->H * w->W;
		for (int64_t i = 0; i < w->kh; i++)
			for (int64_t j = 0; j < w->kw; j++) {
				const float *src = col + ((c * w->kh + i) * w->kw + j) * cols;
				if (shift && col2im_shift(plane, src, w, oh0, oh1,
							  i * w->dh - w->ph,
							  j * w->dw - w->pw))
					continue;
				int64_t off = j * w->dw - w->pw, lo, hi, sw = w->sw;
				dl_col_range(w->OW, w->W, sw, off, &lo, &hi);
				for (int64_t oh = oh0; oh < oh1; oh++, src += w->OW) {
					int64_t ih = oh * w->sh - w->ph + i * w->dh;
					if (ih < 0 || ih >= w->H)
						continue;
					float *dst = plane + ih * w->W + off;
					if (sw == 1) {
						#pragma omp simd
						for (int64_t ow = lo; ow < hi; ow++)
							dst[ow] += src[ow];
					} else {
						for (int64_t ow = lo; ow < hi; ow++)
							dst[ow * sw] += src[ow];
					}
				}
			}
	}
}

/* ---- depthwise kernels ---- */

/* One output plane of a depthwise convolution: y [OH, OW] = b + the
 * kh x kw kernel w slid over x [H, W]. Row-wise: each tap adds w * x to a
 * whole output row (clipped at the edges), vectorised over the columns. */
DL_CLONES static void dw_plane_forward(float *restrict y, const float *restrict x,
				       const float *restrict w, float b,
				       const struct geom *g)
{
	int64_t sw = g->sw, OW = g->OW;
	for (int64_t oh = 0; oh < g->OH; oh++) {
		float *restrict yr = y + oh * OW;
		#pragma omp simd
		for (int64_t ow = 0; ow < OW; ow++)
			yr[ow] = b;
		for (int64_t i = 0; i < g->kh; i++) {
			int64_t ih = oh * g->sh - g->ph + i * g->dh;
			if (ih < 0 || ih >= g->H)
				continue;
			const float *restrict xr = x + ih * g->W;
			for (int64_t j = 0; j < g->kw; j++) {
				float wv = w[i * g->kw + j];
				int64_t off = j * g->dw - g->pw, lo, hi;
				dl_col_range(OW, g->W, sw, off, &lo, &hi);
				const float *restrict xs = xr + off;
				if (sw == 1) {
					#pragma omp simd
					for (int64_t ow = lo; ow < hi; ow++)
						yr[ow] += wv * xs[ow];
				} else {
					#pragma omp simd
					for (int64_t ow = lo; ow < hi; ow++)
						yr[ow] += wv * xs[ow * sw];
				}
			}
		}
	}
}

/* The same for the common 3x3 kernel with unit stride and column
 * dilation: all nine taps in one pass over each output row. Rows outside
 * the input take weight 0 (reading a valid row instead); the columns
 * whose taps leave the input are redone tap by tap. */
DL_CLONES static void dw3x3_plane_forward(float *restrict y,
					  const float *restrict x,
					  const float *restrict w, float b,
					  const struct geom *g)
{
	int64_t W = g->W, OW = g->OW, pw = g->pw;
	/* interior columns: ow - pw >= 0 and ow - pw + 2 <= W - 1 */
	int64_t lo = pw, hi = W - 2 + pw;
	if (hi > OW)
		hi = OW;
	if (lo > hi)
		lo = hi;
	for (int64_t oh = 0; oh < g->OH; oh++) {
		float *restrict yr = y + oh * OW;
		const float *r[3];
		float k[9];
		for (int i = 0; i < 3; i++) {
			int64_t ih = oh * g->sh - g->ph + i * g->dh;
			int in = ih >= 0 && ih < g->H;
			r[i] = x + (in ? ih : 0) * W - pw;
			for (int j = 0; j < 3; j++)
				k[3 * i + j] = in ? w[3 * i + j] : 0.0f;
		}
		const float *restrict r0 = r[0], *restrict r1 = r[1], *restrict r2 = r[2];
		#pragma omp simd
		for (int64_t ow = lo; ow < hi; ow++)
			yr[ow] = b + k[0] * r0[ow] + k[1] * r0[ow + 1] + k[2] * r0[ow + 2]
				   + k[3] * r1[ow] + k[4] * r1[ow + 1] + k[5] * r1[ow + 2]
				   + k[6] * r2[ow] + k[7] * r2[ow + 1] + k[8] * r2[ow + 2];
		for (int64_t ow = 0; ow < OW; ow++) {
			if (ow == lo)
				ow = hi > lo ? hi : lo;
			if (ow >= OW)
				break;
			float acc = b;
			for (int j = 0; j < 3; j++) {
				int64_t iw = ow - pw + j;
				if (iw < 0 || iw >= W)
					continue;
				acc += k[j] * r0[ow + j] + k[3 + j] * r1[ow + j] + k[6 + j] * r2[ow + j];
			}
			yr[ow] = acc;
		}
	}
}

/* dx [H, W] += the kernel's transpose applied to dy [OH, OW]; dw [kh kw]
 * += correlation of dy with x. Either may be NULL. */
DL_CLONES static void dw_plane_backward(float *restrict dx, float *restrict dw,
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
				dl_col_range(g->OW, g->W, g->sw, off, &lo, &hi);
				if (dx) {
					float wv = w[i * g->kw + j];
					float *restrict dxs = dx + ih * g->W + off;
					int64_t sw = g->sw;
					if (sw == 1) {
						#pragma omp simd
						for (int64_t ow = lo; ow < hi; ow++)
							dxs[ow] += wv * dyr[ow];
					} else {
						for (int64_t ow = lo; ow < hi; ow++)
							dxs[ow * sw] += wv * dyr[ow];
					}
				}
				if (dw) {
					const float *restrict xs = x + ih * g->W + off;
					float acc = 0.0f;
					int64_t sw = g->sw;
					#pragma omp simd reduction(+:acc)
					for (int64_t ow = lo; ow < hi; ow++)
						acc += dyr[ow] * xs[ow * sw];
					dw[i * g->kw + j] += acc;
				}
			}
		}
	}
}

/* Depthwise convolutions on zero-padded planes, for equal strides s along
 * H and W. The input plane is padded to rows of Wp (every tap of every
 * output inside); outputs are computed on a widened grid of OH rows of Wp
 * (the columns beyond OW are dropped, or carry a zero gradient), whose
 * cell q = oh Wp + ow reads padded cell s q + i dh Wp + j dw for tap
 * (i, j). So each tap is one flat pass over the plane, vectorised end to
 * end: the row-wise kernels ran kh kw loops of OW per output row (12 in
 * MobileNet's blocks), mostly in their scalar remainders, and backward
 * reduced a dot product per row and tap. The flat length Q is rounded up
 * to a multiple of DW_LANES, so no pass has a remainder. */
static int thread_id(void);
static int team_of(int nt);

#define DW_LANES 16

static int dw_padded(const struct geom *g)
{
	return g->sh == g->sw;
}

/* Row length of the padded plane: every tap, and every input column
 * before the last one a tap reads */
static int64_t dw_pad_w(const struct geom *g)
{
	return (g->OW - 1) * g->sw + (g->kw - 1) * g->dw + 1;
}

/* Cells of the widened output grid, rounded up to whole vectors */
static int64_t dw_q(const struct geom *g)
{
	int64_t q = g->OH * dw_pad_w(g);
	return (q + DW_LANES - 1) / DW_LANES * DW_LANES;
}

/* Floats of a padded plane: what the last cell's last tap reads */
static int64_t dw_pad_plane(const struct geom *g)
{
	return g->sw * dw_q(g) + (g->kh - 1) * g->dh * dw_pad_w(g) + (g->kw - 1) * g->dw + 1;
}

/* Backward keeps the weight gradient of each tap as Q partial sums over
 * the batch, reduced once per channel, while that fits in L1 (below,
 * a dot product per plane and tap amortises its reduction) */
#define DW_PART_FLOATS 4096

static int dw_partials(const struct geom *g)
{
	return dw_q(g) <= DW_PART_FLOATS;
}

/* Scratch per thread: the padded input xp, its gradient dxp (backward) or
 * the widened output (forward), the widened dy, the partial sums of the
 * channel's output channels */
static int64_t dw_cb_floats(const struct geom *g);
static int dw_cb(const struct geom *g);

static int64_t dw_slot(const struct geom *g)
{
	int64_t s = !dw_padded(g) ? 0 : 2 * dw_pad_plane(g) + dw_q(g) +
		    (dw_partials(g) ? g->OC / g->C * g->kh * g->kw * dw_q(g) : 0);
	/* forward's channel blocks */
	if (dw_cb(g) && dw_cb_floats(g) > s)
		s = dw_cb_floats(g);
	return s;
}

/* The input rows and columns that lie in the padded plane: [0, *h) and
 * [0, *w) */
static void dw_pad_extent(const struct geom *g, int64_t *h, int64_t *w)
{
	int64_t Wp = dw_pad_w(g);
	int64_t rows = (g->OH - 1) * g->sh + (g->kh - 1) * g->dh + 1;
	*h = rows - g->ph < g->H ? rows - g->ph : g->H;
	*w = Wp - g->pw < g->W ? Wp - g->pw : g->W;
}

/* xp = x [H, W] placed at (ph, pw), zero elsewhere */
static void dw_pad_in(float *restrict xp, const float *restrict x,
		      const struct geom *g)
{
	int64_t Wp = dw_pad_w(g), h, w;
	dw_pad_extent(g, &h, &w);
	memset(xp, 0, (size_t)dw_pad_plane(g) * sizeof *xp);
	for (int64_t ih = 0; ih < h && w > 0; ih++)
		memcpy(xp + (ih + g->ph) * Wp + g->pw, x + ih * g->W,
		       (size_t)w * sizeof *xp);
}

/* Over the padded plane, per tap t: the weight gradient's partial sums
 * part[t Q + q] += dyw[q] xp[s q + shift] (part NULL: dw[t] += their sum
 * directly), and (dxp not NULL) dxp[s q + shift] += w[t] dyw[q]. */
DL_CLONES static void dw_padded_taps(float *restrict part, float *restrict dw,
				     float *restrict dxp,
				     const float *restrict dyw,
				     const float *restrict xp,
				     const float *restrict w,
				     const struct geom *g)
{
	int64_t Wp = dw_pad_w(g), Q = dw_q(g), st = g->sw;
	for (int64_t i = 0; i < g->kh; i++)
		for (int64_t j = 0; j < g->kw; j++) {
			int64_t t = i * g->kw + j, off = i * g->dh * Wp + j * g->dw;
			const float *restrict xs = xp + off;
			if (part) {
				float *restrict pt = part + t * Q;
				if (st == 1) {
					#pragma omp simd
					for (int64_t q = 0; q < Q; q++)
						pt[q] += dyw[q] * xs[q];
				} else {
					#pragma omp simd
					for (int64_t q = 0; q < Q; q++)
						pt[q] += dyw[q] * xs[q * st];
				}
			} else if (dw) {
				float acc = 0.0f;
				if (st == 1) {
					#pragma omp simd reduction(+:acc)
					for (int64_t q = 0; q < Q; q++)
						acc += dyw[q] * xs[q];
				} else {
					#pragma omp simd reduction(+:acc)
					for (int64_t q = 0; q < Q; q++)
						acc += dyw[q] * xs[q * st];
				}
				dw[t] += acc;
			}
			if (dxp) {
				float *restrict ds = dxp + off;
				float wv = w[t];
				if (st == 1) {
					#pragma omp simd
					for (int64_t q = 0; q < Q; q++)
						ds[q] += wv * dyw[q];
				} else {
					#pragma omp simd
					for (int64_t q = 0; q < Q; q++)
						ds[q * st] += wv * dyw[q];
				}
			}
		}
}

/* yw [Q] = b + sum over taps of w[t] xp[s q + shift]: the forward on the
 * padded plane, tap by tap. The sums run in the row-wise kernels' order:
 * b, then the taps row by row. */
DL_CLONES static void dw_padded_forward(float *restrict yw,
					const float *restrict xp,
					const float *restrict w, float b,
					const struct geom *g)
{
	int64_t Wp = dw_pad_w(g), Q = dw_q(g), st = g->sw;
	#pragma omp simd
	for (int64_t q = 0; q < Q; q++)
		yw[q] = b;
	for (int64_t i = 0; i < g->kh; i++)
		for (int64_t j = 0; j < g->kw; j++) {
			const float *restrict xs = xp + i * g->dh * Wp + j * g->dw;
			float wv = w[i * g->kw + j];
			if (st == 1) {
				#pragma omp simd
				for (int64_t q = 0; q < Q; q++)
					yw[q] += wv * xs[q];
			} else {
				#pragma omp simd
				for (int64_t q = 0; q < Q; q++)
					yw[q] += wv * xs[q * st];
			}
		}
}

/* The padded forward pays for the copy into the padded plane and (at
 * stride 2) for the columns it drops; it wins on planes of short rows,
 * where the row-wise kernels spend their time in loop remainders, and
 * its passes over the plane stay in L1 */
#define DW_PAD_FWD_FLOATS 4096

static int dw_padded_fwd(const struct geom *g)
{
	return dw_padded(g) && g->OW < 32 && dw_q(g) <= DW_PAD_FWD_FLOATS;
}

/* t[j, c] = row c's element j for 8 rows of 8 floats: rows[c] the source
 * rows, t's rows at stride st, of which the first nst are stored. The
 * unpack, shuffle and lane-permute transpose in GCC's generic vector
 * shuffles on 8 floats (one instruction each for AVX2 and AVX-512;
 * shuffles of 16 floats, which AVX-512 has, are lowered one float at a
 * time for AVX2: 700 scalar moves per 16 x 16 block, 5x the depthwise
 * forward's time on an AMD EPYC), written out so that the vectors stay
 * in registers; the callers are inlined, so nst and the row addresses
 * fold. __builtin_shuffle is GCC's (clang spells it differently). */
#if defined(__GNUC__) && !defined(__clang__)
typedef float tr_v8 __attribute__((vector_size(32)));
typedef int tr_i8 __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) void
tr8(float *restrict t, int64_t st, int nst, const float *const *rows)
{
	const tr_i8 lo = {0, 8, 1, 9, 4, 12, 5, 13}, hi = {2, 10, 3, 11, 6, 14, 7, 15};
	const tr_i8 l2 = {0, 1, 8, 9, 4, 5, 12, 13}, h2 = {2, 3, 10, 11, 6, 7, 14, 15};
	const tr_i8 l4 = {0, 1, 2, 3, 8, 9, 10, 11}, h4 = {4, 5, 6, 7, 12, 13, 14, 15};
	tr_v8 r0, r1, r2, r3, r4, r5, r6, r7;
	memcpy(&r0, rows[0], sizeof r0);
	memcpy(&r1, rows[1], sizeof r1);
	memcpy(&r2, rows[2], sizeof r2);
	memcpy(&r3, rows[3], sizeof r3);
	memcpy(&r4, rows[4], sizeof r4);
	memcpy(&r5, rows[5], sizeof r5);
	memcpy(&r6, rows[6], sizeof r6);
	memcpy(&r7, rows[7], sizeof r7);
	/* pairs of rows interleaved, then quads, then halves swapped */
	tr_v8 u0 = __builtin_shuffle(r0, r1, lo), u1 = __builtin_shuffle(r0, r1, hi);
	tr_v8 u2 = __builtin_shuffle(r2, r3, lo), u3 = __builtin_shuffle(r2, r3, hi);
	tr_v8 u4 = __builtin_shuffle(r4, r5, lo), u5 = __builtin_shuffle(r4, r5, hi);
	tr_v8 u6 = __builtin_shuffle(r6, r7, lo), u7 = __builtin_shuffle(r6, r7, hi);
	tr_v8 s0 = __builtin_shuffle(u0, u2, l2), s1 = __builtin_shuffle(u0, u2, h2);
	tr_v8 s2 = __builtin_shuffle(u1, u3, l2), s3 = __builtin_shuffle(u1, u3, h2);
	tr_v8 s4 = __builtin_shuffle(u4, u6, l2), s5 = __builtin_shuffle(u4, u6, h2);
	tr_v8 s6 = __builtin_shuffle(u5, u7, l2), s7 = __builtin_shuffle(u5, u7, h2);
	tr_v8 o[8];
	o[0] = __builtin_shuffle(s0, s4, l4), o[4] = __builtin_shuffle(s0, s4, h4);
	o[1] = __builtin_shuffle(s1, s5, l4), o[5] = __builtin_shuffle(s1, s5, h4);
	o[2] = __builtin_shuffle(s2, s6, l4), o[6] = __builtin_shuffle(s2, s6, h4);
	o[3] = __builtin_shuffle(s3, s7, l4), o[7] = __builtin_shuffle(s3, s7, h4);
	for (int j = 0; j < 8 && j < nst; j++)
		memcpy(t + j * st, &o[j], sizeof o[j]);
}

/* t[j, c] = a[c, j] for 8 x 8 floats, a's rows at stride sa, t's at st */
static inline __attribute__((always_inline)) void
wino_t8(float *restrict t, int64_t st, const float *restrict a, int64_t sa)
{
	const float *rows[8] = {a, a + sa, a + 2 * sa, a + 3 * sa,
				a + 4 * sa, a + 5 * sa, a + 6 * sa, a + 7 * sa};
	tr8(t, st, 8, rows);
}
#else
static inline void wino_t8(float *restrict t, int64_t st, const float *restrict a, int64_t sa)
{
	for (int j = 0; j < 8; j++)
		for (int c = 0; c < 8; c++)
			t[j * st + c] = a[c * sa + j];
}
#endif

/* Channel-blocked depthwise forward: DW_CB_LANES output channels of one
 * image at a time, with the channels in the vector lanes. The block's
 * input planes are transposed to xT [H, W, lanes] and its weights to
 * wT [kh kw, lanes]; each output cell is then a sum over taps of whole
 * vectors, with no remainder whatever the plane's width (the row-wise
 * kernels ran most of MobileNet's and EfficientNet's small planes, 14x14
 * down to 2x2, in their scalar remainders), strides and dilation cost
 * nothing (no strided loads), and taps that fall in the padding are
 * skipped rather than multiplied by zero (a 5x5 kernel on a 2x2 plane
 * reads 4 taps of 25). Each cell's sum runs in the row-wise kernels'
 * order: the bias, then the valid taps row by row, so the bits are the
 * same as theirs. The epilogue runs on the block in lanes, then yT
 * [OH, OW, lanes] is transposed back to the output planes. */
#if defined(__GNUC__) && !defined(__clang__)
#define DW_CB 1
#define DW_CB_LANES DL_EPI_LANES
/* The lanes are handled as two vectors of 8 floats (DW_H apart): GCC
 * lowers generic vectors of 16 floats well for AVX-512 only, and for
 * AVX2 spills them to the stack and moves them through general
 * registers, 8 bytes at a time (10x the depthwise forward's time on an
 * AMD EPYC) */
#define DW_H 8
typedef float dw_vec __attribute__((vector_size(DW_H * sizeof(float))));

/* unaligned loads and stores of a vector of half the lanes (in
 * expressions: an inline function returning a vector would change the
 * ABI of the baseline clone) */
typedef float dw_vecu __attribute__((vector_size(DW_H * sizeof(float)),
				     aligned(4), may_alias));
#define dw_ld(p) (*(const dw_vecu *)(p))
#define dw_st(p, v) (*(dw_vecu *)(p) = (v))

/* Output planes of fewer cells than lanes move out of the lanes through
 * a gather over an index table kept in the scratch (the lanes' loop over
 * the plane ran scalar on planes of 2x2 and 3x3) */
#define DW_CB_TABLE DW_CB_LANES

/* Floats of the block's scratch: wT [kh kw, lanes], the bias in lanes,
 * xT, yT, and the two index tables of small planes */
/* A block runs in strips of output rows whose input and output rows
 * take about this many floats, so that they stay in L2 (a whole 112x112
 * plane's, 1.6 MB, did not) */
#define DW_CB_STRIP_FLOATS 32768

/* Output rows of a strip */
static int64_t dw_cb_rows(const struct geom *g)
{
	int64_t budget = DW_CB_STRIP_FLOATS / DW_CB_LANES - (g->kh - 1) * g->dh * g->W;
	int64_t r = budget / (g->OW + g->sh * g->W);
	return r < 1 ? 1 : r > g->OH ? g->OH : r;
}

/* Input rows of a strip, at most */
static int64_t dw_cb_in_rows(const struct geom *g)
{
	int64_t r = (dw_cb_rows(g) - 1) * g->sh + (g->kh - 1) * g->dh + 1;
	return r > g->H ? g->H : r;
}

static int64_t dw_cb_floats(const struct geom *g)
{
	int64_t OHW = g->OH * g->OW;
	int64_t tab = OHW < DW_CB_TABLE && dw_cb_rows(g) == g->OH ? OHW : 0;
	return (g->kh * g->kw + 4 + dw_cb_in_rows(g) * g->W + dw_cb_rows(g) * g->OW + tab) *
	       DW_CB_LANES + DW_CB_LANES;
}

/* Output rows [oh0, oh1) of one block into yT [oh1 - oh0, OW, lanes],
 * from xT holding the input rows from r0 on, kh x kw given as constants
 * KH x KW (0: g's). Interior cells (every tap inside the input) take the
 * unrolled sum, four cells at a time; border cells loop over their valid
 * taps. */
static inline __attribute__((always_inline)) void
dw_cb_cells(float *restrict yT, const float *restrict xT, const float *restrict wT,
	    const float *bl, const struct geom *g, int64_t oh0, int64_t oh1, int64_t r0,
	    const int KH, const int KW)
{
	const int64_t kh = KH ? KH : g->kh, kw = KW ? KW : g->kw;
	const int64_t H = g->H, W = g->W, OW = g->OW, sh = g->sh, sw = g->sw;
	const int64_t dh = g->dh, dwl = g->dw, ph = g->ph, pw = g->pw;
	const int64_t L = DW_CB_LANES;
	const dw_vec b = dw_ld(bl), c = dw_ld(bl + DW_H);
	/* interior columns [lo, hi): ow sw - pw >= 0 and
	 * ow sw - pw + (kw - 1) dw <= W - 1 */
	int64_t lo, hi;
	dl_col_range(OW, W - (kw - 1) * dwl, sw, -pw, &lo, &hi);
	if (W - (kw - 1) * dwl <= 0)
		lo = hi = 0;
	for (int64_t oh = oh0; oh < oh1; oh++) {
		int64_t ih0 = oh * sh - ph;
		int inrow = ih0 >= 0 && ih0 + (kh - 1) * dh <= H - 1;
		float *yr = yT + (oh - oh0) * OW * L;
		int64_t ow = 0;
		if (inrow) {
			for (ow = lo; ow + 4 <= hi; ow += 4) {
				/* a: lanes 0-7, e: lanes 8-15 of four cells */
				dw_vec a0 = b, a1 = b, a2 = b, a3 = b;
				dw_vec e0 = c, e1 = c, e2 = c, e3 = c;
				const float *xc = xT + ((ih0 - r0) * W + ow * sw - pw) * L;
				for (int64_t i = 0; i < kh; i++)
					for (int64_t j = 0; j < kw; j++) {
						const float *wp = wT + (i * kw + j) * L;
						dw_vec wv = dw_ld(wp), wu = dw_ld(wp + DW_H);
						const float *xs = xc + (i * dh * W + j * dwl) * L;
						a0 += wv * dw_ld(xs);
						e0 += wu * dw_ld(xs + DW_H);
						a1 += wv * dw_ld(xs + sw * L);
						e1 += wu * dw_ld(xs + sw * L + DW_H);
						a2 += wv * dw_ld(xs + 2 * sw * L);
						e2 += wu * dw_ld(xs + 2 * sw * L + DW_H);
						a3 += wv * dw_ld(xs + 3 * sw * L);
						e3 += wu * dw_ld(xs + 3 * sw * L + DW_H);
					}
				dw_st(yr + ow * L, a0);
				dw_st(yr + ow * L + DW_H, e0);
				dw_st(yr + (ow + 1) * L, a1);
				dw_st(yr + (ow + 1) * L + DW_H, e1);
				dw_st(yr + (ow + 2) * L, a2);
				dw_st(yr + (ow + 2) * L + DW_H, e2);
				dw_st(yr + (ow + 3) * L, a3);
				dw_st(yr + (ow + 3) * L + DW_H, e3);
			}
			for (; ow < hi; ow++) {
				dw_vec a0 = b, e0 = c;
				const float *xc = xT + ((ih0 - r0) * W + ow * sw - pw) * L;
				for (int64_t i = 0; i < kh; i++)
					for (int64_t j = 0; j < kw; j++) {
						const float *wp = wT + (i * kw + j) * L;
						const float *xs = xc + (i * dh * W + j * dwl) * L;
						a0 += dw_ld(wp) * dw_ld(xs);
						e0 += dw_ld(wp + DW_H) * dw_ld(xs + DW_H);
					}
				dw_st(yr + ow * L, a0);
				dw_st(yr + ow * L + DW_H, e0);
			}
		}
		/* the border cells: all of the row's, or those outside
		 * [lo, hi); over the taps [i0, i1) x [j0, j1) that fall
		 * inside the input */
		int64_t i0, i1;
		dl_col_range(kh, H, dh, ih0, &i0, &i1);
		for (ow = 0; ow < OW; ow++) {
			if (inrow && ow == lo && hi > lo)
				ow = hi;
			if (ow >= OW)
				break;
			int64_t iw0 = ow * sw - pw, j0, j1;
			dl_col_range(kw, W, dwl, iw0, &j0, &j1);
			dw_vec a0 = b, e0 = c;
			for (int64_t i = i0; i < i1; i++) {
				int64_t xr = (ih0 + i * dh - r0) * W + iw0;
				const float *wr = wT + i * kw * L;
				for (int64_t j = j0; j < j1; j++) {
					const float *xs = xT + (xr + j * dwl) * L;
					a0 += dw_ld(wr + j * L) * dw_ld(xs);
					e0 += dw_ld(wr + j * L + DW_H) * dw_ld(xs + DW_H);
				}
			}
			dw_st(yr + ow * L, a0);
			dw_st(yr + ow * L + DW_H, e0);
		}
	}
}

DL_CLONES static void dw_cb_cells_any(float *yT, const float *xT, const float *wT,
				      const float *bl, const struct geom *g,
				      int64_t oh0, int64_t oh1, int64_t r0)
{
	if (g->kh == 3 && g->kw == 3)
		dw_cb_cells(yT, xT, wT, bl, g, oh0, oh1, r0, 3, 3);
	else if (g->kh == 5 && g->kw == 5)
		dw_cb_cells(yT, xT, wT, bl, g, oh0, oh1, r0, 5, 5);
	else
		dw_cb_cells(yT, xT, wT, bl, g, oh0, oh1, r0, 0, 0);
}

/* The 16 x 16 transpose: rows r < 16 read from src + soff[r] (soff NULL:
 * src + r ss), rows r < nst of the transpose written to dst + r ds; as
 * four 8 x 8 blocks (tr8). */
static inline __attribute__((always_inline)) void
dw_tr16(float *dst, int64_t ds, int nst, const float *src, const int *soff, int64_t ss)
{
	for (int rb = 0; rb < 16; rb += 8)
		for (int cb = 0; cb < 16 && cb < nst; cb += 8) {
			const float *rows[8];
			for (int r = 0; r < 8; r++)
				rows[r] = src + (soff ? soff[rb + r] : (rb + r) * ss) + cb;
			tr8(dst + cb * ds + rb, ds, nst - cb, rows);
		}
}

/* xT [H W, lanes] from the planes of lanes l < L at x + off[l] (the
 * other lanes repeat the last one's): 16 cells at a time through
 * dw_tr16, the rest one by one */
DL_CLONES static void dw_cb_in(float *restrict xT, const float *restrict x,
			       const int *restrict off, int64_t HW)
{
	int64_t p = 0;
	for (; p + DW_CB_LANES <= HW; p += DW_CB_LANES) {
		dw_tr16(xT + p * DW_CB_LANES, DW_CB_LANES, DW_CB_LANES, x + p, off, 0);
	}
	for (; p < HW; p++) {
		#pragma omp simd
		for (int l = 0; l < DW_CB_LANES; l++)
			xT[p * DW_CB_LANES + l] = x[off[l] + p];
	}
}

/* dst[k] = src[idx[k]], k < n: the transposes of small planes */
DL_CLONES static void dw_cb_gather(float *restrict dst, const float *restrict src,
				   const int *restrict idx, int64_t n)
{
	#pragma omp simd
	for (int64_t k = 0; k < n; k++)
		dst[k] = src[idx[k]];
}

/* cells [0, n) of planes y + l OHW, l < L, from yT [n, lanes]: 16
 * cells at a time through dw_tr16, the rest one by one */
DL_CLONES static void dw_cb_out(float *restrict y, const float *restrict yT, int L,
				int64_t OHW, int64_t n)
{
	int64_t p = 0;
	for (; p + DW_CB_LANES <= n; p += DW_CB_LANES)
		dw_tr16(y + p, OHW, L, yT + p * DW_CB_LANES, NULL, DW_CB_LANES);
	for (int l = 0; p < n && l < L; l++) {
		float *restrict yp = y + l * OHW;
		for (int64_t q = p; q < n; q++)
			yp[q] = yT[q * DW_CB_LANES + l];
	}
}

/* Output channels [oc0, oc0 + L) of image nn; ws: dw_cb_floats. fresh:
 * the block differs from the one the scratch was last set up for (its
 * weights, bias and epilogue parameters in lanes, input offsets, index
 * tables), which is kept over the images of a block. */
static void dw_cb_block(float *y, const float *x, const float *w, const float *b,
			float *ws, const struct geom *g, int64_t nn, int64_t oc0, int L,
			int fresh, const struct dl_epilogue *e, const float *res)
{
	int64_t mult = g->OC / g->C, K = g->kh * g->kw;
	int64_t HW = g->H * g->W, OHW = g->OH * g->OW;
	float *wT = ws, *bl = wT + K * DW_CB_LANES, *ep = bl + DW_CB_LANES;
	int *off = (int *)(ep + 3 * DW_CB_LANES);
	float *xT = (float *)(off + DW_CB_LANES), *yT = xT + dw_cb_in_rows(g) * g->W * DW_CB_LANES;
	int tab = OHW < DW_CB_TABLE && dw_cb_rows(g) == g->OH;
	int *otab = (int *)(yT + OHW * DW_CB_LANES);
	int64_t base = oc0 / mult * HW;
	if (fresh) {
		for (int l = 0; l < DW_CB_LANES; l++)
			off[l] = (int)((oc0 + (l < L ? l : L - 1)) / mult * HW - base);
		if (e && !res)
			dl_epilogue_lanes_prepare(e, ep, oc0, L);
		for (int l = 0; l < DW_CB_LANES; l++) {
			int64_t oc = oc0 + (l < L ? l : L - 1);
			bl[l] = b ? b[oc] : 0.0f;
			for (int64_t t = 0; t < K; t++)
				wT[t * DW_CB_LANES + l] = w[oc * K + t];
		}
		for (int l = 0; tab && l < L; l++)
			for (int64_t q = 0; q < OHW; q++)
				otab[l * OHW + q] = (int)(q * DW_CB_LANES + l);
	}
	float *yb = y + (nn * g->OC + oc0) * OHW;
	int64_t R = dw_cb_rows(g);
	for (int64_t oh0 = 0; oh0 < g->OH; oh0 += R) {
		int64_t oh1 = oh0 + R < g->OH ? oh0 + R : g->OH, n = (oh1 - oh0) * g->OW;
		/* the input rows the strip reads */
		int64_t r0 = oh0 * g->sh - g->ph, r1 = (oh1 - 1) * g->sh - g->ph + (g->kh - 1) * g->dh + 1;
		r0 = r0 < 0 ? 0 : r0;
		r1 = r1 > g->H ? g->H : r1;
		if (r1 > r0)
			dw_cb_in(xT, x + nn * g->C * HW + base + r0 * g->W, off, (r1 - r0) * g->W);
		dw_cb_cells_any(yT, xT, wT, bl, g, oh0, oh1, r0);
		if (e && !res)
			dl_epilogue_lanes(e, ep, yT, n);
		if (tab)
			dw_cb_gather(yb, yT, otab, L * OHW);
		else
			dw_cb_out(yb + oh0 * g->OW, yT, L, OHW, n);
	}
	for (int l = 0; e && res && l < L; l++)
		dl_epilogue_row(e, yb + l * OHW, res + (nn * g->OC + oc0 + l) * OHW,
				oc0 + l, OHW);
}

/* The channel-blocked kernel's block (input, output planes) at most */
#define DW_CB_MAX_FLOATS (1 << 19)

/* Where the channel-blocked kernel runs: wherever its block fits
 * DW_CB_MAX_FLOATS (and input offsets an int); beyond, the row-wise
 * kernels, which need no scratch. Measured per layer on EfficientNet-B0
 * and MobileNetV2 shapes against the row-wise and padded kernels
 * (minimum of 40 runs, 3 interleaved rounds, 1 thread, load 2.5 to 5),
 * bias + batch norm + silu fused: 3x3 stride 2 at 112 -> 56, 0.86 ->
 * 0.60 ms; 5x5 stride 2 at 56 -> 28, 1.2 -> 0.26; 5x5 at 28x28, 0.36
 * -> 0.29; 5x5 at 7x7, 0.27 -> 0.10; 5x5 at 2x2 batch 32, 6.2 -> 0.28;
 * 3x3 stride 1 at 14x14, 0.17 -> 0.07; 16x16 batch 32, 1.7 -> 0.98;
 * 28x28, 0.18 -> 0.13; 32x32 batch 32, 1.34 -> 0.94; 56x56, 0.44 ->
 * 0.32; 112x112, 0.317 -> 0.29. */
static int dw_cb(const struct geom *g)
{
	return dw_cb_floats(g) <= DW_CB_MAX_FLOATS && g->C * g->H * g->W < INT32_MAX;
}
#else
static int64_t dw_cb_floats(const struct geom *g) { (void)g; return 0; }
static int dw_cb(const struct geom *g) { (void)g; return 0; }
#endif

/* y [N, OC, OH, OW] from x [N, C, H, W], w [OC, 1, kh, kw], b [OC] or NULL;
 * output channel oc reads input channel oc / (OC / C). ws: nt slots of
 * dw_slot floats (NULL: the row-wise kernels). The channel-blocked kernel
 * where dw_cb allows; else the padded or row-wise ones. */
static void depthwise_forward(float *y, const float *x, const float *w,
			      const float *b, float *ws, const struct geom *g,
			      int nt, const struct dl_epilogue *e, const float *res)
{
	int64_t mult = g->OC / g->C, planes = g->N * g->OC;
	int64_t in_plane = g->H * g->W, out_plane = g->OH * g->OW;
	int fast3 = g->kh == 3 && g->kw == 3 && g->sw == 1 && g->dw == 1;
	int padded = ws && dw_padded_fwd(g);
	int64_t slot = dw_slot(g), Wp = dw_pad_w(g);
#ifdef DW_CB
	if (ws && dw_cb(g)) {
		int64_t blocks = (g->OC + DW_CB_LANES - 1) / DW_CB_LANES;
		int64_t prev = -1;
		/* block-major: a thread's consecutive units share a block */
		#pragma omp parallel for schedule(static) num_threads(team_of(nt)) firstprivate(prev) if (nt > 1 && planes * out_plane > 16384)
		for (int64_t u = 0; u < g->N * blocks; u++) {
			int64_t blk = u / g->N, nn = u % g->N, oc0 = blk * DW_CB_LANES;
			int L = g->OC - oc0 < DW_CB_LANES ? (int)(g->OC - oc0) : DW_CB_LANES;
			dw_cb_block(y, x, w, b, ws + thread_id() * slot, g, nn, oc0, L,
				    blk != prev, e, res);
			prev = blk;
		}
		return;
	}
#endif
	#pragma omp parallel for schedule(static) num_threads(team_of(nt)) if (nt > 1 && planes * out_plane > 16384)
	for (int64_t p = 0; p < planes; p++) {
		int64_t nn = p / g->OC, oc = p % g->OC;
		float *yp = y + p * out_plane;
		const float *xc = x + (nn * g->C + oc / mult) * in_plane;
		const float *wp = w + oc * g->kh * g->kw;
		if (padded) {
			float *xp = ws + thread_id() * slot, *yw = xp + dw_pad_plane(g);
			dw_pad_in(xp, xc, g);
			dw_padded_forward(yw, xp, wp, b ? b[oc] : 0.0f, g);
			for (int64_t oh = 0; oh < g->OH; oh++)
				memcpy(yp + oh * g->OW, yw + oh * Wp, (size_t)g->OW * sizeof *yp);
		} else if (fast3) {
			dw3x3_plane_forward(yp, xc, wp, b ? b[oc] : 0.0f, g);
		} else {
			dw_plane_forward(yp, xc, wp, b ? b[oc] : 0.0f, g);
		}
		if (e)
			dl_epilogue_row(e, yp, res ? res + p * out_plane : NULL, oc, out_plane);
	}
}

/* dw[t] += the sum of part[t Q .. t Q + Q) for each of the K taps */
DL_CLONES static void dw_reduce_partials(float *restrict dw, const float *restrict part,
					 int64_t K, int64_t Q)
{
	for (int64_t t = 0; t < K; t++) {
		float acc = 0.0f;
		#pragma omp simd reduction(+:acc)
		for (int64_t q = 0; q < Q; q++)
			acc += part[t * Q + q];
		dw[t] += acc;
	}
}

static void depthwise_backward(float *dx, float *dw, float *db,
			       const float *dy, const float *x, const float *w,
			       float *ws, const struct geom *g, int nt)
{
	int64_t mult = g->OC / g->C, K = g->kh * g->kw;
	int64_t in_plane = g->H * g->W, out_plane = g->OH * g->OW;
	int padded = dw_padded(g) && ws;
	int64_t slot = dw_slot(g), Wp = dw_pad_w(g), Q = dw_q(g);
	int parts = padded && dw && dw_partials(g);
	/* Parallel over input channels: each owns its dx planes and the
	 * weights of its `mult` output channels, so nothing is shared, and
	 * each channel's sums run in one order whatever the team. */
	#pragma omp parallel for schedule(static) num_threads(team_of(nt)) if (nt > 1 && g->N * g->OC * out_plane > 16384)
	for (int64_t c = 0; c < g->C; c++) {
		float *xp = padded ? ws + thread_id() * slot : NULL;
		float *dxp = padded ? xp + dw_pad_plane(g) : NULL;
		float *dyw = padded ? dxp + dw_pad_plane(g) : NULL;
		float *part = parts ? dyw + Q : NULL;
		if (padded)
			memset(dyw, 0, (size_t)Q * sizeof *dyw);
		if (part)
			memset(part, 0, (size_t)(mult * K * Q) * sizeof *part);
		for (int64_t nn = 0; nn < g->N; nn++) {
			const float *xc = x + (nn * g->C + c) * in_plane;
			float *dxc = dx ? dx + (nn * g->C + c) * in_plane : NULL;
			if (padded) {
				dw_pad_in(xp, xc, g);
				if (dxc)
					memset(dxp, 0, (size_t)dw_pad_plane(g) * sizeof *dxp);
			}
			for (int64_t oc = c * mult; oc < (c + 1) * mult; oc++) {
				const float *dyp = dy + (nn * g->OC + oc) * out_plane;
				if (db) {
					float s = 0.0f;
					for (int64_t q = 0; q < out_plane; q++)
						s += dyp[q];
					db[oc] += s;
				}
				if (!padded) {
					dw_plane_backward(dxc, dw ? dw + oc * K : NULL, dyp, xc,
							  w + oc * K, g);
					continue;
				}
				/* the columns beyond OW (and cells beyond OH Wp)
				 * stay 0 from the memset above */
				for (int64_t oh = 0; oh < g->OH; oh++)
					memcpy(dyw + oh * Wp, dyp + oh * g->OW,
					       (size_t)g->OW * sizeof *dyw);
				dw_padded_taps(part ? part + (oc - c * mult) * K * Q : NULL,
					       dw ? dw + oc * K : NULL, dxc ? dxp : NULL,
					       dyw, xp, w + oc * K, g);
			}
			/* dx [H, W] += dxp, the cells that lie in the padded plane */
			if (padded && dxc) {
				int64_t h, wd;
				dw_pad_extent(g, &h, &wd);
				for (int64_t ih = 0; ih < h; ih++) {
					const float *restrict src = dxp + (ih + g->ph) * Wp + g->pw;
					float *restrict dst = dxc + ih * g->W;
					#pragma omp simd
					for (int64_t iw = 0; iw < wd; iw++)
						dst[iw] += src[iw];
				}
			}
		}
		for (int64_t oc = c * mult; part && oc < (c + 1) * mult; oc++)
			dw_reduce_partials(dw + oc * K, part + (oc - c * mult) * K * Q, K, Q);
	}
}

/* ---- GEMM-lowered kernels ---- */

/* Threads: the work is cut into units (image x group, or finer), shared by
 * OpenMP threads that each run their GEMMs with BLAS single-threaded.
 * Debian's OpenBLAS is the pthreads build: its threads and OpenMP's (which
 * spin for a while when idle) would otherwise take turns on the same cores
 * between every im2col and GEMM, several times slower on two cores. With
 * fewer units than threads the units run in turn, BLAS threaded. */
static int blas_serial_begin(int nt)
{
	/* the units are shared among the threads: each product runs whole,
	 * whatever the team's size, so its bits do not change with it */
	dl_sgemm_whole(nt > 1);
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
	if (nt > 1) {
		int t = openblas_get_num_threads();
		if (t != 1)
			openblas_set_num_threads(1);
		return t;
	}
#endif
	(void)nt;
	return 1;
}

static void blas_serial_end(int saved)
{
	dl_sgemm_whole(0);
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
	if (saved != 1)
		openblas_set_num_threads(saved);
#endif
	(void)saved;
}

static int thread_id(void)
{
#ifdef _OPENMP
	return omp_get_thread_num();
#else
	return 0;
#endif
}

/* OS threads for a loop planned for nt slots: fewer while another process
 * holds a core (src/engine/threads.c); the work's partition stays nt's. */
static int team_of(int nt)
{
	int t = dl_threads_used();
	return t < nt ? t : nt;
}

static int team_size(void)
{
#ifdef _OPENMP
	return omp_get_num_threads();
#else
	return 1;
#endif
}

/* Batch 1 splits a layer into fewer units (tiles of output rows, blocks
 * of Winograd tiles) than threads, or into a few that do not divide
 * evenly: resnet18 at 224x224 had 1 Winograd block in every layer from
 * layer2 on, so one thread ran each of them while the other waited at the
 * barrier (perf: 53% of the 2-thread run's samples in libgomp's wait
 * loop). Then the nt slots share every unit instead: each fills its part
 * of the columns (input channels), and after a barrier computes its part
 * of the output channels, a GEMM of OCg / nt rows that packs only its
 * rows of the weights (split by columns, each thread packed all of them).
 * The parts follow nt, the count asked for, so the bits do not change
 * when fewer threads run them. */
static int shared_units(int64_t units, int nt)
{
	return nt > 1 && (units < nt || (units % nt != 0 && units < 4 * nt));
}

/* Part s of nt of n rows: [*lo, *hi), in steps of 16 rows (BLAS panels)
 * when there are enough. */
static void part_of(int64_t n, int nt, int s, int64_t *lo, int64_t *hi)
{
	int64_t step = (n + nt - 1) / nt;
	if (n >= 16 * nt)
		step = (step + 15) / 16 * 16;
	*lo = s * step < n ? s * step : n;
	*hi = *lo + step < n ? *lo + step : n;
}

/* Convolutions below this many multiply-adds run on one thread, without
 * a parallel region: at batch 1 (mobilenet_v2's and efficientnet_b0's
 * 1x1 layers at 7x7 and 14x14) the GEMM takes tens of microseconds, about
 * what waking a worker and its barrier cost. */
#define CONV_SPLIT_MACS (1L << 21)

/* Floats of im2col columns per tile: a tile of grid rows whose columns
 * stay in L2 between im2col and the GEMM that reads them, yet wide enough
 * for the GEMM to run at speed (tuned on a 1 MB L2). */
#define TILE_FLOATS ((int64_t)192 * 1024)

/* Grid rows per tile, for K rows of columns and grid rows of width. */
static int64_t tile_rows(int64_t K, int64_t rows, int64_t width)
{
	int64_t r = TILE_FLOATS / (K * width);
	if (r < 1)
		r = 1;
	return r > rows ? rows : r;
}

/* The im2col grid of a layer (the output of a convolution, the input of a
 * transposed one), the rows of its columns (K), and its tile. */
static int64_t grid_rows(const struct geom *g)
{
	return g->transposed ? g->H : g->OH;
}

static int64_t grid_width(const struct geom *g)
{
	return g->transposed ? g->W : g->OW;
}

static int64_t col_rows(const struct geom *g)
{
	return (g->transposed ? cout_g(g) : cin_g(g)) * g->kh * g->kw;
}

static int64_t tile_of(const struct geom *g)
{
	return tile_rows(col_rows(g), grid_rows(g), grid_width(g));
}

/* ---- Winograd F(2x2, 3x3) and F(4x4, 3x3) ---- */

/* 3x3 convolutions with unit stride and dilation run as Winograd's
 * F(m x m, 3x3): each m x m output tile is A^T [(G w G^T) . (B^T d B)] A
 * with d its (m + 2) x (m + 2) input patch, so the convolution becomes
 * (m + 2)^2 GEMMs [OCg, Cg] x [Cg, tiles]: per output and (c, oc) pair,
 * 16/4 = 4 multiply-adds for F(2x2), 36/16 = 2.25 for F(4x4), 9 for
 * im2col. F(4x4) uses Lavin and Gray's points 0, 1, -1, 2, -2 (and
 * infinity): its transforms multiply by 2, 4, 5, 8 and 1/4, 1/6, 1/12,
 * 1/24, so it loses a few more bits than F(2x2), whose transforms only
 * add and halve (measured against float64 below).
 *
 * The rule (wino_m), which shapes take which path:
 * - Winograd at all: 3x3 kernel, stride 1, dilation 1, not transposed,
 *   at least 16 input and output channels per group (thinner GEMMs lose
 *   more to the transforms than they save);
 * - F(4x4) when its 4x4 tiles cover the output with fewer products than
 *   F(2x2)'s 2x2 tiles, 36 ceil(OH/4) ceil(OW/4) < 16 ceil(OH/2)
 *   ceil(OW/2) (so never for 2x2 or 6x6 outputs, where 4x4 tiles are
 *   mostly padding), with at least WINO_MIN_TILES 4x4 tiles in the batch
 *   and at most WINO4_MAX_C input channels per group: against a float64
 *   sum on resnet-like data (tools/bench/wino_error.py: post-relu inputs,
 *   Kaiming-normal weights, 3 seeds) F(4x4)'s worst error is 3.6e-6 of
 *   the largest output at 16 channels, 5.6e-6 at 128, 1.0e-5 (the
 *   fixtures' tolerance) at 256 and 8.8e-6 at 512, where F(2x2) stays
 *   within 1.7e-7 to 6.2e-7 and im2col within 2.5e-7 to 3.9e-7;
 * - else F(2x2) with at least WINO_MIN_TILES 2x2 tiles in the batch;
 * - else im2col.
 * Below WINO_MIN_TILES tiles in the whole batch (resnet18's 512-channel
 * layers at 2x2 or 4x4 outputs, batch 1) the GEMMs are a few columns wide
 * and their time goes into packing the weight operand (perf: 45% of
 * resnet18's 64x64 batch-1 forward in sgemm_oncopy), which Winograd makes
 * 16/9 (36/9) larger; im2col's one GEMM packs the plain weights and needs
 * no transform, kept or not. */
#define WINO_MIN_TILES 16
#define WINO4_MAX_C 128

/* Output tile size of the Winograd path a layer takes: 4, 2, or 0 for
 * im2col. */
static int wino_m(const struct geom *g)
{
	if (g->im2col_only || g->transposed || g->kh != 3 || g->kw != 3 || g->sh != 1 || g->sw != 1 ||
	    g->dh != 1 || g->dw != 1 || cin_g(g) < 16 || cout_g(g) < 16 || depthwise(g))
		return 0;
	int64_t t2 = g->N * ((g->OH + 1) / 2) * ((g->OW + 1) / 2);
	int64_t t4 = g->N * ((g->OH + 3) / 4) * ((g->OW + 3) / 4);
	if (36 * t4 < 16 * t2 && t4 >= WINO_MIN_TILES && cin_g(g) <= WINO4_MAX_C)
		return 4;
	return t2 >= WINO_MIN_TILES ? 2 : 0;
}

static int winograd(const struct geom *g)
{
	return wino_m(g) != 0;
}

/* Tiles of the output: TH x TW tiles of m x m, processed in blocks of
 * whole tile rows, about WINO_TILES tiles to a block. */
#define WINO_TILES 64

struct wino {
	int m, a, nx;     /* tile m x m, input patch a x a (a = m + 2), nx = a^2 */
	int64_t TH, TW;   /* tiles down and across */
	int64_t rows, T;  /* tile rows per block; tiles per block */
	int64_t L;        /* floats of a zero-padded input row: m TW + 2 */
};

static struct wino wino_plan(const struct geom *g)
{
	struct wino p;
	p.m = wino_m(g) == 4 ? 4 : 2;
	p.a = p.m + 2;
	p.nx = p.a * p.a;
	p.TH = (g->OH + p.m - 1) / p.m;
	p.TW = (g->OW + p.m - 1) / p.m;
	p.L = p.m * p.TW + 2;
	p.rows = WINO_TILES / p.TW;
	if (p.rows < 1)
		p.rows = 1;
	/* blocks run on across images only when an image has fewer than
	 * WINO_MIN_TILES tiles: at small sizes (resnet18's 512 channels at
	 * 2x2) one image has a tile or two, and GEMMs that thin spend their
	 * time on each call's overhead. Otherwise a block holds tile rows of
	 * one image, cut the same way whatever the batch (when these GEMMs
	 * were OpenBLAS's, whose sums depend on a column's place in the
	 * product, that kept a sample's output the same bits alone and in a
	 * batch; dl_sgemm_rows's do not depend on it) */
	if (p.TH * p.TW >= WINO_MIN_TILES && p.rows > p.TH)
		p.rows = p.TH;
	if (p.rows > g->N * p.TH)
		p.rows = g->N * p.TH > 0 ? g->N * p.TH : 1;
	p.T = p.rows * p.TW;
	return p;
}

/* Channels per vector of the input transforms (wino_input4, wino_input2). */
#define WINO_CV 16

/* Floats of each of pad and rt: a zero-padded input rows and a rows of
 * their transform, [a, L, WINO_CV] (the input transforms take WINO_CV
 * channels at a time). */
static int64_t wino_pad_floats(const struct wino *p)
{
	return p->a * p->L * WINO_CV;
}

/* Floats of out: m output rows ([m, m TW]; F(4x4) the whole block's,
 * and A^T m: [40, T]). */
static int64_t wino_out_floats(const struct wino *p)
{
	return p->m == 4 ? 40 * p->T : 4 * p->TW;
}

/* Per thread: V [nx, T, Cg], M [nx, OCg, T], pad and rt
 * (wino_pad_floats each), out (wino_out_floats), and one V[xi] packed
 * for dl_sgemm_rows. */
static int64_t wino_slot(const struct geom *g)
{
	struct wino p = wino_plan(g);
	return p.nx * (cin_g(g) + cout_g(g)) * p.T + 2 * wino_pad_floats(&p) +
	       wino_out_floats(&p) + dl_sgemm_rows_floats((int)p.T, (int)cin_g(g));
}

/* U [nx, OC, Cg] = G w G^T for every (oc, c): shared by the threads. */
static int64_t shared_floats(const struct geom *g)
{
	if (!winograd(g))
		return 0;
	return wino_plan(g).nx * g->OC * cin_g(g);
}

/* Pointwise layers on planes below PW_SMALL cells (densenet121's dense
 * blocks 3 and 4 at 64x64 input: 4x4 and 2x2, up to 1024 channels) run
 * one GEMM per group of images at batch > 1 instead of one per image: a
 * GEMM of 4 or 16 columns packs the whole weight matrix for a sliver of
 * work. The group's inputs are gathered into [C, n HW] columns and its
 * output [OC, n HW] scattered back; PW_COLS columns per GEMM at most,
 * and as many as the slot backward plans for the private weight gradient
 * ([OC, C]) holds, so the workspace stays as planned before. */
#define PW_SMALL 64
#define PW_COLS 256

/* Images per GEMM of the batched pointwise forward; 0: per image. */
static int64_t pw_group(const struct geom *g)
{
	int64_t P = g->H * g->W;
	if (!pointwise(g) || g->transposed || g->G != 1 || P >= PW_SMALL || P < 1 ||
	    g->N < 2)
		return 0;
	int64_t n = PW_COLS / P, fit = g->OC * g->C / ((g->C + g->OC) * P);
	n = n < g->N ? n : g->N;
	n = n < fit ? n : fit;   /* within the slot backward plans anyway */
	return n >= 2 ? n : 0;
}

/* Scratch floats per thread: a tile of im2col columns (or a Winograd
 * block), then a private weight gradient for backward, summed over the
 * threads at the end. */
static int64_t slot_floats(const struct geom *g)
{
	int64_t wsize = g->OC * cin_g(g) * g->kh * g->kw;   /* = C OCg kh kw */
	if (depthwise(g))
		return dw_slot(g);
	if (pointwise(g))   /* also pw_forward_batched's columns and product */
		return wsize;
	if (g->adjoint)     /* a Winograd forward alone */
		return wino_slot(g);
	int64_t bwd = col_rows(g) * tile_of(g) * grid_width(g) + wsize;
	/* forward uses the columns alone, or a Winograd block */
	return winograd(g) && wino_slot(g) > bwd ? wino_slot(g) : bwd;
}

/* Threads the planned scratch allows for. */
static int threads_for(const struct dl_node *n, const struct geom *g)
{
	int nt = dl_threads();
	int64_t slot = slot_floats(g);
	if (slot > 0) {
		int64_t fit = ((int64_t)(n->ws_bytes / sizeof(float)) - shared_floats(g)) / slot;
		if (fit < nt)
			nt = fit < 1 ? 1 : (int)fit;
	}
	return nt;
}

/* The weight transforms write U[xi, oc, c] = (G w[oc, c] G^T)[xi] for
 * w [OC, Cg, 3, 3]: U [nx, OC, Cg] holds the nx GEMMs' left operands
 * [OCg, Cg] as they read them (row-major, lda Cg). One oc at a time, a
 * block of WINO_WB consecutive c: the block's 9 kernel taps are first
 * gathered into 9 contiguous rows, then the transform runs as vector
 * arithmetic over c with nx contiguous stores (a scalar version, 16 or
 * 36 scattered stores per kernel, was 16-29% of resnet18's 64x64 batch-32
 * forward). */
#define WINO_WB 64

/* The 3x3 kernels of output channel oc and input channels c0 .. c0 + n - 1
 * (n <= WINO_WB) as q [9, WINO_WB]. w [OC, Cg, 3, 3]; for an adjoint
 * geometry w is the forward convolution's [C, OCg, 3, 3] (its C and OCg
 * this geometry's OC and Cg), whose kernel (c, oc) read backwards is the
 * adjoint's kernel (oc, c) within each group. */
static void wino_taps(float *restrict q, const float *restrict w, const struct geom *g,
		      int64_t oc, int64_t c0, int64_t n)
{
	int64_t Cg = cin_g(g);
	if (!g->adjoint) {
		const float *restrict k = w + (oc * Cg + c0) * 9;
		for (int64_t c = 0; c < n; c++)
			for (int j = 0; j < 9; j++)
				q[j * WINO_WB + c] = k[9 * c + j];
		return;
	}
	int64_t OCg = cout_g(g), gi = oc / OCg;
	const float *restrict k = w + ((gi * Cg + c0) * OCg + oc % OCg) * 9;
	for (int64_t c = 0; c < n; c++)
		for (int j = 0; j < 9; j++)
			q[j * WINO_WB + c] = k[c * OCg * 9 + 8 - j];
}

/* F(2x2): G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]. */
DL_CLONES static void wino_weights2(float *restrict U, const float *restrict w,
				    const struct geom *g, int nt)
{
	int64_t OC = g->OC, Cg = cin_g(g), cs = OC * Cg;   /* stride between the 16 matrices */
	#pragma omp parallel for schedule(static) num_threads(team_of(nt)) if (nt > 1)
	for (int64_t oc = 0; oc < OC; oc++)
		for (int64_t c0 = 0; c0 < Cg; c0 += WINO_WB) {
			int64_t n = Cg - c0 < WINO_WB ? Cg - c0 : WINO_WB;
			float q[9 * WINO_WB], t[12 * WINO_WB];
			wino_taps(q, w, g, oc, c0, n);
			/* t[j, i] = (G w)[i, j]: G times each column j of the kernel */
			for (int j = 0; j < 3; j++) {
				const float *restrict a = q + j * WINO_WB, *restrict b = q + (3 + j) * WINO_WB;
				const float *restrict d = q + (6 + j) * WINO_WB;
				float *restrict r = t + 4 * j * WINO_WB;
				#pragma omp simd
				for (int64_t c = 0; c < n; c++) {
					r[c] = a[c];
					r[WINO_WB + c] = 0.5f * (a[c] + b[c] + d[c]);
					r[2 * WINO_WB + c] = 0.5f * (a[c] - b[c] + d[c]);
					r[3 * WINO_WB + c] = d[c];
				}
			}
			/* U[4 i + l] = (G w G^T)[i, l]: G times each row i of G w */
			for (int i = 0; i < 4; i++) {
				const float *restrict a = t + i * WINO_WB;
				const float *restrict b = t + (4 + i) * WINO_WB;
				const float *restrict d = t + (8 + i) * WINO_WB;
				float *restrict u0 = U + (4 * i) * cs + oc * Cg + c0;
				float *restrict u1 = u0 + cs, *restrict u2 = u0 + 2 * cs;
				float *restrict u3 = u0 + 3 * cs;
				#pragma omp simd
				for (int64_t c = 0; c < n; c++) {
					u0[c] = a[c];
					u1[c] = 0.5f * (a[c] + b[c] + d[c]);
					u2[c] = 0.5f * (a[c] - b[c] + d[c]);
					u3[c] = d[c];
				}
			}
		}
}

/* F(4x4): G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6;
 * 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1]. */
DL_CLONES static void wino_weights4(float *restrict U, const float *restrict w,
				    const struct geom *g, int nt)
{
	int64_t OC = g->OC, Cg = cin_g(g), cs = OC * Cg;   /* stride between the 36 matrices */
	const float s4 = 0.25f, s6 = 1.0f / 6.0f, s12 = 1.0f / 12.0f, s24 = 1.0f / 24.0f;
	#pragma omp parallel for schedule(static) num_threads(team_of(nt)) if (nt > 1)
	for (int64_t oc = 0; oc < OC; oc++)
		for (int64_t c0 = 0; c0 < Cg; c0 += WINO_WB) {
			int64_t n = Cg - c0 < WINO_WB ? Cg - c0 : WINO_WB;
			float q[9 * WINO_WB], t[18 * WINO_WB];
			wino_taps(q, w, g, oc, c0, n);
			/* t[j, i] = (G w)[i, j]: G times each column j of the kernel */
			for (int j = 0; j < 3; j++) {
				const float *restrict a = q + j * WINO_WB, *restrict b = q + (3 + j) * WINO_WB;
				const float *restrict d = q + (6 + j) * WINO_WB;
				float *restrict r = t + 6 * j * WINO_WB;
				#pragma omp simd
				for (int64_t c = 0; c < n; c++) {
					r[c] = s4 * a[c];
					r[WINO_WB + c] = -s6 * (a[c] + b[c] + d[c]);
					r[2 * WINO_WB + c] = -s6 * (a[c] - b[c] + d[c]);
					r[3 * WINO_WB + c] = s24 * a[c] + s12 * b[c] + s6 * d[c];
					r[4 * WINO_WB + c] = s24 * a[c] - s12 * b[c] + s6 * d[c];
					r[5 * WINO_WB + c] = d[c];
				}
			}
			/* U[6 i + l] = (G w G^T)[i, l]: G times each row i of G w */
			for (int i = 0; i < 6; i++) {
				const float *restrict a = t + i * WINO_WB;
				const float *restrict b = t + (6 + i) * WINO_WB;
				const float *restrict d = t + (12 + i) * WINO_WB;
				float *restrict u0 = U + (6 * i) * cs + oc * Cg + c0;
				float *restrict u1 = u0 + cs, *restrict u2 = u0 + 2 * cs;
				float *restrict u3 = u0 + 3 * cs, *restrict u4 = u0 + 4 * cs;
				float *restrict u5 = u0 + 5 * cs;
				#pragma omp simd
				for (int64_t c = 0; c < n; c++) {
					u0[c] = s4 * a[c];
					u1[c] = -s6 * (a[c] + b[c] + d[c]);
					u2[c] = -s6 * (a[c] - b[c] + d[c]);
					u3[c] = s24 * a[c] + s12 * b[c] + s6 * d[c];
					u4[c] = s24 * a[c] - s12 * b[c] + s6 * d[c];
					u5[c] = d[c];
				}
			}
		}
}

static void wino_weights(float *U, const float *w, const struct geom *g, int nt)
{
	if (wino_plan(g).m == 4)
		wino_weights4(U, w, g, nt);
	else
		wino_weights2(U, w, g, nt);
}


/* Rows ih0 .. ih0 + a - 1 of the planes xc [n, H, W] (n <= WINO_CV
 * channels), zero-padded, the channels innermost: pad [a, L, WINO_CV],
 * pad[r, k, c] = xc[c, ih0 + r, k - pw], 0 outside the planes and for
 * c >= n. A transpose: 8 x 8 blocks in vector registers, the columns
 * and channels left over one float at a time. */
DL_CLONES static void wino_pad_chans(float *restrict pad, const float *restrict xc,
				     const struct geom *g, int64_t ih0, int a, int64_t L,
				     int n)
{
	int64_t H = g->H, W = g->W, HW = g->H * g->W, pw = g->pw;
	int64_t k0 = pw < L ? pw : L, k1 = pw + W < L ? pw + W : L;   /* columns inside */
	int n8 = n / 8 * 8;
	for (int r = 0; r < a; r++) {
		int64_t ih = ih0 + r;
		float *restrict pr = pad + r * L * WINO_CV;
		int inside = ih >= 0 && ih < H;
		if (!inside || n < WINO_CV) {
			memset(pr, 0, (size_t)(L * WINO_CV) * sizeof *pr);
		} else {
			memset(pr, 0, (size_t)(k0 * WINO_CV) * sizeof *pr);
			memset(pr + k1 * WINO_CV, 0, (size_t)((L - k1) * WINO_CV) * sizeof *pr);
		}
		if (!inside)
			continue;
		const float *restrict xr = xc + ih * W;
		int64_t k = k0;
		for (; k + 8 <= k1; k += 8)
			for (int c = 0; c < n8; c += 8)
				wino_t8(pr + k * WINO_CV + c, WINO_CV, xr + c * HW + k - pw, HW);
		for (; k < k1; k++)
			for (int c = 0; c < n8; c++)
				pr[k * WINO_CV + c] = xr[c * HW + k - pw];
		for (k = k0; k < k1; k++)
			for (int c = n8; c < n; c++)
				pr[k * WINO_CV + c] = xr[c * HW + k - pw];
	}
}

/* V[xi, t, c] = (B^T d B)[xi] for the 4x4 input patch d of each tile t
 * of tile rows [th0, th1) and channel c in [c_lo, c_hi),
 * B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]: x [Cg, H, W] (one image
 * and group), V [16, T, Cg]; pad, rt: [4, L, WINO_CV]. Across WINO_CV
 * channels as wino_input4 (at resnet18's 4x4 and 2x2 maps, 256 and 512
 * channels, a tile row is 2 or 1 tiles). */
DL_CLONES static void wino_input2(float *restrict V, float *restrict pad,
				  float *restrict rt, const float *restrict x,
				  const struct geom *g, const struct wino *p,
				  int64_t th0, int64_t th1, int64_t c_lo, int64_t c_hi)
{
	int64_t Cg = cin_g(g), TW = p->TW, T = p->T, HW = g->H * g->W;
	int64_t cs = Cg * T;   /* stride between the 16 matrices */
	int64_t LV = p->L * WINO_CV;
	for (int64_t c0 = c_lo; c0 < c_hi; c0 += WINO_CV) {
		int n = c_hi - c0 < WINO_CV ? (int)(c_hi - c0) : WINO_CV;
		for (int64_t th = th0; th < th1; th++) {
			wino_pad_chans(pad, x + c0 * HW, g, 2 * th - g->ph, 4, p->L, n);
			const float *restrict p0 = pad, *restrict p1 = pad + LV;
			const float *restrict p2 = pad + 2 * LV, *restrict p3 = pad + 3 * LV;
			float *restrict r0 = rt, *restrict r1 = rt + LV;
			float *restrict r2 = rt + 2 * LV, *restrict r3 = rt + 3 * LV;
			#pragma omp simd
			for (int64_t k = 0; k < LV; k++) {   /* rows of B^T d */
				r0[k] = p0[k] - p2[k];
				r1[k] = p1[k] + p2[k];
				r2[k] = p2[k] - p1[k];
				r3[k] = p1[k] - p3[k];
			}
			float *vt = V + (th - th0) * TW * Cg + c0;
			for (int64_t tw = 0; tw < TW; tw++)
				for (int i = 0; i < 4; i++) {   /* times B */
					const float *restrict q = rt + i * LV + 2 * tw * WINO_CV;
					float *restrict v = vt + 4 * i * cs + tw * Cg;
					#pragma omp simd
					for (int c = 0; c < n; c++) {
						float e0 = q[c], e1 = q[WINO_CV + c];
						float e2 = q[2 * WINO_CV + c], e3 = q[3 * WINO_CV + c];
						v[c] = e0 - e2;
						v[cs + c] = e1 + e2;
						v[2 * cs + c] = e2 - e1;
						v[3 * cs + c] = e1 - e3;
					}
				}
		}
	}
}

/* Times B for the n channels of one row i of one tile's B^T d: q [6,
 * WINO_CV] (the tile's six columns of the row), v the row's first
 * output, the six at stride cs. */
static inline void wino_times_b4(float *restrict v, const float *restrict q,
				 int64_t cs, int n)
{
	#pragma omp simd
	for (int c = 0; c < n; c++) {
		float e0 = q[c], e1 = q[WINO_CV + c], e2 = q[2 * WINO_CV + c];
		float e3 = q[3 * WINO_CV + c], e4 = q[4 * WINO_CV + c];
		float e5 = q[5 * WINO_CV + c];
		v[0 * cs + c] = 4.0f * e0 - 5.0f * e2 + e4;
		v[1 * cs + c] = e3 + e4 - 4.0f * (e1 + e2);
		v[2 * cs + c] = e4 - e3 + 4.0f * (e1 - e2);
		v[3 * cs + c] = e4 - e2 + 2.0f * (e3 - e1);
		v[4 * cs + c] = e4 - e2 + 2.0f * (e1 - e3);
		v[5 * cs + c] = 4.0f * e1 - 5.0f * e3 + e5;
	}
}

/* F(4x4): V[xi, t, c] = (B^T d B)[xi] for the 6x6 input patch d of each
 * tile t of tile rows [th0, th1) and channel c in [c_lo, c_hi),
 * B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0;
 * 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1]: x [Cg, H, W] (one image
 * and group), V [36, T, Cg], the GEMMs' right operands transposed; pad,
 * rt: [6, L, WINO_CV]. Vectorised across WINO_CV channels: pad holds a
 * tile row's six padded input rows with the channels innermost, rt their
 * B^T d (whole rows, contiguous), then each tile's times B works on
 * channel vectors and stores them contiguous. At densenet121's 16x16
 * and 8x8 maps a tile row is 4 or 2 tiles: the per-row vectorisation
 * this replaced had nothing to vectorise (perf: it and its row padding
 * were 23-31% of the 64x64 batch-32 forward). The same arithmetic per
 * element as before, so the same bits. */
DL_CLONES static void wino_input4(float *restrict V, float *restrict pad,
				  float *restrict rt, const float *restrict x,
				  const struct geom *g, const struct wino *p,
				  int64_t th0, int64_t th1, int64_t c_lo, int64_t c_hi)
{
	int64_t Cg = cin_g(g), TW = p->TW, T = p->T, HW = g->H * g->W;
	int64_t cs = Cg * T;   /* stride between the 36 matrices */
	int64_t LV = p->L * WINO_CV;
	for (int64_t c0 = c_lo; c0 < c_hi; c0 += WINO_CV) {
		int n = c_hi - c0 < WINO_CV ? (int)(c_hi - c0) : WINO_CV;
		for (int64_t th = th0; th < th1; th++) {
			wino_pad_chans(pad, x + c0 * HW, g, 4 * th - g->ph, 6, p->L, n);
			const float *restrict d0 = pad, *restrict d1 = pad + LV;
			const float *restrict d2 = pad + 2 * LV, *restrict d3 = pad + 3 * LV;
			const float *restrict d4 = pad + 4 * LV, *restrict d5 = pad + 5 * LV;
			float *restrict r0 = rt, *restrict r1 = rt + LV, *restrict r2 = rt + 2 * LV;
			float *restrict r3 = rt + 3 * LV, *restrict r4 = rt + 4 * LV;
			float *restrict r5 = rt + 5 * LV;
			#pragma omp simd
			for (int64_t k = 0; k < LV; k++) {
				r0[k] = 4.0f * d0[k] - 5.0f * d2[k] + d4[k];
				r1[k] = d3[k] + d4[k] - 4.0f * (d1[k] + d2[k]);
				r2[k] = d4[k] - d3[k] + 4.0f * (d1[k] - d2[k]);
				r3[k] = d4[k] - d2[k] + 2.0f * (d3[k] - d1[k]);
				r4[k] = d4[k] - d2[k] + 2.0f * (d1[k] - d3[k]);
				r5[k] = 4.0f * d1[k] - 5.0f * d3[k] + d5[k];
			}
			float *vt = V + (th - th0) * TW * Cg + c0;
			for (int64_t tw = 0; tw < TW; tw++)
				for (int i = 0; i < 6; i++) {
					const float *q = rt + i * LV + 4 * tw * WINO_CV;
					float *v = vt + 6 * i * cs + tw * Cg;
					if (n == WINO_CV)
						wino_times_b4(v, q, cs, WINO_CV);
					else
						wino_times_b4(v, q, cs, n);
				}
		}
	}
}

/* The rows of one tile row of output channel o: m rows of y (oh = m th
 * onwards, rows of them inside the output), written in place when the
 * tiles cover a row exactly (m TW = OW) and y is not added to, else into
 * out [m, m TW] and copied (added). */
static void wino_rows(float **d, float *yo, float *out, const struct geom *g,
		      const struct wino *p, int64_t rows)
{
	int direct = p->m * p->TW == g->OW && !g->adjoint;
	for (int q = 0; q < p->m; q++)
		d[q] = direct && q < rows ? yo + q * g->OW : out + q * p->m * p->TW;
}

static void wino_rows_done(float *yo, const float *out, const struct geom *g,
			   const struct wino *p, int64_t rows,
			   const struct dl_epilogue *e, const float *r, int64_t oc)
{
	if (g->adjoint)
		for (int64_t q = 0; q < rows; q++) {
			float *restrict dst = yo + q * g->OW;
			const float *restrict src = out + q * p->m * p->TW;
			#pragma omp simd
			for (int64_t k = 0; k < g->OW; k++)
				dst[k] += src[k];
		}
	else if (p->m * p->TW != g->OW)
		for (int64_t q = 0; q < rows; q++)
			memcpy(yo + q * g->OW, out + q * p->m * p->TW, (size_t)g->OW * sizeof *yo);
	if (e)
		dl_epilogue_row(e, yo, r, oc, rows * g->OW);
}

/* y tiles of tile rows [th0, th1) = A^T m A + b, A^T = [1 1 1 0;
 * 0 1 -1 -1], from M [16, OCg, T]: y [OCg, OH, OW] (one image and group),
 * b [OCg] or NULL. out: [2, 2 TW] of scratch. */
DL_CLONES static void wino_output2(float *restrict y, float *restrict out,
				   const float *restrict M, const float *b,
				   const struct geom *g, const struct wino *p,
				   int64_t th0, int64_t th1,
				   const struct dl_epilogue *e, const float *r, int64_t c0,
				   int64_t o_lo, int64_t o_hi)
{
	int64_t OCg = cout_g(g), TW = p->TW, T = p->T, OW = g->OW;
	int64_t cs = OCg * T;
	for (int64_t o = o_lo; o < o_hi; o++) {
		float bv = b ? b[o] : 0.0f;
		for (int64_t th = th0; th < th1; th++) {
			const float *restrict m = M + o * T + (th - th0) * TW;
			int64_t oh = 2 * th, rows = g->OH - oh < 2 ? g->OH - oh : 2;
			float *yo = y + (o * g->OH + oh) * OW, *d[2];
			wino_rows(d, yo, out, g, p, rows);
			float *restrict o0 = d[0], *restrict o1 = d[1];
			#pragma omp simd
			for (int64_t tw = 0; tw < TW; tw++) {
				float s0[4], s1[4];
				for (int k = 0; k < 4; k++) {
					float m0 = m[(0 + k) * cs + tw], m1 = m[(4 + k) * cs + tw];
					float m2 = m[(8 + k) * cs + tw], m3 = m[(12 + k) * cs + tw];
					s0[k] = m0 + m1 + m2;
					s1[k] = m1 - m2 - m3;
				}
				o0[2 * tw] = s0[0] + s0[1] + s0[2] + bv;
				o0[2 * tw + 1] = s0[1] - s0[2] - s0[3] + bv;
				o1[2 * tw] = s1[0] + s1[1] + s1[2] + bv;
				o1[2 * tw + 1] = s1[1] - s1[2] - s1[3] + bv;
			}
			wino_rows_done(yo, out, g, p, rows, e, r ? r + (yo - y) : NULL, c0 + o);
		}
	}
}

/* F(4x4): y tiles = A^T m A + b, A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0;
 * 0 1 1 4 4 0; 0 1 -1 8 -8 1], for output channels [o_lo, o_hi) of
 * group gi, from M [36, OCg, T] of the block of tile rows [r0, r1) of
 * the batch (pieces of one or more images): y [N, OC, OH, OW], res the
 * residual in the same layout or NULL, b [OCg] of the group or NULL.
 * out: [40, T]. Vectorised across all the block's tiles (at 8x8 and 4x4
 * maps a tile row is 2 or 1 tiles, and an image's rows 4 or 1 tiles):
 * the tiles of one channel into out (row 4 i + k: the tiles' y[i, k]),
 * then copied to y row by row. */
DL_CLONES static void wino_output4(float *restrict y, float *restrict out,
				   const float *restrict M, const float *b,
				   const struct geom *g, const struct wino *p,
				   int64_t r0, int64_t r1, int64_t gi,
				   const struct dl_epilogue *e, const float *res,
				   int64_t o_lo, int64_t o_hi)
{
	int64_t OCg = cout_g(g), TW = p->TW, T = p->T, OW = g->OW, OH = g->OH;
	int64_t cs = OCg * T, tiles = (r1 - r0) * TW;
	for (int64_t o = o_lo; o < o_hi; o++) {
		float bv = b ? b[o] : 0.0f;
		const float *restrict m = M + o * T;
		/* A^T m (rows i of the tile, columns l) into out's rows
		 * 6 i + l (24 of them: out has 16 T floats and sa 24 T) */
		float *restrict sa = out + 16 * T;
		for (int l = 0; l < 6; l++) {
			const float *restrict m0 = m + l * cs, *restrict m1 = m + (6 + l) * cs;
			const float *restrict m2 = m + (12 + l) * cs, *restrict m3 = m + (18 + l) * cs;
			const float *restrict m4 = m + (24 + l) * cs, *restrict m5 = m + (30 + l) * cs;
			float *restrict s0 = sa + l * T, *restrict s1 = sa + (6 + l) * T;
			float *restrict s2 = sa + (12 + l) * T, *restrict s3 = sa + (18 + l) * T;
			#pragma omp simd
			for (int64_t t = 0; t < tiles; t++) {
				float p12 = m1[t] + m2[t], n12 = m1[t] - m2[t];
				float p34 = m3[t] + m4[t], n34 = m3[t] - m4[t];
				s0[t] = m0[t] + p12 + p34;
				s1[t] = n12 + 2.0f * n34;
				s2[t] = p12 + 4.0f * p34;
				s3[t] = n12 + 8.0f * n34 + m5[t];
			}
		}
		for (int i = 0; i < 4; i++) {   /* times A */
			const float *restrict s0 = sa + 6 * i * T, *restrict s1 = s0 + T;
			const float *restrict s2 = s0 + 2 * T, *restrict s3 = s0 + 3 * T;
			const float *restrict s4 = s0 + 4 * T, *restrict s5 = s0 + 5 * T;
			float *restrict t0 = out + 4 * i * T, *restrict t1 = t0 + T;
			float *restrict t2 = t0 + 2 * T, *restrict t3 = t0 + 3 * T;
			#pragma omp simd
			for (int64_t t = 0; t < tiles; t++) {
				float p12 = s1[t] + s2[t], n12 = s1[t] - s2[t];
				float p34 = s3[t] + s4[t], n34 = s3[t] - s4[t];
				t0[t] = s0[t] + p12 + p34 + bv;
				t1[t] = n12 + 2.0f * n34 + bv;
				t2[t] = p12 + 4.0f * p34 + bv;
				t3[t] = n12 + 8.0f * n34 + s5[t] + bv;
			}
		}
		for (int64_t r = r0; r < r1; r++) {
			int64_t nn = r / p->TH, oh = 4 * (r % p->TH);
			int64_t rows = OH - oh < 4 ? OH - oh : 4;
			int64_t yoff = ((nn * g->OC + gi * OCg + o) * OH + oh) * OW;
			const float *restrict q = out + (r - r0) * TW;
			for (int64_t i = 0; i < rows; i++) {
				float *restrict yr = y + yoff + i * OW;
				if (g->adjoint)
					for (int64_t ow = 0; ow < OW; ow++)
						yr[ow] += q[(4 * i + ow % 4) * T + ow / 4];
				else
					for (int64_t ow = 0; ow < OW; ow++)
						yr[ow] = q[(4 * i + ow % 4) * T + ow / 4];
			}
			if (e)
				dl_epilogue_row(e, y + yoff, res ? res + yoff : NULL, gi * OCg + o,
						rows * OW);
		}
	}
}

/* Rows [lo, hi) of M[xi] [OCg, tiles] = U[xi] [OCg, Cg] x V[xi] of group
 * gi: V[xi] is [T, Cg] (the product's right operand transposed), as the
 * input transforms write channels contiguous; packed into P first. By
 * dl_sgemm_rows, whose sums do not depend on the rows asked for: the
 * threads sharing a batch-1 layer each compute their own output
 * channels (wino_forward_shared) and get the bits of one thread. At the
 * Winograd shapes it takes 0.64 to 0.95 of OpenBLAS's time, packing
 * included (tools/bench/gemm_rows.c, RESULTS.md; the least at [512, 512]
 * x [512, 16], resnet18's layer4 at batch 1, where OpenBLAS packs all of
 * U[xi] for 16 columns). */
static void wino_gemm(float *M, const float *U, const float *V, float *P,
		      const struct geom *g, const struct wino *p, int64_t gi, int64_t xi,
		      int64_t tiles, int64_t lo, int64_t hi)
{
	int64_t Cg = cin_g(g), OCg = cout_g(g);
	dl_sgemm_rows_pack(P, 1, V + xi * Cg * p->T, (int)Cg, (int)tiles, (int)Cg);
	dl_sgemm_rows((int)(hi - lo), (int)tiles, (int)Cg,
		      U + (xi * g->OC + gi * OCg + lo) * Cg, (int)Cg, P,
		      M + xi * OCg * p->T + lo * p->T, (int)p->T);
}

/* The input transforms of group gi's tile rows [r0, r1) of the batch
 * (pieces of one or more images), input channels [lo, hi), into V; pad
 * and rt the calling thread's scratch. */
static void wino_unit_input(float *V, float *pad, float *rt, const float *x,
			    const struct geom *g, const struct wino *p, int64_t gi,
			    int64_t r0, int64_t r1, int64_t lo, int64_t hi)
{
	int64_t Cg = cin_g(g);
	for (int64_t r = r0; r < r1 && lo < hi;) {
		int64_t nn = r / p->TH, th0 = r % p->TH;
		int64_t th1 = th0 + (r1 - r) < p->TH ? th0 + (r1 - r) : p->TH;
		const float *xg = x + (nn * g->C + gi * Cg) * g->H * g->W;
		if (p->m == 4)
			wino_input4(V + (r - r0) * p->TW * Cg, pad, rt, xg, g, p, th0, th1,
				    lo, hi);
		else
			wino_input2(V + (r - r0) * p->TW * Cg, pad, rt, xg, g, p, th0, th1,
				    lo, hi);
		r += th1 - th0;
	}
}

/* The output transforms of the same tile rows from M, output channels
 * [lo, hi) of group gi, with the bias and the epilogue; out the calling
 * thread's scratch. */
static void wino_unit_output(float *y, float *out, const float *M, const float *b,
			     const struct geom *g, const struct wino *p, int64_t gi,
			     int64_t r0, int64_t r1, const struct dl_epilogue *e,
			     const float *res, int64_t lo, int64_t hi)
{
	int64_t OCg = cout_g(g);
	const float *bg = b ? b + gi * OCg : NULL;
	if (p->m == 4) {
		wino_output4(y, out, M, bg, g, p, r0, r1, gi, e, res, lo, hi);
		return;
	}
	for (int64_t r = r0; r < r1 && lo < hi;) {
		int64_t nn = r / p->TH, th0 = r % p->TH;
		int64_t th1 = th0 + (r1 - r) < p->TH ? th0 + (r1 - r) : p->TH;
		int64_t yoff = (nn * g->OC + gi * OCg) * g->OH * g->OW;
		wino_output2(y + yoff, out, M + (r - r0) * p->TW, bg, g, p, th0, th1, e,
			     res ? res + yoff : NULL, gi * OCg, lo, hi);
		r += th1 - th0;
	}
}

/* wino_forward with the threads sharing each unit (shared_units): each
 * computes the whole input transform into its own slot (a few percent of
 * the layer's work), then its own output channels' rows of the nx GEMMs
 * and their output transform. Nothing passes between the threads inside
 * the layer: with the transforms split by channel and the GEMMs by xi,
 * V and M crossed from one core's cache to the other's twice per layer,
 * and resnet18's layer2 took 0.77-0.87 of one thread's time at two.
 * dl_sgemm_rows gives the bits of one thread whatever the rows. */
static void wino_forward_shared(float *y, const float *x, const float *U,
				const float *b, float *ws, const struct geom *g, int nt,
				const struct dl_epilogue *e, const float *res,
				const struct wino *pp, int64_t blocks, int64_t units)
{
	struct wino p = *pp;
	int64_t Cg = cin_g(g), OCg = cout_g(g), slot = slot_floats(g);
	int64_t R = g->N * p.TH;
	#pragma omp parallel num_threads(team_of(nt)) if (team_of(nt) > 1)
	{
		int team = team_size(), me = thread_id();
		float *V = ws + me * slot, *M = V + p.nx * Cg * p.T;
		float *pad = M + p.nx * OCg * p.T, *rt = pad + wino_pad_floats(&p);
		float *out = rt + wino_pad_floats(&p), *P = out + wino_out_floats(&p);
		int64_t lo, hi;
		part_of(OCg, team, me, &lo, &hi);
		for (int64_t u = 0; u < units && lo < hi; u++) {
			int64_t gi = u / blocks, bl = u % blocks;
			int64_t r0 = bl * p.rows, r1 = r0 + p.rows < R ? r0 + p.rows : R;
			int64_t tiles = (r1 - r0) * p.TW;
			wino_unit_input(V, pad, rt, x, g, &p, gi, r0, r1, 0, Cg);
			for (int64_t xi = 0; xi < p.nx; xi++)
				wino_gemm(M, U, V, P, g, &p, gi, xi, tiles, lo, hi);
			wino_unit_output(y, out, M, b, g, &p, gi, r0, r1, e, res, lo, hi);
		}
	}
}

/* The forward convolution by Winograd. Units: group x block of tile
 * rows, on nt threads, each with its slot of ws; U after the slots. */
static void wino_forward(float *y, const float *x, const float *w,
			 const float *Uk, const float *b, float *ws,
			 const struct geom *g, int nt,
			 const struct dl_epilogue *e, const float *res)
{
	struct wino p = wino_plan(g);
	int64_t Cg = cin_g(g), OCg = cout_g(g), slot = slot_floats(g);
	int64_t R = g->N * p.TH;   /* tile rows of the whole batch */
	int64_t blocks = (R + p.rows - 1) / p.rows, units = g->G * blocks;
	if (units == 0)
		return;
	const float *U = Uk;
	if (!U) {
		float *Uw = ws + (int64_t)nt * slot;
		wino_weights(Uw, w, g, nt);
		U = Uw;
	}
	if (shared_units(units, nt)) {
		wino_forward_shared(y, x, U, b, ws, g, nt, e, res, &p, blocks, units);
		return;
	}
	if (units < nt)
		nt = (int)units;
	#pragma omp parallel for schedule(static) num_threads(team_of(nt)) if (nt > 1)
	for (int64_t u = 0; u < units; u++) {
		int64_t gi = u / blocks, bl = u % blocks;
		/* tile rows [r0, r1) of the batch: pieces of one or more images */
		int64_t r0 = bl * p.rows, r1 = r0 + p.rows < R ? r0 + p.rows : R;
		int64_t tiles = (r1 - r0) * p.TW;
		float *V = ws + thread_id() * slot, *M = V + p.nx * Cg * p.T;
		float *pad = M + p.nx * OCg * p.T, *rt = pad + wino_pad_floats(&p);
		float *out = rt + wino_pad_floats(&p), *P = out + wino_out_floats(&p);
		wino_unit_input(V, pad, rt, x, g, &p, gi, r0, r1, 0, Cg);
		for (int xi = 0; xi < p.nx; xi++)
			wino_gemm(M, U, V, P, g, &p, gi, xi, tiles, 0, OCg);
		wino_unit_output(y, out, M, b, g, &p, gi, r0, r1, e, res, 0, OCg);
	}
}

/* y [OCg, cols] (row stride ld) += b per row */
DL_CLONES static void add_bias_rows(float *y, const float *b, int64_t OCg, int64_t cols,
			  int64_t ld)
{
	for (int64_t o = 0; o < OCg; o++) {
		float bv = b[o];
		float *r = y + o * ld;
		#pragma omp simd
		for (int64_t q = 0; q < cols; q++)
			r[q] += bv;
	}
}

/* db[oc] += sum over n, p of dy [N, OC, P] */
static void bias_backward(float *db, const float *dy, int64_t N, int64_t OC,
			  int64_t P, int nt)
{
	#pragma omp parallel for schedule(static) num_threads(team_of(nt)) if (nt > 1 && N * OC * P > 65536)
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

/* dw[k] += sum over threads of the private gradients part[t][k] */
static void reduce_partials(float *dw, const float *part, int64_t slot,
			    int64_t off, int64_t size, int used, int nt)
{
	#pragma omp parallel for schedule(static) num_threads(team_of(nt)) if (nt > 1 && size * used > 65536)
	for (int64_t k = 0; k < size; k++) {
		float s = 0.0f;
		for (int t = 0; t < used; t++)
			s += part[t * slot + off + k];
		dw[k] += s;
	}
}

/* conv_forward's unit u (image x group x tile of `rows` output rows):
 * its group, its output rows [oh0, oh1) as `cols` columns, its input
 * group's planes and where its output starts. */
struct unit {
	int64_t gi, oh0, oh1, cols;
	const float *xg;
	float *yt;
};

static struct unit unit_of(const struct geom *g, int64_t u, int64_t rows,
			   int64_t tiles, const float *x, float *y)
{
	struct unit t;
	int64_t nn = u / (g->G * tiles);
	t.gi = u / tiles % g->G;
	t.oh0 = u % tiles * rows;
	t.oh1 = t.oh0 + rows < g->OH ? t.oh0 + rows : g->OH;
	t.cols = (t.oh1 - t.oh0) * g->OW;
	t.xg = x + (nn * g->C + t.gi * cin_g(g)) * g->H * g->W;
	t.yt = y + (nn * g->OC + t.gi * cout_g(g)) * g->OH * g->OW + t.oh0 * g->OW;
	return t;
}

/* conv_forward's units (image x group x tile of rows of output) with the
 * nt slots sharing each (shared_units): the columns in slot 0, each
 * thread filling rows of them, then after a barrier its part of the
 * output channels. Pointwise layers read the input in place: no columns,
 * no barrier. */
/* Units of few columns (a plane of at most DL_SKINNY_N cells: resnet18's
 * layer4 at 64x64 input, 2x2, at any batch; efficientnet_b0's pointwise
 * layers there, and its squeeze-excitation's on 1x1, one image at a
 * time) multiply as dot products (dl_sgemm_skinny) on their columns
 * transposed, which sit after the columns in the slot (it holds the
 * weights' size again, for backward: cols <= OC), or at its start for a
 * pointwise layer, which reads the input in place: OpenBLAS packed the
 * whole weight for those few columns (51% of resnet18's 64x64 batch-1
 * forward in sgemm_oncopy, 43% of efficientnet_b0's). A pointwise layer
 * at batch > 1 runs grouped (pw_forward_batched), through OpenBLAS: its
 * bits differ from batch 1's in the last place, as other layers' did
 * (Winograd or not, the classifier's rows; dlrun-infer(1)). */
static int skinny_cols(const struct geom *g, int64_t cols)
{
	return cols <= DL_SKINNY_N && cols <= g->OC;
}

/* Units of up to ROWS_COLS columns that are not skinny (resnet18's
 * layer4 at 224x224 input, 7x7 = 49 columns of 2304 or 4608 rows, batch
 * 1; layer2's stride-2 layer at 64x64, 64 columns) multiply through
 * dl_sgemm_rows (pointwise layers too: mobilenet_v2's and
 * efficientnet_b0's at 7x7, batch 1): its panels of columns after the
 * columns in the slot (cols_end; the slot has the weights' size again,
 * for backward: hence the columns rounded to a panel at most OC), the
 * weights read in place. OpenBLAS packed all of the weights for those
 * columns (tools/bench/gemm_rows.c: dl_sgemm_rows takes 0.98 and 0.99
 * of its time at 49 columns, its packing included; 1.02 and more from
 * 196 columns, hence ROWS_COLS), and at batch 1, where the threads
 * share a unit's output channels, its sums changed with the rows each
 * thread took: these have the same bits at any thread count. */
#define ROWS_COLS 64

static int rows_cols(const struct geom *g, int64_t cols)
{
	return !skinny_cols(g, cols) && cols <= ROWS_COLS &&
	       (cols + DL_ROWS_W - 1) / DL_ROWS_W * DL_ROWS_W <= g->OC;
}

/* Columns per dl_sgemm_rows call in a unit of cols columns, 0 for
 * OpenBLAS: all of them (rows_cols), or, on a CPU with 512-bit FMA units
 * (dl_sgemm_rows_wide), any unit that is not skinny, in chunks of at most
 * OC columns rounded down to whole panels, whose panels fit the slot's
 * room past the columns (the weights' size, for backward), in layers of
 * at least 16 output channels per group and ROWS_CHUNK_MIN in all (in
 * chunks of 16 columns, mobilenet_v2's 32 -> 16 pointwise layer at
 * 112x112 took 0.28 ms against OpenBLAS's 0.21). On an AMD EPYC of family 1Ah
 * (Zen 5), batch 1 at 224x224, one thread: resnet18's 7x7 conv1 took
 * 2.6 ms against OpenBLAS's 3.5-4.0, its stride-2 3x3 layers 1.0 against
 * 1.5-1.7; the whole forward 22.0-22.7 ms against 25-30, densenet121
 * (its pointwise layers in chunks) 42.4 against 53.1 at best,
 * mobilenet_v2 7.7 against 9.2. Each output stays one chain over k,
 * whatever the chunk: the same bits at any thread count. */
#define ROWS_CHUNK_MIN 32

static int64_t rows_chunk(const struct geom *g, int64_t cols)
{
	if (skinny_cols(g, cols))
		return 0;
	if (rows_cols(g, cols))
		return cols;
	if (!dl_sgemm_rows_wide() || cout_g(g) < DL_ROWS_W || g->OC < ROWS_CHUNK_MIN)
		return 0;
	int64_t cw = g->OC / DL_ROWS_W * DL_ROWS_W;
	return cw < cols ? cw : cols;
}

/* y [OCr, n] (rows ldy apart) = w [OCr, K] times columns [K, n] (rows ldb
 * apart) on dl_sgemm_rows, chunk by chunk of cw columns packed into pan */
static void rows_chunks(float *y, int64_t ldy, const float *w, int64_t OCr, int64_t K,
			const float *B, int64_t ldb, int64_t n, int64_t cw, float *pan)
{
	for (int64_t c0 = 0; c0 < n; c0 += cw) {
		int64_t m = n - c0 < cw ? n - c0 : cw;
		dl_sgemm_rows_pack(pan, 0, B + c0, (int)ldb, (int)m, (int)K);
		dl_sgemm_rows((int)OCr, (int)m, (int)K, w, (int)K, pan, y + c0, (int)ldy);
	}
}

/* Where a unit's columns end in its slot: a pointwise layer's are its
 * input, in place, so its slot's start. Its transposed columns for
 * dl_sgemm_skinny, or its panels for dl_sgemm_rows, go there. */
static float *cols_end(const struct geom *g, float *slot, int64_t K, int64_t cols)
{
	return pointwise(g) ? slot : slot + K * cols;
}

/* bt [cols, K] rows r in [r0, r1) of col [K, cols] transposed */
static void col_transpose(float *restrict bt, const float *restrict col, int64_t K,
			  int64_t cols, int64_t r0, int64_t r1)
{
	dl_transpose(bt + r0, K, col + r0 * cols, cols, r1 - r0, cols, 0);
}

static void conv_forward_shared(float *y, const float *x, const float *w,
				const float *b, float *ws, const struct geom *g, int nt,
				const struct dl_epilogue *e, const float *res,
				const struct win *wn, int64_t rows, int64_t tiles,
				int64_t units)
{
	int64_t Cg = cin_g(g), OCg = cout_g(g), K = Cg * g->kh * g->kw;
	int64_t P = g->OH * g->OW, slot = slot_floats(g);
	int pw1 = pointwise(g);
	int saved = blas_serial_begin(nt);
	#pragma omp parallel num_threads(team_of(nt)) if (team_of(nt) > 1)
	{
		int team = team_size(), me = thread_id();
		for (int64_t u = 0; u < units; u++) {
			struct unit un = unit_of(g, u, rows, tiles, x, y);
			int64_t gi = un.gi, oh0 = un.oh0, oh1 = un.oh1, cols = un.cols;
			const float *xg = un.xg;
			float *yt = un.yt;
			const float *B = xg + oh0 * g->OW;
			int64_t ldb = P;
			int skinny = skinny_cols(g, cols);
			int64_t cw = rows_chunk(g, cols);
			float *bt = cols_end(g, ws, K, cols);
			if (!pw1 || skinny) {
				for (int s = me; s < nt; s += team) {
					int64_t lo, hi;
					part_of(K, nt, s, &lo, &hi);
					if (!pw1)
						im2col_part(ws, xg, wn, oh0, oh1, lo, hi, 0);
					if (skinny)
						col_transpose(bt, pw1 ? B : ws, K, cols, lo, hi);
				}
				#pragma omp barrier
			}
			if (!pw1) {
				B = ws;
				ldb = cols;
			}
			/* each thread's panels: after the columns in slot 0, at
			 * the start of the others */
			float *pan = me == 0 ? cols_end(g, ws, K, cols) : ws + me * slot;
			for (int s = me; s < nt; s += team) {
				int64_t lo, hi;
				part_of(OCg, nt, s, &lo, &hi);
				if (lo >= hi)
					continue;
				float *yp = yt + lo * P;
				if (skinny)
					dl_sgemm_skinny((int)(hi - lo), (int)cols, (int)K,
							w + (gi * OCg + lo) * K, (int)K, bt,
							(int)K, yp, (int)P);
				else if (cw)
					rows_chunks(yp, P, w + (gi * OCg + lo) * K, hi - lo, K, B,
						    ldb, cols, cw, pan);
				else
					dl_sgemm(0, 0, (int)(hi - lo), (int)cols, (int)K, 1.0f,
						 w + (gi * OCg + lo) * K, (int)K, B, (int)ldb, 0.0f,
						 yp, (int)P);
				if (b)
					add_bias_rows(yp, b + gi * OCg + lo, hi - lo, cols, P);
				for (int64_t o = lo; e && o < hi; o++)
					dl_epilogue_row(e, yt + o * P, res ? res + (yt - y) + o * P : NULL,
							gi * OCg + o, cols);
			}
			/* the next unit's im2col overwrites the columns (and
			 * its transposed columns, thread 0's panels) */
			if ((!pw1 || skinny || cw) && u + 1 < units) {
				#pragma omp barrier
			}
		}
	}
	blas_serial_end(saved);
}

/* conv_forward of a pointwise layer on small planes (pw_group): the
 * batch cut into nt parts (by the count asked for, so the groups and the
 * bits do not depend on how many threads run), each part in groups of
 * pw_group images: gather [C, n P], one GEMM into [OC, n P], scatter to
 * [n, OC, P] with the bias and the epilogue per row. */
/* The columns [C, k P] of k images x_i ([C, P] each, one after the
 * other) as dl_sgemm_rows_pack packs them: panels of DL_ROWS_W columns,
 * c outermost in each, the columns past k P zero. Straight from the
 * images, in place of the gathering. */
static void pw_pack(float *restrict pan, const float *restrict x, int64_t k, int64_t P,
		    int64_t C)
{
	int64_t m = k * P;
	for (int64_t j0 = 0; j0 < m; j0 += DL_ROWS_W) {
		float *p = pan + j0 * C;
		int64_t nw = m - j0 < DL_ROWS_W ? m - j0 : DL_ROWS_W;
		if (nw < DL_ROWS_W)
			memset(p, 0, (size_t)(C * DL_ROWS_W) * sizeof *p);
		for (int64_t j = j0; j < j0 + nw;) {
			int64_t i = j / P, q = j % P;
			int64_t run = P - q < j0 + nw - j ? P - q : j0 + nw - j;
			const float *src = x + i * C * P + q;
			for (int64_t c = 0; c < C; c++)
				copy_row(p + c * DL_ROWS_W + (j - j0), src + c * P, run);
			j += run;
		}
	}
}

/* Images per product of pw_forward_batched on dl_sgemm_rows: its own
 * group (pw_group), fewer where the panels (the columns rounded up to a
 * panel) and the product do not fit the slot; 0 when one image does not */
static int64_t pw_rows_group(const struct geom *g, int64_t nb)
{
	int64_t P = g->H * g->W, slot = slot_floats(g);
	for (; nb > 0; nb--)
		if (dl_sgemm_rows_floats((int)(nb * P), (int)g->C) + g->OC * nb * P <= slot)
			return nb;
	return 0;
}

static void pw_forward_batched(float *y, const float *x, const float *w,
			       const float *b, float *ws, const struct geom *g, int nt,
			       const struct dl_epilogue *e, const float *res)
{
	int64_t P = g->H * g->W, C = g->C, OC = g->OC, nb = pw_group(g);
	int64_t slot = slot_floats(g);
	int parts = nt;
	/* on a CPU with 512-bit FMA units, on dl_sgemm_rows: the images
	 * packed straight into its panels, each output one chain over C */
	int64_t rb = dl_sgemm_rows_wide() && OC >= ROWS_CHUNK_MIN ? pw_rows_group(g, nb) : 0;
	if (rb)
		nb = rb;
	int saved = blas_serial_begin(nt);
	#pragma omp parallel for schedule(static) num_threads(team_of(nt)) if (nt > 1)
	for (int s = 0; s < parts; s++) {
		float *col = ws + thread_id() * slot;
		int64_t step = (g->N + parts - 1) / parts;
		int64_t lo = s * step < g->N ? s * step : g->N;
		int64_t hi = lo + step < g->N ? lo + step : g->N;
		for (int64_t n0 = lo; n0 < hi; n0 += nb) {
			int64_t k = hi - n0 < nb ? hi - n0 : nb, m = k * P;
			float *out = col + (rb ? dl_sgemm_rows_floats((int)m, (int)C) : C * m);
			assert(out + OC * m <= col + slot);   /* pw_group, pw_rows_group */
			if (rb) {
				pw_pack(col, x + n0 * C * P, k, P, C);
				dl_sgemm_rows((int)OC, (int)m, (int)C, w, (int)C, col, out, (int)m);
			} else {
				for (int64_t i = 0; i < k; i++) {
					const float *xi = x + (n0 + i) * C * P;
					for (int64_t c = 0; c < C; c++)
						memcpy(col + c * m + i * P, xi + c * P,
						       (size_t)P * sizeof(float));
				}
				dl_sgemm(0, 0, (int)OC, (int)m, (int)C, 1.0f, w, (int)C, col, (int)m,
					 0.0f, out, (int)m);
			}
			/* bias and epilogue on the product's rows of m cells (per
			 * image, rows of P: a call per 4 cells at 2x2 planes
			 * was 15% of efficientnet_b0's batch-32 forward), the
			 * same operations per element; a residual is added per
			 * image, where it lies */
			if (b)
				add_bias_rows(out, b, OC, m, m);
			for (int64_t o = 0; e && !res && o < OC; o++)
				dl_epilogue_row(e, out + o * m, NULL, o, m);
			for (int64_t i = 0; i < k; i++) {
				float *yi = y + (n0 + i) * OC * P;
				for (int64_t o = 0; o < OC; o++)
					memcpy(yi + o * P, out + o * m + i * P, (size_t)P * sizeof(float));
				for (int64_t o = 0; e && res && o < OC; o++)
					dl_epilogue_row(e, yi + o * P, res + (yi - y) + o * P, o, P);
			}
		}
	}
	blas_serial_end(saved);
}

/* y [N, OC, OH, OW] = conv(x [N, C, H, W], w [OC, C/G, kh, kw]) + b.
 * Units: image x group x tile of output rows. ws: nt slots. */
static void conv_forward(float *y, const float *x, const float *w,
			 const float *Uk, const float *b, float *ws,
			 const struct geom *g, int nt,
			 const struct dl_epilogue *e, const float *res)
{
	if (winograd(g)) {
		wino_forward(y, x, w, Uk, b, ws, g, nt, e, res);
		return;
	}
	int64_t Cg = cin_g(g), OCg = cout_g(g), K = Cg * g->kh * g->kw;
	int64_t P = g->OH * g->OW, slot = slot_floats(g);
	int pw1 = pointwise(g);
	/* pointwise: tiles of columns straight from the input */
	int64_t rows = pw1 ? (P < 4096 ? g->OH : (4096 + g->OW - 1) / g->OW) : tile_of(g);
	if (rows > g->OH)
		rows = g->OH;
	int64_t tiles = (g->OH + rows - 1) / rows;
	/* the same tiles, evened out: resnet18's layer4 at 224x224 (7 rows of
	 * 4608-float columns, 6 to a tile) ran as tiles of 6 rows and 1, a
	 * unit per thread at batch 1, so one thread did 6/7 of the layer */
	if (tiles > 0)
		rows = (g->OH + tiles - 1) / tiles;
	int64_t units = g->N * g->G * tiles;
	struct win wn = conv_win(g);
	if (pw_group(g) && !shared_units(units, nt)) {
		pw_forward_batched(y, x, w, b, ws, g, nt < g->N ? nt : (int)g->N, e, res);
		return;
	}
	if (shared_units(units, nt)) {
		conv_forward_shared(y, x, w, b, ws, g, nt, e, res, &wn, rows, tiles, units);
		return;
	}
	if (units < nt)
		nt = (int)units;
	if (nt < 1)
		return;
	int saved = blas_serial_begin(nt);
	#pragma omp parallel for schedule(static) num_threads(team_of(nt)) if (nt > 1)
	for (int64_t u = 0; u < units; u++) {
		struct unit un = unit_of(g, u, rows, tiles, x, y);
		int64_t gi = un.gi, oh0 = un.oh0, oh1 = un.oh1, cols = un.cols;
		const float *xg = un.xg;
		float *yt = un.yt;
		const float *B = xg + oh0 * g->OW;   /* pointwise: OH = H, OW = W */
		int64_t ldb = P;
		if (!pw1) {
			float *col = ws + thread_id() * slot;
			im2col(col, xg, &wn, oh0, oh1);
			B = col;
			ldb = cols;
		}
		int64_t cw = rows_chunk(g, cols);
		if (skinny_cols(g, cols)) {
			float *bt = cols_end(g, ws + thread_id() * slot, K, cols);
			col_transpose(bt, B, K, cols, 0, K);
			dl_sgemm_skinny((int)OCg, (int)cols, (int)K, w + gi * OCg * K, (int)K,
					bt, (int)K, yt, (int)P);
		} else if (cw) {
			rows_chunks(yt, P, w + gi * OCg * K, OCg, K, B, ldb, cols, cw,
				    cols_end(g, ws + thread_id() * slot, K, cols));
		} else
			dl_sgemm(0, 0, (int)OCg, (int)cols, (int)K, 1.0f, w + gi * OCg * K,
				 (int)K, B, (int)ldb, 0.0f, yt, (int)P);
		if (b)
			add_bias_rows(yt, b + gi * OCg, OCg, cols, P);
		for (int64_t o = 0; e && o < OCg; o++)
			dl_epilogue_row(e, yt + o * P, res ? res + (yt - y) + o * P : NULL,
					gi * OCg + o, cols);
	}
	blas_serial_end(saved);
}

/* The backward's products on dl_sgemm_rows, on a CPU with 512-bit FMA
 * units (dl_sgemm_rows_wide), in layers of at least DL_ROWS_W output
 * channels per group. OpenBLAS's Haswell kernel runs at half this CPU's
 * FMA width: on an AMD EPYC of family 1Ah (Zen 5), densenet121's 64x64
 * training step at batch 32 spent 76% of its time in conv2d, 29% of it
 * in sgemm_kernel_HASWELL, all of it the backward's products (the
 * forward's were moved in c73d943). Both products read their large
 * operand in place and pack the small one, dy, BWD_CHUNK columns at a
 * time:
 * - the weight gradient as its transpose, dW^T [K, OCg] += col [K, n]
 *   dy [OCg, n]^T, in a private [K, OCg] per slot (as OpenBLAS's private
 *   gradients were), added transposed into dW at the end: packing col^T
 *   instead costs as much as the product at OCg 32;
 * - the data gradient from the weights transposed once per call,
 *   dcol [K, n] = W^T [K, OCg] dy [OCg, n], or for a pointwise layer
 *   dx += W^T dy in place.
 * Each chunk's product is a chain of FMAs from zero added to the slot's
 * private gradient, as OpenBLAS adds its products' sums (one chain going
 * on from the running sum would add each term to a large value). The
 * slots' gradients are summed as before, so the bits do not depend on the
 * team's size. The transposed weights, the grouped backward's dW^T
 * and a packed chunk per thread come after the threads' slots
 * (bwd_xtra_floats), planned only where the CPU takes this path. */
#define BWD_CHUNK 256

static int bwd_rows_fit(const struct geom *g)
{
	return !g->transposed && !depthwise(g) && cout_g(g) >= DL_ROWS_W;
}

static int64_t bwd_pan_floats(const struct geom *g)
{
	return (cout_g(g) + DL_ROWS_W - 1) / DL_ROWS_W * DL_ROWS_W * BWD_CHUNK;
}

/* The backward's scratch past nt slots on dl_sgemm_rows: W^T, the
 * grouped backward's dW^T, a packed chunk of dy per thread; 0 where
 * OpenBLAS runs it */
static int64_t bwd_xtra_floats(const struct geom *g, int nt)
{
	if (!dl_sgemm_rows_wide() || !bwd_rows_fit(g))
		return 0;
	return 2 * g->OC * cin_g(g) * g->kh * g->kw + nt * bwd_pan_floats(g);
}

/* Rows of k per block of reduce_partials_t */
#define T_BLOCK 64

/* wt [G][K, OCg]: each group's weights [OCg, K] transposed */
static void weights_t(float *restrict wt, const float *restrict w, const struct geom *g)
{
	int64_t OCg = cout_g(g), K = cin_g(g) * g->kh * g->kw;
	for (int64_t gi = 0; gi < g->G; gi++)
		dl_transpose(wt + gi * K * OCg, OCg, w + gi * OCg * K, K, OCg, K, 0);
}

/* dwt [K, OCg] += a [K, n] (rows lda apart) dy [OCg, n]^T (rows ldy
 * apart), BWD_CHUNK columns at a time packed into pan */
static void dwt_rows(float *dwt, const float *a, int64_t lda, const float *dy, int64_t ldy,
		     int64_t OCg, int64_t K, int64_t n, float *pan)
{
	for (int64_t c0 = 0; c0 < n; c0 += BWD_CHUNK) {
		int64_t m = n - c0 < BWD_CHUNK ? n - c0 : BWD_CHUNK;
		dl_sgemm_rows_pack(pan, 1, dy + c0, (int)ldy, (int)OCg, (int)m);
		dl_sgemm_rows_add((int)K, (int)OCg, (int)m, a + c0, (int)lda, pan, dwt, (int)OCg);
	}
}

/* c [K, n] (rows ldc apart) = wt [K, OCg] dy [OCg, n] (rows ldy apart),
 * or += with add; BWD_CHUNK columns at a time packed into pan */
static void dcol_rows(float *c, int64_t ldc, const float *wt, const float *dy, int64_t ldy,
		      int64_t OCg, int64_t K, int64_t n, float *pan, int add)
{
	for (int64_t c0 = 0; c0 < n; c0 += BWD_CHUNK) {
		int64_t m = n - c0 < BWD_CHUNK ? n - c0 : BWD_CHUNK;
		dl_sgemm_rows_pack(pan, 0, dy + c0, (int)ldy, (int)m, (int)OCg);
		(add ? dl_sgemm_rows_add : dl_sgemm_rows)((int)K, (int)m, (int)OCg, wt, (int)OCg,
							  pan, c + c0, (int)ldc);
	}
}

/* dw [G][OCg, K] += the sum over `used` partials part[t] (slot floats
 * apart, from off) of [G][K, OCg], transposed: per block of T_BLOCK rows
 * of k, the partials added into the first in order (its floats then hold
 * the sum), which is added transposed into dw */
static void reduce_partials_t(float *dw, float *part, int64_t slot, int64_t off,
			      const struct geom *g, int used, int nt)
{
	int64_t OCg = cout_g(g), K = cin_g(g) * g->kh * g->kw;
	int64_t kb = (K + T_BLOCK - 1) / T_BLOCK, blocks = g->G * kb;
	#pragma omp parallel for schedule(static) num_threads(team_of(nt)) if (nt > 1 && g->OC * K * used > 65536)
	for (int64_t b = 0; b < blocks; b++) {
		int64_t gi = b / kb, k0 = b % kb * T_BLOCK;
		int64_t k1 = k0 + T_BLOCK < K ? k0 + T_BLOCK : K;
		float *restrict p = part + off + gi * K * OCg + k0 * OCg;
		for (int t = 1; t < used; t++) {
			const float *restrict q = p + t * slot;
			for (int64_t i = 0; i < (k1 - k0) * OCg; i++)
				p[i] += q[i];
		}
		dl_transpose(dw + gi * OCg * K + k0, K, p, OCg, k1 - k0, OCg, 1);
	}
}

/* The backward at planes under BWD_SMALL cells (resnet18's layer4 at
 * 64x64 input: 2x2, 512 -> 512 channels) runs one GEMM per group of
 * images instead of one per image: per image, the data gradient's GEMM
 * [K, P] = W^T [K, OCg] dy [OCg, P] packed the whole weight matrix for
 * P = 4 columns (sgemm_otcopy 22% of resnet18's 64x64 training step at
 * batch 32), and the weight gradient's [OCg, K] += dy x^T, with an inner
 * dimension of P, read and wrote all of dW per image. A group's dy is
 * gathered into [OCg, n P] and its columns (im2col, or x itself for a
 * pointwise layer) into [K, n P], side by side; the data gradient's
 * columns are scattered back per image. Up to BWD_COLS columns per group,
 * and as many as the planned scratch of every thread holds (the groups
 * run in turn, their GEMMs shared by the threads as dl_sgemm cuts them),
 * so the workspace is as planned before. */
#define BWD_SMALL 64
#define BWD_COLS 256

/* Images per group of the backward for the scratch avail; 0: per image */
static int64_t bwd_group(const struct geom *g, int64_t avail)
{
	int64_t P = g->OH * g->OW, K = cin_g(g) * g->kh * g->kw;
	if (g->transposed || depthwise(g) || P >= BWD_SMALL || P < 1 || g->N < 2)
		return 0;
	int64_t n = (BWD_COLS + P - 1) / P, fit = avail / ((K + cout_g(g)) * P);
	n = n < g->N ? n : g->N;
	n = n < fit ? n : fit;
	return n >= 2 ? n : 0;
}

/* The gathering of image i of a group (bwd_group) from n0: its dy into
 * dyc [OCg, ld], with dw its columns (im2col, or x itself) into col
 * [K, ld], at column i P */
static void group_gather(float *col, float *dyc, int64_t ld, const float *dy,
			 const float *x, const struct geom *g, const struct win *wn,
			 int64_t gi, int64_t nn, int64_t i, int dw)
{
	int64_t Cg = cin_g(g), OCg = cout_g(g), K = Cg * g->kh * g->kw;
	int64_t P = g->OH * g->OW, HW = g->H * g->W;
	const float *dyi = dy + (nn * g->OC + gi * OCg) * P;
	const float *xi = x + (nn * g->C + gi * Cg) * HW;
	for (int64_t o = 0; o < OCg; o++)
		memcpy(dyc + o * ld + i * P, dyi + o * P, (size_t)P * sizeof *dyc);
	if (!dw)
		return;
	if (pointwise(g))
		for (int64_t c = 0; c < Cg; c++)
			memcpy(col + c * ld + i * P, xi + c * P, (size_t)P * sizeof *col);
	else
		im2col_part(col + i * P, xi, wn, 0, g->OH, 0, K, ld);
}

/* Column i P of dcol [K, ld], the data gradient of image nn of group gi,
 * added into dx (col2im, or dx itself for a pointwise layer) */
static void group_scatter(float *dx, const float *col, int64_t ld, const struct geom *g,
			  const struct win *wn, int64_t gi, int64_t nn, int64_t i)
{
	int64_t Cg = cin_g(g), P = g->OH * g->OW, HW = g->H * g->W;
	float *dxi = dx + (nn * g->C + gi * Cg) * HW;
	if (!pointwise(g)) {
		col2im(dxi, col + i * P, wn, 0, g->OH, ld);
		return;
	}
	for (int64_t c = 0; c < Cg; c++) {
		const float *restrict src = col + c * ld + i * P;
		float *restrict dst = dxi + c * P;
		#pragma omp simd
		for (int64_t q = 0; q < P; q++)
			dst[q] += src[q];
	}
}

/* conv_backward_groups on dl_sgemm_rows (xtra, bwd_xtra_floats: W^T,
 * dW^T, a packed chunk per slot): the nt slots share each group of
 * images. Slot s gathers its run of the group's images, and after a
 * barrier computes its rows (of K) of dW^T and of the data gradient's
 * columns, from its own packing of dy; after a barrier it scatters its
 * images' columns back. Each row's sums do not depend on the rows a slot
 * takes: the bits depend on the groups (which follow nt, bwd_group), not
 * on the team. In OpenBLAS's grouped backward one thread gathered and
 * scattered while the other waited (densenet121's 4x4 3x3 layers at
 * batch 32 took longer at 2 threads than at 1). */
static void conv_backward_groups_rows(float *dx, float *dw, const float *dy,
				      const float *x, const float *w, float *ws,
				      const struct geom *g, int64_t G, float *xtra, int nt)
{
	int64_t Cg = cin_g(g), OCg = cout_g(g), K = Cg * g->kh * g->kw;
	int64_t P = g->OH * g->OW, wsize = g->OC * K;
	struct win wn = conv_win(g);
	float *col = ws, *dyc = ws + K * G * P, *wt = xtra, *dwt = xtra + wsize;
	if (dx)
		weights_t(wt, w, g);
	if (dw)
		memset(dwt, 0, (size_t)wsize * sizeof *dwt);
	#pragma omp parallel num_threads(team_of(nt)) if (team_of(nt) > 1)
	{
		int team = team_size(), me = thread_id();
		for (int64_t gi = 0; gi < g->G; gi++)
			for (int64_t n0 = 0; n0 < g->N; n0 += G) {
				int64_t n = g->N - n0 < G ? g->N - n0 : G, ld = n * P;
				for (int s = me; s < nt; s += team) {
					int64_t lo, hi;
					part_of(n, nt, s, &lo, &hi);
					for (int64_t i = lo; i < hi; i++)
						group_gather(col, dyc, ld, dy, x, g, &wn, gi, n0 + i, i,
							     dw != NULL);
				}
				#pragma omp barrier
				for (int s = me; s < nt; s += team) {
					int64_t lo, hi;
					part_of(K, nt, s, &lo, &hi);
					float *pan = xtra + 2 * wsize + s * bwd_pan_floats(g);
					if (lo < hi && dw)
						dwt_rows(dwt + (gi * K + lo) * OCg, col + lo * ld, ld, dyc,
							 ld, OCg, hi - lo, ld, pan);
					if (lo < hi && dx)
						dcol_rows(col + lo * ld, ld, wt + (gi * K + lo) * OCg, dyc,
							  ld, OCg, hi - lo, ld, pan, 0);
				}
				#pragma omp barrier
				if (!dx)
					continue;
				for (int s = me; s < nt; s += team) {
					int64_t lo, hi;
					part_of(n, nt, s, &lo, &hi);
					for (int64_t i = lo; i < hi; i++)
						group_scatter(dx, col, ld, g, &wn, gi, n0 + i, i);
				}
				#pragma omp barrier
			}
	}
	if (dw)
		reduce_partials_t(dw, dwt, 0, 0, g, 1, nt);
}

/* conv_backward's data and weight gradients in groups of G images
 * (bwd_group), ws holding [K, G P] columns and [OCg, G P] dy */
static void conv_backward_groups(float *dx, float *dw, const float *dy,
				 const float *x, const float *w, float *ws,
				 const struct geom *g, int64_t G)
{
	int64_t Cg = cin_g(g), OCg = cout_g(g), K = Cg * g->kh * g->kw;
	int64_t P = g->OH * g->OW;
	struct win wn = conv_win(g);
	float *col = ws, *dyc = ws + K * G * P;
	for (int64_t gi = 0; gi < g->G; gi++)
		for (int64_t n0 = 0; n0 < g->N; n0 += G) {
			int64_t n = g->N - n0 < G ? g->N - n0 : G, ld = n * P;
			for (int64_t i = 0; i < n; i++)
				group_gather(col, dyc, ld, dy, x, g, &wn, gi, n0 + i, i, dw != NULL);
			/* dW_g [OCg, K] += dy [OCg, n P] col^T [n P, K] */
			if (dw)
				dl_sgemm(0, 1, (int)OCg, (int)K, (int)ld, 1.0f, dyc, (int)ld,
					 col, (int)ld, 1.0f, dw + gi * OCg * K, (int)K);
			if (!dx)
				continue;
			/* dcol [K, n P] = W_g^T dy, scattered back per image */
			dl_sgemm(1, 0, (int)K, (int)ld, (int)OCg, 1.0f, w + gi * OCg * K, (int)K,
				 dyc, (int)ld, 0.0f, col, (int)ld);
			for (int64_t i = 0; i < n; i++)
				group_scatter(dx, col, ld, g, &wn, gi, n0 + i, i);
		}
}

/* dx += conv^T(dy), dw += dy (x)^T, db += sum dy; any may be NULL.
 * Units: image x group, each walking its tiles of output rows in turn (so
 * col2im of neighbouring tiles never races). xtra: the products on
 * dl_sgemm_rows (bwd_xtra_floats), or NULL for OpenBLAS. */
static void conv_backward(float *dx, float *dw, float *db, const float *dy,
			  const float *x, const float *w, float *ws,
			  const struct geom *g, int nt, float *xtra)
{
	int64_t Cg = cin_g(g), OCg = cout_g(g), K = Cg * g->kh * g->kw;
	int64_t P = g->OH * g->OW, HW = g->H * g->W, slot = slot_floats(g);
	int64_t wsize = g->OC * K, units = g->N * g->G;
	int pw1 = pointwise(g);
	int64_t rows = pw1 ? g->OH : tile_of(g);
	struct win wn = conv_win(g);
	if (db)
		bias_backward(db, dy, g->N, g->OC, P, nt);
	int64_t G = bwd_group(g, slot * nt);
	if (G) {
		if ((dw || dx) && xtra)
			conv_backward_groups_rows(dx, dw, dy, x, w, ws, g, G, xtra, nt);
		else if (dw || dx)
			conv_backward_groups(dx, dw, dy, x, w, ws, g, G);
		return;
	}
	int par = nt > 1 && units >= nt;
	int used = par ? nt : 1;
	/* the private weight gradients sit after the columns of each slot
	 * (on dl_sgemm_rows, transposed, at any thread count) */
	int64_t part_off = slot - wsize;
	int priv = par || xtra;
	if (dw && priv)
		for (int t = 0; t < used; t++)
			memset(ws + t * slot + part_off, 0, (size_t)wsize * sizeof(float));
	if (xtra && dx)
		weights_t(xtra, w, g);
	int saved = par ? blas_serial_begin(nt) : 1;
	int team = par ? team_of(nt) : 1;
	/* slot s takes a fixed run of units, whatever the team's size, so the
	 * partial sums (and the result's bits) do not depend on it */
	#pragma omp parallel for schedule(static) num_threads(team) if (team > 1)
	for (int s = 0; s < used; s++)
	for (int64_t u = units * s / used; u < units * (s + 1) / used; u++) {
		int64_t nn = u / g->G, gi = u % g->G;
		float *col = ws + s * slot;
		const float *xg = x + (nn * g->C + gi * Cg) * HW;
		const float *dyg = dy + (nn * g->OC + gi * OCg) * P;
		const float *wg = w + gi * OCg * K;
		float *dxg = dx ? dx + (nn * g->C + gi * Cg) * HW : NULL;
		float *dwg = !dw ? NULL : priv ? col + part_off + gi * OCg * K : dw + gi * OCg * K;
		const float *wtg = xtra ? xtra + gi * K * OCg : NULL;
		float *pan = xtra ? xtra + 2 * wsize + s * bwd_pan_floats(g) : NULL;
		if (pw1 && xtra) {
			/* dW_g^T [Cg, OCg] += x_g [Cg, HW] dy_g^T; dx_g += W_g^T dy_g */
			if (dwg)
				dwt_rows(dwg, xg, P, dyg, P, OCg, K, P, pan);
			if (dxg)
				dcol_rows(dxg, P, wtg, dyg, P, OCg, K, P, pan, 1);
			continue;
		}
		if (pw1) {
			/* dW_g [OCg, Cg] += dy_g [OCg, HW] x_g^T [HW, Cg] */
			if (dwg)
				dl_sgemm(0, 1, (int)OCg, (int)K, (int)P, 1.0f, dyg, (int)P,
					 xg, (int)P, 1.0f, dwg, (int)K);
			/* dx_g [Cg, HW] += W_g^T [Cg, OCg] dy_g [OCg, HW] */
			if (dxg)
				dl_sgemm(1, 0, (int)K, (int)P, (int)OCg, 1.0f, wg, (int)K,
					 dyg, (int)P, 1.0f, dxg, (int)P);
			continue;
		}
		for (int64_t oh0 = 0; oh0 < g->OH; oh0 += rows) {
			int64_t oh1 = oh0 + rows < g->OH ? oh0 + rows : g->OH;
			int64_t cols = (oh1 - oh0) * g->OW;
			const float *dyt = dyg + oh0 * g->OW;
			if (dwg) {
				/* dW_g [OCg, K] += dy_t [OCg, cols] col^T [cols, K] */
				im2col(col, xg, &wn, oh0, oh1);
				if (xtra)
					dwt_rows(dwg, col, cols, dyt, P, OCg, K, cols, pan);
				else
					dl_sgemm(0, 1, (int)OCg, (int)K, (int)cols, 1.0f, dyt,
						 (int)P, col, (int)cols, 1.0f, dwg, (int)K);
			}
			if (dxg) {
				/* dcol [K, cols] = W_g^T dy_t, scattered back */
				if (xtra)
					dcol_rows(col, cols, wtg, dyt, P, OCg, K, cols, pan, 0);
				else
					dl_sgemm(1, 0, (int)K, (int)cols, (int)OCg, 1.0f, wg,
						 (int)K, dyt, (int)P, 0.0f, col, (int)cols);
				col2im(dxg, col, &wn, oh0, oh1, 0);
			}
		}
	}
	blas_serial_end(saved);
	if (dw && xtra)
		reduce_partials_t(dw, ws, slot, part_off, g, used, nt);
	else if (dw && par)
		reduce_partials(dw, ws, slot, part_off, wsize, used, nt);
}

/* Transposed: y [N, OC, OH, OW] = conv^T(x [N, C, H, W]) with
 * w [C, OC/G, kh, kw], cropped by (ph, pw) before. Units: image x group,
 * each walking its tiles of input rows in turn. */
static void convt_forward(float *y, const float *x, const float *w,
			  const float *b, float *ws, const struct geom *g, int nt)
{
	int64_t Cg = cin_g(g), OCg = cout_g(g), K = OCg * g->kh * g->kw;
	int64_t P = g->OH * g->OW, HW = g->H * g->W, slot = slot_floats(g);
	int64_t units = g->N * g->G, rows = tile_of(g);
	int pw1 = pointwise(g);
	int par = nt > 1 && units >= nt;
	struct win wn = convt_win(g);
	int saved = par ? blas_serial_begin(nt) : 1;
	#pragma omp parallel for schedule(static) num_threads(team_of(nt)) if (par)
	for (int64_t u = 0; u < units; u++) {
		int64_t nn = u / g->G, gi = u % g->G;
		const float *xg = x + (nn * g->C + gi * Cg) * HW;
		const float *wg = w + gi * Cg * K;
		float *yg = y + (nn * g->OC + gi * OCg) * P;
		if (pw1) {
			/* y_g [OCg, HW] = W_g^T [OCg, Cg] x_g [Cg, HW] */
			dl_sgemm(1, 0, (int)K, (int)HW, (int)Cg, 1.0f, wg, (int)K,
				 xg, (int)HW, 0.0f, yg, (int)HW);
		} else {
			float *col = ws + (par ? thread_id() : 0) * slot;
			memset(yg, 0, (size_t)(OCg * P) * sizeof *yg);
			for (int64_t h0 = 0; h0 < g->H; h0 += rows) {
				int64_t h1 = h0 + rows < g->H ? h0 + rows : g->H;
				int64_t cols = (h1 - h0) * g->W;
				/* col [K, cols] = W_g^T x_t, scattered into the output */
				dl_sgemm(1, 0, (int)K, (int)cols, (int)Cg, 1.0f, wg, (int)K,
					 xg + h0 * g->W, (int)HW, 0.0f, col, (int)cols);
				col2im(yg, col, &wn, h0, h1, 0);
			}
		}
		if (b)
			add_bias_rows(yg, b + gi * OCg, OCg, P, P);
	}
	blas_serial_end(saved);
}

static void convt_backward(float *dx, float *dw, float *db, const float *dy,
			   const float *x, const float *w, float *ws,
			   const struct geom *g, int nt)
{
	int64_t Cg = cin_g(g), OCg = cout_g(g), K = OCg * g->kh * g->kw;
	int64_t P = g->OH * g->OW, HW = g->H * g->W, slot = slot_floats(g);
	int64_t wsize = g->C * K, units = g->N * g->G;
	int pw1 = pointwise(g);
	int64_t rows = pw1 ? g->H : tile_of(g);
	struct win wn = convt_win(g);
	if (db)
		bias_backward(db, dy, g->N, g->OC, P, nt);
	int par = nt > 1 && units >= nt;
	int used = par ? nt : 1;
	int64_t part_off = slot - wsize;
	if (dw && par)
		for (int t = 0; t < used; t++)
			memset(ws + t * slot + part_off, 0, (size_t)wsize * sizeof(float));
	int saved = par ? blas_serial_begin(nt) : 1;
	int team = par ? team_of(nt) : 1;
	/* fixed runs of units per slot, as in conv_backward */
	#pragma omp parallel for schedule(static) num_threads(team) if (team > 1)
	for (int s = 0; s < used; s++)
	for (int64_t u = units * s / used; u < units * (s + 1) / used; u++) {
		int64_t nn = u / g->G, gi = u % g->G;
		float *col = ws + s * slot;
		const float *xg = x + (nn * g->C + gi * Cg) * HW;
		const float *dyg = dy + (nn * g->OC + gi * OCg) * P;
		float *dwg = !dw ? NULL : par ? col + part_off + gi * Cg * K : dw + gi * Cg * K;
		for (int64_t h0 = 0; h0 < g->H; h0 += rows) {
			int64_t h1 = h0 + rows < g->H ? h0 + rows : g->H;
			int64_t cols = (h1 - h0) * g->W;
			const float *B = dyg;   /* pointwise: dy is the column matrix */
			int64_t ldb = HW;
			if (!pw1) {
				im2col(col, dyg, &wn, h0, h1);
				B = col;
				ldb = cols;
			}
			/* dx_t [Cg, cols] += W_g [Cg, K] col [K, cols] */
			if (dx)
				dl_sgemm(0, 0, (int)Cg, (int)cols, (int)K, 1.0f, w + gi * Cg * K,
					 (int)K, B, (int)ldb, 1.0f,
					 dx + (nn * g->C + gi * Cg) * HW + h0 * g->W, (int)HW);
			/* dW_g [Cg, K] += x_t [Cg, cols] col^T [cols, K] */
			if (dwg)
				dl_sgemm(0, 1, (int)Cg, (int)K, (int)cols, 1.0f, xg + h0 * g->W,
					 (int)HW, B, (int)ldb, 1.0f, dwg, (int)K);
		}
	}
	blas_serial_end(saved);
	if (dw && par)
		reduce_partials(dw, ws, slot, part_off, wsize, used, nt);
}

/* ---- the op interface ---- */

/* The data gradient of a 3x3 convolution with unit stride and dilation
 * is a convolution of the same kind: dx = conv(dy, w') with w'[c, oc] =
 * w[oc, c] turned by 180 degrees (within each group) and padding 2 - p
 * on each side, so Winograd's forward computes it (adjoint: the
 * transform reads w' out of w, the output is added to dx) where the
 * rule (wino_m) takes the adjoint's shape, in place of the GEMM W^T dy
 * and col2im. perf of resnet-block's training step at batch 32 (8x8
 * planes of 32 channels) before: col2im 9.4% of the samples and that
 * GEMM about as much again. The adjoint runs in the layer's planned
 * scratch, which conv_infer makes large enough for it (with as many
 * input as output channels the forward's already is); on fewer threads
 * than that scratch holds, or none (then the GEMM and col2im), only when
 * called with less than planned. Its rounding is Winograd's: within
 * 1e-5 of the float64 sum, as the forward's. */
static int adjoint_of(const struct geom *g, struct geom *a)
{
	if (g->transposed || g->kh != 3 || g->kw != 3 || g->sh != 1 || g->sw != 1 ||
	    g->dh != 1 || g->dw != 1 || g->ph > 2 || g->pw > 2 || g->pha > 2 || g->pwa > 2)
		return 0;
	*a = *g;
	a->C = g->OC;
	a->OC = g->C;
	a->H = g->OH;
	a->W = g->OW;
	a->OH = g->H;
	a->OW = g->W;
	a->ph = 2 - g->ph;
	a->pw = 2 - g->pw;
	a->pha = 2 - g->pha;
	a->pwa = 2 - g->pwa;
	a->has_bias = 0;
	a->im2col_only = 0;
	a->adjoint = 1;
	return winograd(a);
}

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

	/* every GEMM operand must fit BLAS's int sizes */
	double big = 2147483647.0;
	double cols = g.transposed ? (double)OCg * kk * g.H * g.W
				   : (double)Cg * kk * g.OH * g.OW;
	if (cols > big || (double)g.C * OCg * kk > big || (double)g.OH * g.OW > big ||
	    (double)g.H * g.W > big)
		return dl_node_error(err, n, HP_KERNEL,
			"this convolution is too large for one GEMM (more than 2^31 elements per operand)");
	/* scratch: one slot per thread (see slot_floats) */
	int nt = dl_threads() > 0 ? dl_threads() : 1;
	double slot = (double)slot_floats(&g), shared = (double)shared_floats(&g);
	struct geom a;   /* the backward's Winograd adjoint, in the same scratch */
	if (adjoint_of(&g, &a) &&
	    (double)slot_floats(&a) * nt + (double)shared_floats(&a) > slot * nt + shared) {
		slot = (double)slot_floats(&a);
		shared = (double)shared_floats(&a);
	}
	/* the backward's products on dl_sgemm_rows: their scratch after the
	 * forward's slots (bwd_xtra_floats) */
	double bwd = (double)slot_floats(&g) * nt + (double)bwd_xtra_floats(&g, nt);
	if (slot * nt * sizeof(float) > (double)DL_MAX_NUMEL ||
	    bwd * sizeof(float) > (double)DL_MAX_NUMEL)
		return dl_node_error(err, n, HP_KERNEL, "this convolution needs too much scratch memory");
	n->ws_bytes = (size_t)(slot * nt + shared > bwd ? slot * nt + shared : bwd) * sizeof(float);
	n->saved_bytes = 0;
	n->keep_bytes = (size_t)shared_floats(&g) * sizeof(float);
	n->macs = g.transposed ? g.N * g.C * g.H * g.W * OCg * kk
			       : g.N * g.OC * g.OH * g.OW * Cg * kk;
	return 0;
}

static const float *bias_of(const struct dl_node *n, const struct geom *g)
{
	return g->has_bias ? n->params[1].data : NULL;
}

/* Winograd's transformed weights, kept in n->priv when the weights are
 * fixed (ctx->fixed_weights, inference only): made at the first call, so
 * a forward pass costs the 16 GEMMs and the data transforms alone (for
 * resnet18's 512->512 convolutions at 7x7 the weight transform was most
 * of the time). In training the weights change at every step, and the
 * one forward of a step transforms them into the planned scratch as
 * before. Only nodes whose n->keep the inference plan set (its budget:
 * dl_graph_plan) keep them. NULL: transform per call. */
struct wino_keep {
	const float *w;   /* the weights U was made from */
	int64_t size;     /* floats of U */
	float U[];
};

static const float *wino_kept(struct dl_node *n, const struct geom *g,
			      const struct dl_ctx *ctx, int nt)
{
	if (!winograd(g) || !ctx->fixed_weights || ctx->train || !n->keep)
		return NULL;
	const float *w = n->params[0].data;
	int64_t size = shared_floats(g);
	struct wino_keep *k = n->priv;
	if (k && k->w == w && k->size == size)
		return k->U;
	free(n->priv);
	n->priv = k = malloc(sizeof *k + (size_t)size * sizeof(float));
	if (!k)
		return NULL;
	k->w = w;
	k->size = size;
	wino_weights(k->U, w, g, nt);
	return k->U;
}

/* Whether a Winograd layer at inference whose transformed weights are
 * made at every call (not kept: the plan's budget ran out) still gains on
 * im2col: the multiply-adds it saves per (output, input) channel pair,
 * 9 OH OW - nx tiles per image, must pay for that pair's transform, which
 * writes nx floats to memory and reads 9; measured, it costs about as
 * much as WINO_TRANSFORM_MACS multiply-adds of the GEMM. resnet18's
 * 512-channel layers at 7x7 (batch 1, 224x224 input) save 185 per pair
 * and ran their transform at every call (16% of the forward); its
 * 256-channel layers at 14x14 save 980. im2col's columns fit the slot
 * planned for either path (slot_floats). */
#define WINO_TRANSFORM_MACS 512

static int wino_pays(const struct geom *g)
{
	struct wino p = wino_plan(g);
	int64_t save = g->N * (9 * g->OH * g->OW - p.nx * p.TH * p.TW);
	return save > WINO_TRANSFORM_MACS;
}

/* The scratch floats, at the end of node n's, in which its backward on
 * nt threads runs its products on dl_sgemm_rows (bwd_xtra_floats), or 0
 * for OpenBLAS: where the plan made room (the tests switch
 * dl_sgemm_rows_wide between plans) */
static int64_t bwd_xtra(const struct dl_node *n, const struct geom *g, int nt)
{
	int64_t xf = bwd_xtra_floats(g, nt), wsf = (int64_t)(n->ws_bytes / sizeof(float));
	return xf && wsf - slot_floats(g) * nt >= xf ? xf : 0;
}

/* Threads node n's backward runs the adjoint of g on (a, adjoint_of) in
 * the node's planned scratch, at most nt; 0: not at all. */
static int adjoint_threads(const struct dl_node *n, const struct geom *g, int nt,
			   struct geom *a)
{
	if (!adjoint_of(g, a))
		return 0;
	int64_t fit = ((int64_t)(n->ws_bytes / sizeof(float)) - shared_floats(a)) / slot_floats(a);
	return fit < nt ? (int)(fit > 0 ? fit : 0) : nt;
}

/* The threads conv_op_forward runs a layer on: one below CONV_SPLIT_MACS
 * multiply-adds, depthwise layers excepted, else threads_for's. */
static int forward_threads(const struct dl_node *n, const struct geom *g)
{
	if (!depthwise(g) && g->N * g->OC * g->OH * g->OW * cin_g(g) * g->kh * g->kw < CONV_SPLIT_MACS)
		return 1;
	return threads_for(n, g);
}

int dl_conv_forward_threads(const struct dl_node *n, const struct dl_shape *x)
{
	struct geom g;
	if (geometry(n, x, &g, NULL))
		return -1;
	return forward_threads(n, &g);
}

int64_t dl_conv_backward_group(const struct dl_node *n, const struct dl_shape *x)
{
	struct geom g;
	if (geometry(n, x, &g, NULL))
		return -1;
	return bwd_group(&g, slot_floats(&g) * threads_for(n, &g));
}

int dl_conv_backward_rows(const struct dl_node *n, const struct dl_shape *x)
{
	struct geom g;
	if (geometry(n, x, &g, NULL))
		return -1;
	return bwd_xtra(n, &g, threads_for(n, &g)) > 0;
}

int dl_conv_backward_adjoint(const struct dl_node *n, const struct dl_shape *x)
{
	struct geom g, a;
	if (geometry(n, x, &g, NULL))
		return -1;
	return adjoint_threads(n, &g, threads_for(n, &g), &a);
}

static void conv_op_forward(struct dl_node *n, const struct dl_tensor *in,
			    struct dl_tensor *out, struct dl_ctx *ctx)
{
	struct geom g;
	geometry(n, &in[0].shape, &g, NULL);
	/* a fused epilogue (engine/fuse.c) adds the bias itself */
	const struct dl_epilogue *e = ctx->train || g.transposed ? NULL : n->epi;
	const float *w = n->params[0].data, *b = e ? NULL : bias_of(n, &g);
	const float *res = e ? e->resp : NULL;
	int nt = forward_threads(n, &g);
	if (g.transposed)
		convt_forward(out->data, in[0].data, w, b, ctx->ws, &g, nt);
	else if (depthwise(&g))
		depthwise_forward(out->data, in[0].data, w, b, ctx->ws, &g, nt, e, res);
	else {
		const float *U = wino_kept(n, &g, ctx, nt);
		if (!U && ctx->fixed_weights && !ctx->train && winograd(&g) && !wino_pays(&g))
			g.im2col_only = 1;
		conv_forward(out->data, in[0].data, w, U, b, ctx->ws, &g, nt, e, res);
	}
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
	int nt = threads_for(n, &g);
	(void)out;
	if (g.transposed)
		convt_backward(dx, dw, db, dout, in[0].data, w, ctx->ws, &g, nt);
	else if (depthwise(&g))
		depthwise_backward(dx, dw, db, dout, in[0].data, w, ctx->ws, &g, nt);
	else {
		struct geom a;
		int nta = dx ? adjoint_threads(n, &g, nt, &a) : 0;
		if (nta) {
			wino_forward(dx, dout, w, NULL, NULL, ctx->ws, &a, nta, NULL, NULL);
			dx = NULL;
		}
		int64_t xf = bwd_xtra(n, &g, nt);
		float *xtra = xf ? (float *)ctx->ws + n->ws_bytes / sizeof(float) - xf : NULL;
		conv_backward(dx, dw, db, dout, in[0].data, w, ctx->ws, &g, nt, xtra);
	}
}

static const struct dl_op_desc conv1d_op = {
	.name = "conv1d",
	.doc = "y[o, l] = b[o] + sum_c,k w[o, c, k] x[c, l*stride - pad + k*dilation]",
	.min_in = 1, .max_in = 1,
	.hp = conv_hp, .n_hp = N_HP,
	.infer = conv_infer, .forward = conv_op_forward, .backward = conv_op_backward,
	.params = "weight [out_channels, in_channels/groups, kernel_size], bias [out_channels]",
	.flags = DL_OP_BWD_NO_OUTPUT,
	.fuse = DL_FUSE_HEAD_CHANNELS,
};

static const struct dl_op_desc conv2d_op = {
	.name = "conv2d",
	.doc = "y[o, h, w] = b[o] + sum_c,i,j w[o, c, i, j] x[c, h*sh - ph + i*dh, w*sw - pw + j*dw]",
	.min_in = 1, .max_in = 1,
	.hp = conv_hp, .n_hp = N_HP,
	.infer = conv_infer, .forward = conv_op_forward, .backward = conv_op_backward,
	.params = "weight [out_channels, in_channels/groups, kh, kw], bias [out_channels]",
	.flags = DL_OP_BWD_NO_OUTPUT,
	.fuse = DL_FUSE_HEAD_CHANNELS,
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
	.flags = DL_OP_BWD_NO_OUTPUT,
};

static const struct dl_op_desc conv_transpose2d_op = {
	.name = "conv_transpose2d",
	.doc = "y[o, h*sh + i*dh - ph, w*sw + j*dw - pw] += w[c, o, i, j] x[c, h, w]; y += b",
	.min_in = 1, .max_in = 1,
	.hp = conv_hp, .n_hp = N_HP_T,
	.infer = conv_infer, .forward = conv_op_forward, .backward = conv_op_backward,
	.params = "weight [in_channels, out_channels/groups, kh, kw], bias [out_channels]",
	.flags = DL_OP_BWD_NO_OUTPUT,
};

const struct dl_op_desc *const dl_ops_conv[] = {
	&conv1d_op, &conv2d_op, &conv_transpose1d_op, &conv_transpose2d_op, NULL,
};
