/* Optimizers (sgd, adam, adamw) over the flat parameter and gradient
 * blocks, gradient-norm clipping and learning-rate schedules, with
 * PyTorch's formulas. The optimizer state is plain arrays, so a checkpoint
 * saves and restores it bit for bit. */
#ifndef DL_OPTIM_H
#define DL_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "engine/error.h"

/* ---- trainable ranges ----
 * The parameter block also holds buffers (batch-norm running statistics)
 * that are saved but never trained. Optimizers and clipping touch only the
 * listed ranges of the blocks; elements outside them are left alone (and
 * their optimizer state stays 0). */
struct dl_range {
	size_t offset, length;  /* elements, into the parameter block */
};

/* ---- optimizers ---- */

enum dl_optim_kind { DL_OPTIM_SGD, DL_OPTIM_ADAM, DL_OPTIM_ADAMW };
#define DL_OPTIM_COUNT 3

struct dl_optim_config {
	enum dl_optim_kind kind;
	double momentum;      /* sgd (0) */
	double dampening;     /* sgd (0) */
	int nesterov;         /* sgd (0): needs momentum > 0, dampening 0 */
	double weight_decay;  /* sgd, adam: L2 added to the gradient (0);
	                       * adamw: decoupled (0.01) */
	double beta1, beta2;  /* adam, adamw (0.9, 0.999) */
	double eps;           /* adam, adamw (1e-8) */
};

/* PyTorch's defaults for kind (weight_decay 0.01 for adamw, else 0). */
struct dl_optim_config dl_optim_defaults(enum dl_optim_kind kind);
/* "sgd", "adam", "adamw". */
const char *dl_optim_name(enum dl_optim_kind kind);
/* Unknown names are DL_EINPUT: "--optimizer: unknown optimizer 'X'; did you
 * mean 'Y'?". */
int dl_optim_from_name(const char *name, enum dl_optim_kind *kind,
		       struct dl_error *err);

struct dl_optim {
	struct dl_optim_config cfg;
	int64_t step;         /* optimizer steps taken so far (PyTorch's
	                       * state['step']; for sgd it tells whether the
	                       * momentum buffer exists: step > 0) */
	size_t n;             /* elements of the parameter block */
	float *m;             /* [n] sgd momentum_buffer, adam(w) exp_avg;
	                       * NULL for sgd without momentum */
	float *v;             /* [n] adam(w) exp_avg_sq; NULL for sgd */
	struct dl_range *ranges; /* [n_ranges] the trainable ranges */
	int n_ranges;
};

/* Validates cfg as PyTorch's constructors do (DL_EINPUT naming the option:
 * "--betas: beta1 1.5 is not in [0, 1)"), then allocates zeroed m and v
 * for a parameter block of n elements of which ranges[0..n_ranges) are
 * trained (ranges NULL: all of [0, n)); ranges must lie inside [0, n) and
 * are copied. step starts at 0. Out of memory is DL_ERUN. On error o is
 * left freed. dl_optim_free releases everything. */
int dl_optim_init(struct dl_optim *o, const struct dl_optim_config *cfg,
		  size_t n, const struct dl_range *ranges, int n_ranges,
		  struct dl_error *err);
void dl_optim_free(struct dl_optim *o);  /* NULL-safe, idempotent */

/* One optimizer step at learning rate lr (the schedule's value for this
 * step, see dl_lr_at): updates params in the trainable ranges from grads,
 * updates m, v, and increments step. Everything is float32 as PyTorch's
 * single-tensor CPU path (scalars rounded to float where PyTorch does), so
 * results agree with torch.optim to a few ulp. No allocation.
 *
 * sgd (torch.optim.SGD):
 *   g = grad + weight_decay * p
 *   if momentum != 0:
 *     b = g                                  (first step)
 *     b = momentum * b + (1 - dampening) * g (later steps)
 *     g = nesterov ? g + momentum * b : b
 *   p = p - lr * g
 * adam (torch.optim.Adam), t = step after the increment:
 *   g = grad + weight_decay * p
 *   m = beta1 * m + (1 - beta1) * g
 *   v = beta2 * v + (1 - beta2) * g * g
 *   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
 *   p = p - (lr / (1 - beta1^t)) * m / denom
 * adamw (torch.optim.AdamW): p = p * (1 - lr * weight_decay) first, then
 *   adam's update with g = grad (no L2 term). */
void dl_optim_step(struct dl_optim *o, float *params, const float *grads,
		   double lr);

/* ---- gradient clipping ---- */

/* torch.nn.utils.clip_grad_norm_(params, max_norm): the L2 norm of all
 * gradients in the ranges together (ranges NULL: [0, n)), accumulated in
 * double; when coef = max_norm / (norm + 1e-6) is below 1 the gradients are
 * multiplied by coef. Returns the norm before clipping. A non-finite norm
 * leaves the gradients untouched (PyTorch would scale them by nan): the
 * caller stops the run on it. */
double dl_clip_grad_norm(float *grads, size_t n, const struct dl_range *ranges,
			 int n_ranges, double max_norm);

/* ---- learning-rate schedules, per optimizer step ---- */

/* plateau: lr as constant, lowered between epochs by the trainer's
 * ReduceLROnPlateau (train/monitor.h) */
enum dl_lr_kind { DL_LR_CONSTANT, DL_LR_STEP, DL_LR_COSINE, DL_LR_PLATEAU };
#define DL_LR_COUNT 4

struct dl_lr_schedule {
	enum dl_lr_kind kind;
	double lr;            /* base learning rate (--lr) */
	int64_t step_size;    /* step: --step-size (>= 1) */
	double gamma;         /* step: --gamma (0.1) */
	double min_lr;        /* cosine: --min-lr (0) */
	int64_t total_steps;  /* cosine: optimizer steps of the whole run */
	int64_t warmup;       /* --warmup W (0) */
};

/* "constant", "step", "cosine". */
const char *dl_lr_name(enum dl_lr_kind kind);
int dl_lr_from_name(const char *name, enum dl_lr_kind *kind,
		    struct dl_error *err);
/* DL_EINPUT naming the option for a schedule that cannot run: lr < 0,
 * step_size < 1 or gamma <= 0 for step, total_steps < 1 for cosine,
 * warmup < 0. */
int dl_lr_check(const struct dl_lr_schedule *s, struct dl_error *err);

/* The learning rate of optimizer step t (0-based, counted over the whole
 * run), as cli.md words it:
 *   t < W:  lr * (t + 1) / W                      (warmup)
 *   else, with s = t - W (the schedule starts after the warmup):
 *     constant: lr
 *     step:     lr * gamma^floor(s / step_size)
 *     cosine:   min_lr + (lr - min_lr) (1 + cos(pi s / T)) / 2,
 *               T = total_steps - W, the schedule's own length, so the run
 *               ends at min_lr (s is clamped to T: no second cycle).
 * Equal to torch.optim.lr_scheduler's LinearLR(start_factor=1/W,
 * total_iters=W-1) followed (SequentialLR, milestone W) by StepLR or
 * CosineAnnealingLR(T_max=T, eta_min=min_lr), stepped once per step. */
double dl_lr_at(const struct dl_lr_schedule *s, int64_t t);

#endif
