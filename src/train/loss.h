/* Training losses with PyTorch's mean reduction: each call returns the loss
 * (accumulated in double) and, when asked, writes dL/d(output), the seed of
 * the backward pass. Plus label validation and an accuracy count. */
#ifndef DL_LOSS_H
#define DL_LOSS_H

#include <stdint.h>

#include "engine/error.h"
#include "engine/tensor.h"

enum dl_loss {
	DL_LOSS_CROSS_ENTROPY, /* logits, integer class ids */
	DL_LOSS_NLL,           /* log-probabilities, integer class ids */
	DL_LOSS_MSE,           /* float targets, same shape as the output */
	DL_LOSS_BCE_WITH_LOGITS, /* float targets in [0, 1], same shape */
};
#define DL_LOSS_COUNT 4

/* PyTorch's default ignore_index: labels equal to it are skipped. */
#define DL_IGNORE_INDEX_DEFAULT (-100)

/* "cross_entropy", "nll", "mse", "bce_with_logits". */
const char *dl_loss_name(enum dl_loss kind);
/* Looks a loss up by its CLI name. Unknown names are DL_EINPUT with err
 * "--loss: unknown loss 'X'; did you mean 'Y'?" (or the list of names). */
int dl_loss_from_name(const char *name, enum dl_loss *kind,
		      struct dl_error *err);
/* 1 when the loss takes integer class ids (cross_entropy, nll), 0 when it
 * takes float targets (mse, bce_with_logits). */
int dl_loss_takes_ids(enum dl_loss kind);

/* Checks that a model output of shape out (batch first) and targets of
 * shape target fit the loss, and gives the flat view the loss functions
 * use: rows x cols.
 *   cross_entropy, nll: out [N, C] with target [N], or out [N, T, V] with
 *     target [N, T] (classes on the last axis, unlike PyTorch's [N, C, T]);
 *     rows = N (or N*T), cols = C (or V).
 *   mse, bce_with_logits: target of out's shape; also target [N] for out
 *     [N, 1] (PyTorch would broadcast that to [N, N], which is never meant);
 *     rows = numel, cols = 1.
 * A mismatch is DL_EINPUT naming both shapes and what would fit. */
int dl_loss_shape(enum dl_loss kind, const struct dl_shape *out,
		  const struct dl_shape *target, int64_t *rows, int64_t *cols,
		  struct dl_error *err);

/* Checks that every label is in [0, classes) or equals ignore_index.
 * The first bad one is DL_EINPUT: "NAME: label 12 at index 345 is out of
 * range for 10 classes (0..9, or the ignore index -100)". name is used as
 * the message's place ("y.npy"). Call it once on a whole label array; the
 * loss functions below assume valid labels. */
int dl_loss_check_labels(const int64_t *labels, int64_t n, int64_t classes,
			 int64_t ignore_index, const char *name,
			 struct dl_error *err);
/* Number of labels that are not ignore_index: the divisor of the mean. */
int64_t dl_loss_count_targets(const int64_t *labels, int64_t rows,
			      int64_t ignore_index);

/* The losses. Every dX argument may be NULL (validation: loss only); when
 * given it is overwritten (=, not +=) with dL/dX, same layout as X. Inputs
 * are row-major [rows, classes] (a [N, T, V] output is rows = N*T). The
 * result does not depend on the number of threads.
 *
 * cross_entropy, as F.cross_entropy(x, y, ignore_index=ii):
 *   L = (1/M) sum_{i: y_i != ii} (logsumexp(x_i) - x_i[y_i]),
 *   M = #{i: y_i != ii};
 *   dL/dx_ij = (softmax(x_i)_j - [j == y_i]) / M for counted rows, 0 for
 *   ignored rows.
 * When every label is ignored (M = 0) PyTorch returns nan (with a zero
 * gradient); these functions return 0 with a zero gradient instead, so a
 * batch made only of padding contributes nothing rather than stopping the
 * run as a non-finite loss. dl_loss_count_targets tells the two apart. */
double dl_loss_cross_entropy(const float *logits, const int64_t *labels,
			     int64_t rows, int64_t classes,
			     int64_t ignore_index, float *dlogits);
/* nll, as F.nll_loss(logp, y, ignore_index=ii) (logp already log_softmax):
 *   L = -(1/M) sum_{i: y_i != ii} logp_i[y_i];
 *   dL/dlogp_ij = -[j == y_i] / M. M = 0 returns 0, as above. */
double dl_loss_nll(const float *logp, const int64_t *labels, int64_t rows,
		   int64_t classes, int64_t ignore_index, float *dlogp);
/* mse, as F.mse_loss(x, y): L = (1/n) sum (x - y)^2; dL/dx = 2 (x - y) / n.
 * n = 0 returns 0 (PyTorch: nan). */
double dl_loss_mse(const float *x, const float *target, int64_t n,
		   float *dx);
/* bce_with_logits, as F.binary_cross_entropy_with_logits(x, y), in the
 * stable form
 *   l = max(x, 0) - x y + log1p(exp(-|x|)),  L = (1/n) sum l;
 *   dL/dx = (sigmoid(x) - y) / n. n = 0 returns 0 (PyTorch: nan). */
double dl_loss_bce_with_logits(const float *x, const float *target,
			       int64_t n, float *dx);

/* Dispatch by kind: ids for cross_entropy/nll, values for mse and
 * bce_with_logits (the other may be NULL); rows and cols as given by
 * dl_loss_shape (mse and bce use rows * cols elements). */
double dl_loss_eval(enum dl_loss kind, const float *out, const int64_t *ids,
		    const float *values, int64_t rows, int64_t cols,
		    int64_t ignore_index, float *dout);

/* Accuracy counts for validation.
 * Class ids: the number of counted rows (label != ignore_index) whose
 * argmax (the first maximum, as torch.argmax) equals the label; *total (may
 * be NULL) receives the number of counted rows. */
int64_t dl_loss_correct(const float *logits, const int64_t *labels,
			int64_t rows, int64_t classes, int64_t ignore_index,
			int64_t *total);
/* Binary (bce_with_logits): elements where (x > 0) == (y > 0.5). */
int64_t dl_loss_correct_binary(const float *x, const float *target,
			       int64_t n);

#endif
