/* Training losses with PyTorch's mean reduction, their gradients with
 * respect to the model output, label checks and accuracy counts. Sums are
 * taken over a fixed number of chunks and added in order, so results do not
 * depend on the thread count (resumed runs must match bit for bit). */
#include <math.h>
#include <string.h>

#include "engine/vmath.h"
#include "train/loss.h"

/* Fixed partition of every reduction: the chunk boundaries depend only on
 * the length, never on the number of threads. */
#define NCHUNK 64
/* Below this much work a loop runs on one thread. */
#define PAR_MIN ((int64_t)1 << 15)

static const char *const loss_names[DL_LOSS_COUNT + 1] = {
	"cross_entropy", "nll", "mse", "bce_with_logits", NULL,
};

const char *dl_loss_name(enum dl_loss kind)
{
	return (unsigned)kind < DL_LOSS_COUNT ? loss_names[kind] : "?";
}

int dl_loss_from_name(const char *name, enum dl_loss *kind,
		      struct dl_error *err)
{
	for (int i = 0; i < DL_LOSS_COUNT; i++)
		if (strcmp(name, loss_names[i]) == 0) {
			*kind = (enum dl_loss)i;
			return 0;
		}
	const char *s = dl_suggest(name, loss_names);
	if (s)
		return dl_error_set(err, DL_EINPUT,
				    "--loss: unknown loss '%s'; did you mean '%s'?",
				    name, s);
	return dl_error_set(err, DL_EINPUT,
			    "--loss: unknown loss '%s' (expected cross_entropy, "
			    "nll, mse or bce_with_logits)", name);
}

int dl_loss_takes_ids(enum dl_loss kind)
{
	return kind == DL_LOSS_CROSS_ENTROPY || kind == DL_LOSS_NLL;
}

int dl_loss_shape(enum dl_loss kind, const struct dl_shape *out,
		  const struct dl_shape *target, int64_t *rows, int64_t *cols,
		  struct dl_error *err)
{
	char so[128], st[128];
	dl_shape_str(out, so, sizeof so);
	dl_shape_str(target, st, sizeof st);
	const char *name = dl_loss_name(kind);
	if (dl_loss_takes_ids(kind)) {
		if (out->ndim != 2 && out->ndim != 3)
			return dl_error_set(err, DL_EINPUT,
					    "%s: the model output %s must be [N, C] "
					    "or [N, T, V] (class scores on the last axis)",
					    name, so);
		int lead = out->ndim - 1;
		int ok = target->ndim == lead;
		for (int i = 0; ok && i < lead; i++)
			ok = target->d[i] == out->d[i];
		if (!ok) {
			char want[128];
			struct dl_shape w = dl_shape_make(lead, out->d);
			dl_shape_str(&w, want, sizeof want);
			return dl_error_set(err, DL_EINPUT,
					    "%s: labels of shape %s do not fit the model "
					    "output %s; expected class ids of shape %s",
					    name, st, so, want);
		}
		if (out->d[lead] < 1)
			return dl_error_set(err, DL_EINPUT,
					    "%s: the model output %s has no classes",
					    name, so);
		*rows = dl_shape_prod(out, 0, lead);
		*cols = out->d[lead];
		return 0;
	}
	int same = dl_shape_equal(out, target);
	/* y [N] for an output [N, 1]: the usual single-target regression */
	int column = out->ndim == 2 && out->d[1] == 1 && target->ndim == 1 &&
		     target->d[0] == out->d[0];
	if (!same && !column)
		return dl_error_set(err, DL_EINPUT,
				    "%s: targets of shape %s do not fit the model "
				    "output %s; expected targets of shape %s",
				    name, st, so, so);
	*rows = dl_shape_prod(out, 0, out->ndim);
	*cols = 1;
	return 0;
}

int dl_loss_check_labels(const int64_t *labels, int64_t n, int64_t classes,
			 int64_t ignore_index, const char *name,
			 struct dl_error *err)
{
	for (int64_t i = 0; i < n; i++) {
		int64_t y = labels[i];
		if ((y < 0 || y >= classes) && y != ignore_index)
			return dl_error_set(err, DL_EINPUT,
					    "%s: label %lld at index %lld is out of "
					    "range for %lld classes (0..%lld, or the "
					    "ignore index %lld)",
					    name, (long long)y, (long long)i,
					    (long long)classes,
					    (long long)(classes - 1),
					    (long long)ignore_index);
	}
	return 0;
}

int64_t dl_loss_count_targets(const int64_t *labels, int64_t rows,
			      int64_t ignore_index)
{
	int64_t m = 0;
	for (int64_t i = 0; i < rows; i++)
		m += labels[i] != ignore_index;
	return m;
}

/* [lo, hi) of chunk c of n items. */
static inline int64_t chunk_lo(int64_t n, int c)
{
	return n * c / NCHUNK;
}

static double sum_parts(const double *part)
{
	double s = 0;
	for (int c = 0; c < NCHUNK; c++)
		s += part[c];
	return s;
}

/* One row's -log softmax(x)[y] (logsumexp(x) - x[y] = log(s) - (x[y] -
 * max)), and with d its gradient times inv_m: exp(x - max) and the sum
 * vectorised (engine/vmath.h, the sum in float lanes as PyTorch's
 * log_softmax sums; libm's expf was a call per element, over 50257
 * classes for a language model). Infinities and NaNs give NaN. */
static inline __attribute__((always_inline)) double ce_row(const float *x, int64_t classes,
							  int64_t y, float *d, float inv_m)
{
	float mx = dl_row_max(x, classes);
	float s = d ? dl_row_exp(d, x, classes, mx) : dl_row_exp_sum(x, classes, mx);
	if (d) {
		const float inv_s = (float)(1.0 / (double)s);
		#pragma omp simd
		for (int64_t j = 0; j < classes; j++)
			d[j] = (d[j] * inv_s - (float)(j == y)) * inv_m;
	}
	return log((double)s) - ((double)x[y] - mx);
}

DL_CLONES double dl_loss_cross_entropy(const float *logits, const int64_t *labels,
				       int64_t rows, int64_t classes,
				       int64_t ignore_index, float *dlogits)
{
	int64_t m = dl_loss_count_targets(labels, rows, ignore_index);
	if (m == 0 || classes <= 0) {
		if (dlogits && rows > 0 && classes > 0)
			memset(dlogits, 0, (size_t)(rows * classes) * sizeof *dlogits);
		return 0.0;
	}
	/* PyTorch: grad = (exp(log_softmax(x)) - onehot) * (1 / M) */
	const float inv_m = (float)(1.0 / (double)m);
	double part[NCHUNK];
#pragma omp parallel for schedule(static) if (rows * classes >= PAR_MIN)
	for (int c = 0; c < NCHUNK; c++) {
		double acc = 0;
		for (int64_t i = chunk_lo(rows, c); i < chunk_lo(rows, c + 1); i++) {
			const float *x = logits + i * classes;
			float *d = dlogits ? dlogits + i * classes : NULL;
			int64_t y = labels[i];
			if (y == ignore_index) {
				if (d)
					memset(d, 0, (size_t)classes * sizeof *d);
				continue;
			}
			acc += ce_row(x, classes, y, d, inv_m);
		}
		part[c] = acc;
	}
	return sum_parts(part) / (double)m;
}

double dl_loss_nll(const float *logp, const int64_t *labels, int64_t rows,
		   int64_t classes, int64_t ignore_index, float *dlogp)
{
	if (dlogp && rows > 0 && classes > 0)
		memset(dlogp, 0, (size_t)(rows * classes) * sizeof *dlogp);
	int64_t m = dl_loss_count_targets(labels, rows, ignore_index);
	if (m == 0 || classes <= 0)
		return 0.0;
	const float g = (float)(-1.0 / (double)m);
	double acc = 0;
	/* one value per row: not worth threads */
	for (int64_t i = 0; i < rows; i++) {
		int64_t y = labels[i];
		if (y == ignore_index)
			continue;
		acc -= logp[i * classes + y];
		if (dlogp)
			dlogp[i * classes + y] = g;
	}
	return acc / (double)m;
}

double dl_loss_mse(const float *x, const float *target, int64_t n, float *dx)
{
	if (n <= 0)
		return 0.0;
	/* PyTorch's mse_loss_backward: grad = (2 / n) * (x - y) */
	const float norm = (float)(2.0 / (double)n);
	double part[NCHUNK];
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
	for (int c = 0; c < NCHUNK; c++) {
		double acc = 0;
		for (int64_t i = chunk_lo(n, c); i < chunk_lo(n, c + 1); i++) {
			float diff = x[i] - target[i];
			acc += (double)diff * diff;
			if (dx)
				dx[i] = norm * diff;
		}
		part[c] = acc;
	}
	return sum_parts(part) / (double)n;
}

double dl_loss_bce_with_logits(const float *x, const float *target,
			       int64_t n, float *dx)
{
	if (n <= 0)
		return 0.0;
	/* PyTorch's backward: grad = (sigmoid(x) - y) / n */
	const float inv_n = (float)(1.0 / (double)n);
	double part[NCHUNK];
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
	for (int c = 0; c < NCHUNK; c++) {
		double acc = 0;
		for (int64_t i = chunk_lo(n, c); i < chunk_lo(n, c + 1); i++) {
			double xi = x[i], yi = target[i];
			/* never exp of a positive number: no overflow */
			acc += (xi > 0 ? xi : 0) - xi * yi + log1p(exp(-fabs(xi)));
			if (dx) {
				float sg = 1.0f / (1.0f + expf(-x[i]));
				dx[i] = (sg - target[i]) * inv_n;
			}
		}
		part[c] = acc;
	}
	return sum_parts(part) / (double)n;
}

double dl_loss_eval(enum dl_loss kind, const float *out, const int64_t *ids,
		    const float *values, int64_t rows, int64_t cols,
		    int64_t ignore_index, float *dout)
{
	switch (kind) {
	case DL_LOSS_CROSS_ENTROPY:
		return dl_loss_cross_entropy(out, ids, rows, cols, ignore_index,
					     dout);
	case DL_LOSS_NLL:
		return dl_loss_nll(out, ids, rows, cols, ignore_index, dout);
	case DL_LOSS_MSE:
		return dl_loss_mse(out, values, rows * cols, dout);
	case DL_LOSS_BCE_WITH_LOGITS:
		return dl_loss_bce_with_logits(out, values, rows * cols, dout);
	}
	return NAN;
}

int64_t dl_loss_correct(const float *logits, const int64_t *labels,
			int64_t rows, int64_t classes, int64_t ignore_index,
			int64_t *total)
{
	int64_t ok = 0, counted = 0;
	for (int64_t i = 0; i < rows; i++) {
		if (labels[i] == ignore_index)
			continue;
		counted++;
		const float *x = logits + i * classes;
		int64_t best = 0;
		for (int64_t j = 1; j < classes; j++)
			if (x[j] > x[best])
				best = j;
		ok += best == labels[i];
	}
	if (total)
		*total = counted;
	return ok;
}

int64_t dl_loss_correct_binary(const float *x, const float *target,
			       int64_t n)
{
	int64_t ok = 0;
	for (int64_t i = 0; i < n; i++)
		ok += (x[i] > 0) == (target[i] > 0.5f);
	return ok;
}
