/* One training step on one batch: forward of the model's inputs, the loss
 * of one output against the batch's labels (or fixed output gradients),
 * backward, gradient clipping and the optimizer's update. `dlrun train`,
 * `dlrun bench --train` and `dlrun gradcheck` run their passes through it. */
#ifndef DL_STEP_H
#define DL_STEP_H

#include <stdint.h>

#include "model/model.h"
#include "engine/graph.h"
#include "train/loss.h"
#include "train/optim.h"

struct dl_step {
	struct dl_graph *g;
	int out;                  /* the output the loss applies to (index
	                           * into g->outputs) */
	enum dl_loss loss;
	int64_t ignore_index;
	float **dout;             /* [n_outputs] the outputs' gradients that
	                           * backward seeds, NULL for none: the
	                           * caller's buffers or the plan's own slots
	                           * (dl_step_use_plan_slot); dl_step_loss
	                           * writes dout[out] */
	struct dl_optim *opt;     /* NULL: no update */
	const struct dl_range *ranges;  /* trainable ranges (clipping) */
	int n_ranges;
	double clip;              /* > 0: clip the global gradient norm */
	/* data-parallel training: between backward and the update, turns
	 * this process's gradient (n floats) and loss into the global
	 * batch's; NULL in one process */
	int (*reduce)(void *user, float *grad, size_t n, double *loss, struct dl_error *err);
	void *reduce_user;
	/* set by dl_train_step: the auxiliary losses of its forward (the
	 * balance_loss of every mixture_of_experts), part of its loss; this
	 * process's share in data-parallel training, as the gradient's */
	double aux_loss;
	int has_aux;              /* some op of g has an auxiliary loss */
};

/* One batch: the model's inputs and the labels of the loss output. */
struct dl_batch {
	int64_t n;                /* samples */
	float *const *in;         /* [n_inputs], planned shapes */
	struct dl_shape yshape;   /* [n, ...] */
	const int64_t *ids;       /* class ids, or NULL */
	const float *targets;     /* float targets, or NULL; both NULL: the
	                           * step's dout are used as they are */
};

/* Whether some node of g, at any depth, adds an auxiliary loss in
 * training (op->has_aux_loss: a mixture_of_experts with balance_loss > 0). */
int dl_step_has_aux(const struct dl_graph *g);

/* Index of output `name` in g->outputs, or -1. */
int dl_step_output(const struct dl_graph *g, const char *name);

/* Forward of the planned graph on in[]. */
void dl_step_forward(struct dl_step *s, float *const *in, struct dl_ctx *ctx);
/* The loss of the last forward's output s->out against b's labels; with
 * grad, writes dL/dout into s->dout[s->out]. correct and counted (may be
 * NULL) receive the accuracy counts of classification losses (0 for mse). */
int dl_step_loss(struct dl_step *s, const struct dl_batch *b, int grad, double *loss,
		 int64_t *correct, int64_t *counted, struct dl_error *err);
/* Zeroes the gradients and back-propagates s->dout; din[i] (may be NULL)
 * receives model input i's gradient. */
void dl_step_backward(struct dl_step *s, float *const *din, struct dl_ctx *ctx);
/* Clips (s->clip) and takes an optimizer step at lr (nothing without
 * s->opt). */
void dl_step_update(struct dl_step *s, double lr);
/* The whole step: forward, loss (unless b has no labels) plus the
 * forward's auxiliary losses (s->aux_loss), backward, update. A non-finite
 * loss is DL_ERUN naming the first op whose output was not finite (step_no
 * is the step's number in the message); nothing is updated then. *loss
 * (may be NULL) receives the loss, 0 without labels. It is
 * dl_train_forward followed by dl_train_finish. */
int dl_train_step(struct dl_step *s, const struct dl_batch *b, double lr, int64_t step_no,
		  struct dl_ctx *ctx, double *loss, struct dl_error *err);
/* The step in two calls, for a caller that writes the outputs' gradients
 * itself (dlrun bench, on a batch without labels): dl_train_forward runs
 * the forward, sets s->aux_loss and, when b has labels, writes dL/dout
 * into s->dout[s->out] and *loss (0 without labels), failing as
 * dl_train_step on a non-finite loss. The caller may then write
 * s->dout[k] (for instance the plan's own slots, dl_graph_output_grad);
 * dl_train_finish back-propagates them, reduces across processes
 * (s->reduce, which updates *loss) and takes the optimizer step at lr. */
int dl_train_forward(struct dl_step *s, const struct dl_batch *b, int64_t step_no,
		     struct dl_ctx *ctx, double *loss, struct dl_error *err);
int dl_train_finish(struct dl_step *s, double lr, struct dl_ctx *ctx, double *loss,
		    struct dl_error *err);
/* Points s->dout[s->out] at the plan's own gradient slot of the loss
 * output (dl_graph_output_grad), so that dl_step_loss writes dL/dout there
 * and backward takes it as it is: no logits-sized buffer outside the plan.
 * The slot belongs to the current plan: call again after every
 * dl_graph_plan of a training plan (outside one, the slot is not to be
 * written). s->dout's other entries are left as they are. */
void dl_step_use_plan_slot(struct dl_step *s);

/* The trainable (non-buffer) ranges of g's parameter block, adjacent ones
 * merged, in a malloc()ed array the caller frees. */
int dl_train_ranges(const struct dl_graph *g, struct dl_range **ranges, int *n,
		    struct dl_error *err);

#endif
