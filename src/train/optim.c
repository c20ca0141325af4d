/* Optimizers, gradient clipping and learning-rate schedules with PyTorch's
 * formulas (torch/optim/sgd.py, adam.py, adamw.py: the single-tensor CPU
 * path; torch/nn/utils/clip_grad.py; torch/optim/lr_scheduler.py). Updates
 * are elementwise, so threads never change the result. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/optim.h"
#include "engine/vmath.h"   /* DL_CLONES */

/* Below this many elements a loop runs on one thread. */
#define PAR_MIN ((size_t)1 << 15)
/* Fixed partition of the clipping norm's sum (see loss.c). */
#define NCHUNK 64

static const char *const optim_names[DL_OPTIM_COUNT + 1] = {
	"sgd", "adam", "adamw", NULL,
};
static const char *const lr_names[DL_LR_COUNT + 1] = {
	"constant", "step", "cosine", "plateau", NULL,
};

/* Looks name up in a NULL-terminated table; DL_EINPUT with a suggestion. */
static int lookup(const char *name, const char *const *names,
		  const char *option, const char *what, int *index,
		  struct dl_error *err)
{
	for (int i = 0; names[i]; i++)
		if (strcmp(name, names[i]) == 0) {
			*index = i;
			return 0;
		}
	const char *s = dl_suggest(name, names);
	if (s)
		return dl_error_set(err, DL_EINPUT,
				    "%s: unknown %s '%s'; did you mean '%s'?",
				    option, what, name, s);
	char list[128] = "";
	for (int i = 0; names[i]; i++) {
		strcat(list, i ? ", " : "");
		strcat(list, names[i]);
	}
	return dl_error_set(err, DL_EINPUT, "%s: unknown %s '%s' (expected %s)",
			    option, what, name, list);
}

/* ---- optimizers ---- */

struct dl_optim_config dl_optim_defaults(enum dl_optim_kind kind)
{
	struct dl_optim_config c = {
		.kind = kind,
		.momentum = 0,
		.dampening = 0,
		.nesterov = 0,
		.weight_decay = kind == DL_OPTIM_ADAMW ? 0.01 : 0,
		.beta1 = 0.9,
		.beta2 = 0.999,
		.eps = 1e-8,
	};
	return c;
}

const char *dl_optim_name(enum dl_optim_kind kind)
{
	return (unsigned)kind < DL_OPTIM_COUNT ? optim_names[kind] : "?";
}

int dl_optim_from_name(const char *name, enum dl_optim_kind *kind,
		       struct dl_error *err)
{
	int i = 0;
	int rc = lookup(name, optim_names, "--optimizer", "optimizer", &i, err);
	if (rc == 0)
		*kind = (enum dl_optim_kind)i;
	return rc;
}

/* The checks of PyTorch's SGD/Adam/AdamW constructors. */
static int check_config(const struct dl_optim_config *c, struct dl_error *err)
{
	if ((unsigned)c->kind >= DL_OPTIM_COUNT)
		return dl_error_set(err, DL_EINPUT, "--optimizer: unknown optimizer");
	if (!(c->weight_decay >= 0))
		return dl_error_set(err, DL_EINPUT,
				    "--weight-decay: %g is negative (must be >= 0)",
				    c->weight_decay);
	if (c->kind == DL_OPTIM_SGD) {
		if (!(c->momentum >= 0))
			return dl_error_set(err, DL_EINPUT,
					    "--momentum: %g is negative (must be >= 0)",
					    c->momentum);
		if (!isfinite(c->dampening))
			return dl_error_set(err, DL_EINPUT,
					    "--dampening: %g is not a number",
					    c->dampening);
		if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
			return dl_error_set(err, DL_EINPUT,
					    "--nesterov: Nesterov momentum needs "
					    "--momentum > 0 and --dampening 0 (got "
					    "momentum %g, dampening %g)",
					    c->momentum, c->dampening);
		return 0;
	}
	if (!(c->beta1 >= 0 && c->beta1 < 1))
		return dl_error_set(err, DL_EINPUT,
				    "--betas: beta1 %g is not in [0, 1)", c->beta1);
	if (!(c->beta2 >= 0 && c->beta2 < 1))
		return dl_error_set(err, DL_EINPUT,
				    "--betas: beta2 %g is not in [0, 1)", c->beta2);
	if (!(c->eps >= 0))
		return dl_error_set(err, DL_EINPUT,
				    "--eps: %g is negative (must be >= 0)", c->eps);
	return 0;
}

int dl_optim_init(struct dl_optim *o, const struct dl_optim_config *cfg,
		  size_t n, const struct dl_range *ranges, int n_ranges,
		  struct dl_error *err)
{
	memset(o, 0, sizeof *o);
	int rc = check_config(cfg, err);
	if (rc)
		return rc;
	struct dl_range whole = {0, n};
	if (!ranges) {
		ranges = &whole;
		n_ranges = 1;
	}
	for (int i = 0; i < n_ranges; i++)
		if (ranges[i].offset > n || ranges[i].length > n - ranges[i].offset)
			return dl_error_set(err, DL_ERUN,
					    "optimizer: trainable range %d (offset %zu, "
					    "length %zu) is outside the %zu-element "
					    "parameter block",
					    i, ranges[i].offset, ranges[i].length, n);
	o->cfg = *cfg;
	o->n = n;
	o->n_ranges = n_ranges;
	o->ranges = malloc((n_ranges > 0 ? (size_t)n_ranges : 1) * sizeof *o->ranges);
	int need_m = cfg->kind != DL_OPTIM_SGD || cfg->momentum != 0;
	int need_v = cfg->kind != DL_OPTIM_SGD;
	size_t bytes = (n ? n : 1) * sizeof(float);
	if (need_m)
		o->m = calloc(1, bytes);
	if (need_v)
		o->v = calloc(1, bytes);
	if (!o->ranges || (need_m && !o->m) || (need_v && !o->v)) {
		dl_optim_free(o);
		return dl_error_set(err, DL_ERUN,
				    "optimizer: out of memory for the state of %zu "
				    "parameters", n);
	}
	if (n_ranges > 0)
		memcpy(o->ranges, ranges, (size_t)n_ranges * sizeof *ranges);
	return 0;
}

void dl_optim_free(struct dl_optim *o)
{
	if (!o)
		return;
	free(o->m);
	free(o->v);
	free(o->ranges);
	o->m = o->v = NULL;
	o->ranges = NULL;
	o->n_ranges = 0;
}

/* torch.optim.SGD on one range. The scalars are rounded to float, as
 * PyTorch's CPU kernels do with Python numbers on float32 tensors. */
static void sgd_range(const struct dl_optim *o, float *p, const float *g,
		      float *b, size_t len, double lr)
{
	const float wd = (float)o->cfg.weight_decay;
	const float mom = (float)o->cfg.momentum;
	const float damp1 = (float)(1.0 - o->cfg.dampening);
	const float neg_lr = (float)-lr;
	const int first = o->step == 0, nesterov = o->cfg.nesterov;
	const int use_wd = o->cfg.weight_decay != 0, use_mom = o->cfg.momentum != 0;
#pragma omp parallel for schedule(static) if (len >= PAR_MIN)
	for (size_t i = 0; i < len; i++) {
		float d = g[i];
		if (use_wd)
			d = d + wd * p[i];          /* d_p.add(param, alpha=wd) */
		if (use_mom) {
			float bi;
			if (first)
				bi = d;                 /* buf = clone(d_p) */
			else                        /* buf.mul_(m).add_(d_p, 1-damp) */
				bi = b[i] * mom + damp1 * d;
			b[i] = bi;
			d = nesterov ? d + mom * bi : bi;
		}
		p[i] = p[i] + neg_lr * d;           /* param.add_(d_p, alpha=-lr) */
	}
}

/* torch.optim.Adam / AdamW on one range; t is the step after increment.
 * Vectorised (the mode tests are uniform, so they become selects of
 * values computed exactly as the scalar code does; sqrt and division are
 * correctly rounded in every lane): the same bits as a scalar loop. */
DL_CLONES static void adam_range(const struct dl_optim *o, float *p, const float *g,
		       float *m, float *v, size_t len, double lr)
{
	const struct dl_optim_config *c = &o->cfg;
	const int adamw = c->kind == DL_OPTIM_ADAMW;
	const int use_l2 = !adamw && c->weight_decay != 0;
	const float wd = (float)c->weight_decay;
	/* adamw: param.mul_(1 - lr * weight_decay) */
	const float decay = (float)(1.0 - lr * c->weight_decay);
	const float b1 = (float)c->beta1, b2 = (float)c->beta2;
	const float omb1 = (float)(1.0 - c->beta1), omb2 = (float)(1.0 - c->beta2);
	/* bias corrections in double, as PyTorch's Python floats */
	const double t = (double)o->step;
	const double bc1 = 1.0 - pow(c->beta1, t);
	const double bc2 = 1.0 - pow(c->beta2, t);
	const float neg_step = (float)-(lr / bc1);
	const float bc2_sqrt = (float)sqrt(bc2);
	const float eps = (float)c->eps;
#pragma omp parallel for simd schedule(static) if (len >= PAR_MIN)
	for (size_t i = 0; i < len; i++) {
		float pi = p[i], d = g[i];
		if (adamw)
			pi = pi * decay;
		else if (use_l2)
			d = d + wd * pi;            /* grad.add(param, alpha=wd) */
		float mi = m[i] * b1;               /* exp_avg.mul_(b1) */
		mi = mi + omb1 * d;                 /*   .add_(grad, alpha=1-b1) */
		float vi = v[i] * b2;               /* exp_avg_sq.mul_(b2) */
		vi = vi + omb2 * d * d;             /*   .addcmul_(g, g, 1-b2) */
		/* denom = (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps) */
		float denom = sqrtf(vi) / bc2_sqrt + eps;
		/* param.addcdiv_(exp_avg, denom, value=-lr/bc1) */
		p[i] = pi + neg_step * mi / denom;
		m[i] = mi;
		v[i] = vi;
	}
}

void dl_optim_step(struct dl_optim *o, float *params, const float *grads,
		   double lr)
{
	if (o->cfg.kind != DL_OPTIM_SGD)
		o->step++;  /* Adam increments state['step'] before using it */
	for (int r = 0; r < o->n_ranges; r++) {
		size_t off = o->ranges[r].offset, len = o->ranges[r].length;
		if (o->cfg.kind == DL_OPTIM_SGD)
			sgd_range(o, params + off, grads + off,
				  o->m ? o->m + off : NULL, len, lr);
		else
			adam_range(o, params + off, grads + off, o->m + off,
				   o->v + off, len, lr);
	}
	if (o->cfg.kind == DL_OPTIM_SGD)
		o->step++;  /* after: step 0 marks the first momentum step */
}

/* ---- gradient clipping ---- */

/* Sum of squares in double over a fixed chunk partition, added in order. */
static double sum_squares(const float *g, size_t len)
{
	double part[NCHUNK];
#pragma omp parallel for schedule(static) if (len >= PAR_MIN)
	for (int c = 0; c < NCHUNK; c++) {
		size_t lo = len / NCHUNK * c + (len % NCHUNK) * c / NCHUNK;
		size_t hi = len / NCHUNK * (c + 1) + (len % NCHUNK) * (c + 1) / NCHUNK;
		double acc = 0;
		for (size_t i = lo; i < hi; i++)
			acc += (double)g[i] * g[i];
		part[c] = acc;
	}
	double s = 0;
	for (int c = 0; c < NCHUNK; c++)
		s += part[c];
	return s;
}

double dl_clip_grad_norm(float *grads, size_t n, const struct dl_range *ranges,
			 int n_ranges, double max_norm)
{
	struct dl_range whole = {0, n};
	if (!ranges) {
		ranges = &whole;
		n_ranges = 1;
	}
	double ss = 0;
	for (int r = 0; r < n_ranges; r++)
		ss += sum_squares(grads + ranges[r].offset, ranges[r].length);
	double norm = sqrt(ss);
	if (!isfinite(norm))
		return norm;
	/* clip_coef = max_norm / (total_norm + 1e-6), clamped to 1 */
	double coef = max_norm / (norm + 1e-6);
	if (coef >= 1.0)
		return norm;
	const float fc = (float)coef;
	for (int r = 0; r < n_ranges; r++) {
		float *g = grads + ranges[r].offset;
		size_t len = ranges[r].length;
#pragma omp parallel for schedule(static) if (len >= PAR_MIN)
		for (size_t i = 0; i < len; i++)
			g[i] *= fc;
	}
	return norm;
}

/* ---- learning-rate schedules ---- */

const char *dl_lr_name(enum dl_lr_kind kind)
{
	return (unsigned)kind < DL_LR_COUNT ? lr_names[kind] : "?";
}

int dl_lr_from_name(const char *name, enum dl_lr_kind *kind,
		    struct dl_error *err)
{
	int i = 0;
	int rc = lookup(name, lr_names, "--lr-schedule", "schedule", &i, err);
	if (rc == 0)
		*kind = (enum dl_lr_kind)i;
	return rc;
}

int dl_lr_check(const struct dl_lr_schedule *s, struct dl_error *err)
{
	if (!(s->lr >= 0) || !isfinite(s->lr))
		return dl_error_set(err, DL_EINPUT,
				    "--lr: invalid learning rate %g (must be >= 0)",
				    s->lr);
	if (s->warmup < 0)
		return dl_error_set(err, DL_EINPUT,
				    "--warmup: %lld is negative (must be >= 0)",
				    (long long)s->warmup);
	switch (s->kind) {
	case DL_LR_CONSTANT:
	case DL_LR_PLATEAU:
		return 0;
	case DL_LR_STEP:
		if (s->step_size < 1)
			return dl_error_set(err, DL_EINPUT,
					    "--step-size: %lld is not positive (the "
					    "step schedule needs --step-size >= 1)",
					    (long long)s->step_size);
		if (!(s->gamma >= 0) || !isfinite(s->gamma))
			return dl_error_set(err, DL_EINPUT,
					    "--gamma: invalid factor %g (must be >= 0)",
					    s->gamma);
		return 0;
	case DL_LR_COSINE:
		if (s->total_steps < 1)
			return dl_error_set(err, DL_EINPUT,
					    "--lr-schedule cosine: the run has %lld "
					    "steps (needs at least 1)",
					    (long long)s->total_steps);
		if (!(s->min_lr >= 0) || !isfinite(s->min_lr))
			return dl_error_set(err, DL_EINPUT,
					    "--min-lr: invalid learning rate %g (must "
					    "be >= 0)", s->min_lr);
		return 0;
	}
	return dl_error_set(err, DL_EINPUT, "--lr-schedule: unknown schedule");
}

double dl_lr_at(const struct dl_lr_schedule *s, int64_t t)
{
	if (t < s->warmup)
		return s->lr * (double)(t + 1) / (double)s->warmup;
	int64_t k = t - s->warmup;
	switch (s->kind) {
	case DL_LR_CONSTANT:
	case DL_LR_PLATEAU:
		break;
	case DL_LR_STEP:
		/* StepLR: lr * gamma^floor(k / step_size) */
		return s->lr * pow(s->gamma, s->step_size > 0 ?
				   (double)(k / s->step_size) : 0.0);
	case DL_LR_COSINE: {
		/* CosineAnnealingLR's closed form, T_max = T */
		int64_t T = s->total_steps - s->warmup;
		if (T <= 0)
			return s->min_lr;
		if (k > T)
			k = T;
		return s->min_lr + (s->lr - s->min_lr) *
			(1.0 + cos(M_PI * (double)k / (double)T)) / 2.0;
	}
	}
	return s->lr;
}
