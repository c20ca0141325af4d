/* Choosing what to keep: the monitored validation value after each epoch,
 * the best epoch's parameters and buffers (--keep-best), early stopping
 * (--early-stopping N, --min-delta D) and the plateau schedule
 * (--lr-schedule plateau, as torch.optim.lr_scheduler.ReduceLROnPlateau).
 * All of its state goes into checkpoints, so a resumed run decides as an
 * uninterrupted one. */
#ifndef DL_MONITOR_H
#define DL_MONITOR_H

#include <stddef.h>
#include <stdint.h>

#include "engine/error.h"
#include "io/safetensors.h"

enum dl_monitor_kind { DL_MONITOR_VAL_LOSS, DL_MONITOR_VAL_ACCURACY };

/* ReduceLROnPlateau(mode, factor, patience, threshold=1e-4,
 * threshold_mode='rel', cooldown=0, min_lr, eps=1e-8), stepped once per
 * epoch on the monitored value. */
struct dl_plateau {
	int maximize;          /* mode 'max' (accuracy), else 'min' */
	double factor;         /* --factor (0.1), in (0, 1) */
	int64_t patience;      /* --patience (10) */
	double threshold;      /* 1e-4, relative */
	double min_lr;         /* --min-lr (0) */
	/* state */
	double lr;             /* the learning rate now */
	double best;           /* +inf (min) or -inf (max) at the start */
	int64_t bad_epochs;
};

void dl_plateau_init(struct dl_plateau *p, double lr);
/* One epoch's value; returns 1 when it lowered p->lr. */
int dl_plateau_step(struct dl_plateau *p, double value);

struct dl_monitor {
	/* set by the caller before dl_monitor_init */
	enum dl_monitor_kind kind;
	int keep_best;         /* keep the best epoch's state */
	int64_t early_stopping; /* N epochs without improvement; 0: never */
	double min_delta;      /* an improvement is by more than this */
	int plateau;           /* the plateau schedule is on: p is used */
	struct dl_plateau p;

	/* state */
	double best;           /* best value so far (NAN: none yet) */
	int64_t best_epoch;    /* its epoch, 1-based; 0: none yet */
	int64_t wait;          /* epochs since the last improvement */
	int stop;              /* early stopping: the run ends now */
	float *best_state;     /* [n] copy of the parameter block, or NULL */
	size_t n;
};

/* "val_loss" / "val_accuracy". */
const char *dl_monitor_name(enum dl_monitor_kind kind);
int dl_monitor_from_name(const char *name, enum dl_monitor_kind *kind,
			 struct dl_error *err);
/* Whether anything is monitored (keep-best, early stopping or plateau). */
int dl_monitor_active(const struct dl_monitor *m);
/* Checks the configuration; allocates the copy of n floats for keep-best;
 * lr: the schedule's learning rate (the plateau's start). */
int dl_monitor_init(struct dl_monitor *m, size_t n, double lr, struct dl_error *err);
/* After the validation of epoch (1-based): the value, and the parameter
 * block (n floats) to copy when the value is the best so far. */
void dl_monitor_epoch(struct dl_monitor *m, int64_t epoch, double value,
		      const float *state);
void dl_monitor_free(struct dl_monitor *m);   /* NULL-safe */

/* Its state as checkpoint metadata pairs ("monitor.*", exact) into
 * vals[DL_MONITOR_META][40]; keys in *keys. Returns the number of pairs. */
#define DL_MONITOR_META 8
int dl_monitor_meta(const struct dl_monitor *m, const char **keys,
		    char vals[][40]);
/* Restores the state from an open checkpoint (absent keys: the state of a
 * fresh run, for checkpoints written without monitoring). */
int dl_monitor_restore(struct dl_monitor *m, const struct dl_safetensors *st,
		       struct dl_error *err);

#endif
