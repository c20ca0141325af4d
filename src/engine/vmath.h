/* What vectorised hot loops share, in the ops, the fused epilogues and
 * the optimizer: the target_clones attribute (DL_CLONES), and
 * branch-free float erf and exp for loops that `omp simd` vectorises:
 * glibc's scalar erff branches on the argument's range and stops the
 * loop from vectorising (GELU over [128, 3072] took about 10 ns an
 * element, __erff 53% of it). Plain IEEE operations only, so every
 * target_clones variant gives the same bits (the build does not contract
 * to FMA: -std=c11). */
#ifndef DL_VMATH_H
#define DL_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Hot loops are compiled for AVX-512, AVX2 and baseline x86-64, the best
 * picked when the program loads (GCC's target_clones); `omp simd` lets
 * them vectorise (reductions included) without -O3 or -ffast-math.
 * Elsewhere: plain C. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && \
	defined(__x86_64__) && defined(__linux__)
#define DL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DL_CLONES
#endif

/* erf(x): x P(x^2) / Q(x^2) on x clamped to [-4, 4] (erf(4) rounds to 1
 * in float), the rational form of Eigen's and XLA's float erf; within 4
 * ulp of erf, 4.5e-7 absolute (tools/gen_gelu_fixtures.py checks it
 * against PyTorch's gelu). NaN stays NaN. */
static inline float dl_erff(float x)
{
	x = x < -4.0f ? -4.0f : x;
	x = x > 4.0f ? 4.0f : x;
	float x2 = x * x;
	float p = -2.72614225801306e-10f;
	p = p * x2 + 2.77068142495902e-08f;
	p = p * x2 + -2.10102402082508e-06f;
	p = p * x2 + -5.69250639462346e-05f;
	p = p * x2 + -7.34990630326855e-04f;
	p = p * x2 + -2.95459980854025e-03f;
	p = p * x2 + -1.60960333262415e-02f;
	float q = -1.45660718464996e-05f;
	q = q * x2 + -2.13374055278905e-04f;
	q = q * x2 + -1.68282697438203e-03f;
	q = q * x2 + -7.37332916720468e-03f;
	q = q * x2 + -1.42647390514189e-02f;
	return x * p / q;
}

/* exp(x) over the whole float range: |x| clamped to 87 on its bits (an
 * integer select: a float compare against a constant let GCC thread a
 * path on which the result was constant, whose division kept the AVX2
 * loop scalar), then Cephes' reduction r = x - n ln 2 in two parts with n
 * rounded by the 1.5 * 2^23 trick, and its expf polynomial. Within 1 ulp
 * of expf on [-87, 87]; beyond, exp(87) = 6.1e37 or exp(-87) = 1.6e-38,
 * so x / (1 + exp(-x)) and 1 / (1 + exp(-x)) differ from expf's by under
 * 1e-36 absolute; GELU's density exp(-x^2 / 2) takes it too (its own
 * copy, with a float clamp and n floored, kept the loop scalar). NaN
 * stays NaN. */
static inline float dl_expf(float x)
{
	uint32_t b, b0;
	memcpy(&b, &x, sizeof b);
	b0 = b;
	uint32_t mag = b & 0x7fffffffu;
	/* NaN too, so that n below is a number (converting a NaN to int is
	 * undefined); the result is set back to NaN at the end */
	uint32_t nan = mag > 0x7f800000u ? 0xffffffffu : 0u;
	mag = mag > 0x42ae0000u ? 0x42ae0000u : mag;
	b = (b & 0x80000000u) | mag;
	memcpy(&x, &b, sizeof x);
	float fn = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
	float r = x - fn * 0.693359375f;
	r = r - fn * -2.12194440e-4f;
	float r2 = r * r;
	float p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	p = p * r2 + r + 1.0f;
	uint32_t bits = (uint32_t)((int32_t)fn + 127) << 23;
	float s;
	memcpy(&s, &bits, sizeof s);
	float y = p * s;
	uint32_t yb;
	memcpy(&yb, &y, sizeof yb);
	yb = (yb & ~nan) | ((b0 | 0x00400000u) & nan);
	memcpy(&y, &yb, sizeof y);
	return y;
}

/* Softmax's pieces over a row of n floats, for callers compiled per target
 * (DL_CLONES), where the loops vectorise: glibc's expf is a call per
 * element (a GPT-2-shaped decoder's attention softmax spent 1.6% of its
 * forward there), and GCC keeps `omp simd` max and sum reductions scalar.
 * The max and the sums run in DL_ROW_LANES running lanes, summed in float
 * as PyTorch's vectorised softmax sums. A -inf score gives 0 exactly
 * (dl_expf alone would give exp(-87)); a NaN, or an infinite or -inf mx,
 * gives NaNs, as libm's expf would. */
#define DL_ROW_LANES 16

/* The largest of s[0..n), -inf when n is 0. */
static inline __attribute__((always_inline)) float dl_row_max(const float *s, int64_t n)
{
	float l[DL_ROW_LANES], mx = -INFINITY;
	int64_t t = 0;
	for (int j = 0; j < DL_ROW_LANES; j++)
		l[j] = -INFINITY;
	for (; t + DL_ROW_LANES <= n; t += DL_ROW_LANES) {
		#pragma omp simd
		for (int j = 0; j < DL_ROW_LANES; j++)
			l[j] = s[t + j] > l[j] ? s[t + j] : l[j];
	}
	for (; t < n; t++)
		mx = s[t] > mx ? s[t] : mx;
	for (int j = 0; j < DL_ROW_LANES; j++)
		mx = l[j] > mx ? l[j] : mx;
	return mx;
}

/* The sum of s[0..n). */
static inline __attribute__((always_inline)) float dl_row_sum(const float *s, int64_t n)
{
	float l[DL_ROW_LANES] = {0}, sum = 0.0f;
	int64_t t = 0;
	for (; t + DL_ROW_LANES <= n; t += DL_ROW_LANES) {
		#pragma omp simd
		for (int j = 0; j < DL_ROW_LANES; j++)
			l[j] += s[t + j];
	}
	for (; t < n; t++)
		sum += s[t];
	for (int j = 0; j < DL_ROW_LANES; j++)
		sum += l[j];
	return sum;
}

/* The sum of a[t] b[t] for t < n, in the lanes of dl_row_sum. */
static inline __attribute__((always_inline)) float dl_row_dot(const float *a, const float *b,
							      int64_t n)
{
	float l[DL_ROW_LANES] = {0}, sum = 0.0f;
	int64_t t = 0;
	for (; t + DL_ROW_LANES <= n; t += DL_ROW_LANES) {
		#pragma omp simd
		for (int j = 0; j < DL_ROW_LANES; j++)
			l[j] += a[t + j] * b[t + j];
	}
	for (; t < n; t++)
		sum += a[t] * b[t];
	for (int j = 0; j < DL_ROW_LANES; j++)
		sum += l[j];
	return sum;
}

/* exp(x - mx); 0 below exp's smallest normal float, as libm's expf
 * (which gives denormals there, under 1.2e-38) and PyTorch's vectorised
 * exp give 0 further down: a masked key's -inf, a logit 2000 under the
 * max (dl_expf alone would give exp(-87) = 1.6e-38) */
static inline __attribute__((always_inline)) float dl_exp_shifted(float x, float mx)
{
	float z = x - mx;
	return z < -87.3365448f ? 0.0f : dl_expf(z);
}

/* y[t] = exp(x[t] - mx) for t < n (y may be x); returns their sum, as
 * dl_row_sum of y would. */
static inline __attribute__((always_inline)) float dl_row_exp(float *y, const float *x,
							      int64_t n, float mx)
{
	#pragma omp simd
	for (int64_t t = 0; t < n; t++)
		y[t] = dl_exp_shifted(x[t], mx);
	return dl_row_sum(y, n);
}

/* The sum of exp(x[t] - mx) for t < n, the same value as dl_row_exp's,
 * nothing stored. */
static inline __attribute__((always_inline)) float dl_row_exp_sum(const float *x, int64_t n,
								  float mx)
{
	float l[DL_ROW_LANES] = {0}, sum = 0.0f;
	int64_t t = 0;
	for (; t + DL_ROW_LANES <= n; t += DL_ROW_LANES) {
		#pragma omp simd
		for (int j = 0; j < DL_ROW_LANES; j++)
			l[j] += dl_exp_shifted(x[t + j], mx);
	}
	for (; t < n; t++)
		sum += dl_exp_shifted(x[t], mx);
	for (int j = 0; j < DL_ROW_LANES; j++)
		sum += l[j];
	return sum;
}

/* y = softmax(x) over n floats (y may be x). A row with an infinity or a
 * NaN gives NaNs, as PyTorch's softmax does (all -inf too: 0 / 0). */
static inline __attribute__((always_inline)) void dl_row_softmax(float *y, const float *x,
								 int64_t n)
{
	float inv = 1.0f / dl_row_exp(y, x, n, dl_row_max(x, n));
	#pragma omp simd
	for (int64_t t = 0; t < n; t++)
		y[t] *= inv;
}

#endif
