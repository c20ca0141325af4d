/* The training loop: epochs of shuffled mini-batches of a dataset through
 * dl_train_step, validation after each epoch, checkpoints every K steps.
 * Nothing here prints: progress and epoch results go to callbacks. */
#ifndef DL_LOOP_H
#define DL_LOOP_H

#include <signal.h>
#include <stdint.h>

#include "train/checkpoint.h"
#include "train/data.h"
#include "train/dist.h"
#include "train/monitor.h"
#include "train/step.h"

/* After each step (for a progress bar). */
struct dl_batch_report {
	int64_t epoch;            /* 0-based */
	int64_t batch, n_batches; /* batches of this epoch done, of */
	double loss;              /* mean loss of the epoch so far */
	double rate, eta;         /* samples per second, seconds left */
	int has_balance;          /* the model has a balance loss: */
	double balance_loss;      /* its mean so far, part of loss */
	int64_t step;             /* optimizer steps taken so far */
	double step_loss, lr;     /* this step's loss and learning rate */
	double data_wait;         /* share of the run's time the steps waited
	                           * for samples made from files (0 to 1) */
};

/* After each epoch. */
struct dl_epoch_report {
	int64_t epoch;            /* 1-based: epochs done */
	int64_t step;             /* optimizer steps taken so far */
	double loss, lr;          /* mean training loss, last lr */
	int has_val;              /* the fields below are set */
	double val_loss;
	int has_accuracy;         /* classification losses only */
	double val_accuracy;
	int has_balance;          /* the model has a balance loss: */
	double balance_loss;      /* its mean over the epoch, part of loss */
};

struct dl_trainer {
	/* set by the caller before dl_trainer_init */
	struct dl_graph *g;
	struct dl_dataset *train, *val;   /* val->n == 0: no validation */
	struct dl_step step;              /* g, out, loss, ignore_index, clip */
	struct dl_optim_config oc;
	struct dl_lr_schedule sched;      /* total steps filled in by init */
	int64_t epochs, batch, seed;
	int shuffle;
	const char *checkpoint;           /* NULL: none; may hold {step} and
	                                   * {epoch}: one file per checkpoint */
	int64_t ckpt_every;
	int64_t keep_checkpoints;         /* with {step}/{epoch}: delete all
	                                   * but the last K files; 0: keep all */
	/* The run's flags as metadata pairs "run.<flag>", value: written into
	 * checkpoints, and a resumed run must match them. */
	const char *const *run_meta;
	int n_run_meta;
	struct dl_monitor mon;            /* keep-best, early stopping,
	                                   * plateau (configured by the caller) */
	const char *resume;               /* NULL: a fresh run */
	void (*on_batch)(void *user, const struct dl_batch_report *r);
	void (*on_epoch)(void *user, const struct dl_epoch_report *r);
	void *user;
	/* The length of the caller's log so far, kept in checkpoints so that
	 * a resumed run can cut what was logged after them; NULL: no log. */
	int64_t (*log_bytes)(void *user);
	/* Set (to a signal number) by the caller's signal handler: the run
	 * stops after the current step, writes a checkpoint when it has a
	 * checkpoint path, and returns DL_ESIGNAL - the signal. NULL: never. */
	volatile sig_atomic_t *stop;
	struct dl_dist *dist;             /* data-parallel (train/dist.h), or
	                                   * NULL: one process */

	/* the run's state */
	struct dl_optim opt;
	struct dl_train_pos pos;
	struct dl_range *ranges;
	int n_ranges;
	float **bx;                       /* [n_inputs] one batch's inputs */
	float *by;                        /* its float targets */
	int64_t *bids;                    /* or class ids */
	float **dout;                     /* [n_outputs] the loss output's
	                                   * entry is the plan's slot
	                                   * (dl_step_use_plan_slot), the
	                                   * others NULL */
	int64_t *perm;
	int64_t n_batches;                /* per epoch */
	char *ckpt_path;                  /* the last checkpoint's path */
	int64_t cur_batch;                /* batch size the graph is planned for */
	int cur_train;
	const struct dl_dataset *cur_data;
};

/* After the weights are loaded (or initialised) and dl_graph_train_setup:
 * checks the labels against the loss output, sets up the optimizer, the
 * schedule and the batch buffers, and restores t->resume when set. */
int dl_trainer_init(struct dl_trainer *t, struct dl_error *err);
/* Runs the remaining epochs. */
int dl_trainer_run(struct dl_trainer *t, struct dl_error *err);
void dl_trainer_free(struct dl_trainer *t);
/* Whether a --checkpoint path holds {step} or {epoch}. */
int dl_checkpoint_path_has_fields(const char *path);  /* NULL-safe; not g or data */

#endif
