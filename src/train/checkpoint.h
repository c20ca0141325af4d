/* Training checkpoints: model state, optimizer state, RNG state and the
 * position in the run, in one safetensors file written atomically, so a
 * resumed run ends with the same bytes as an uninterrupted one. */
#ifndef DL_CHECKPOINT_H
#define DL_CHECKPOINT_H

#include <stdint.h>

#include "model/model.h"
#include "engine/rng.h"
#include "io/safetensors.h"
#include "train/optim.h"

struct dl_train_pos {
	int64_t step;      /* optimizer steps taken over the whole run */
	int64_t epoch;     /* current epoch (0-based) */
	int64_t batch;     /* batches of this epoch already done (all of
	                    * them: the epoch's report is still to come) */
	struct dl_rng rng; /* the dropout generator */
	/* the epoch so far, for its report: sums of the batches' mean losses
	 * (and balance losses) times their sizes, and the samples seen */
	double ep_loss, ep_aux;
	int64_t ep_seen;
	int64_t log_bytes; /* the --log file's length at this point; -1: none */
};

/* What a checkpoint holds beyond the model, optimizer and position: more
 * metadata pairs meta[0..2*n_meta) (the run's flags as "run.<flag>", the
 * monitor's state) and more tensors (the best epoch's state). */
struct dl_ckpt_extra {
	const char *const *meta;
	int n_meta;
	const struct dl_st_entry *t;
	int n_t;
};

int dl_checkpoint_save(const char *path, struct dl_graph *g,
		       const struct dl_optim *o, const struct dl_train_pos *pos,
		       const struct dl_ckpt_extra *x, struct dl_error *err);
/* DL_EINPUT naming the flag when one of the pairs meta[0..2*n_meta)
 * ("run.<flag>" with the flag's long name, its value now) differs from the
 * value recorded under that key in the checkpoint st ("run.model": the
 * model file). Keys it did not record pass. */
int dl_checkpoint_check_run(const struct dl_safetensors *st, const char *const *meta,
			    int n_meta, struct dl_error *err);
/* Restores weights, optimizer moments and step, and the position. The
 * optimizer must be initialised with the same configuration. */
int dl_checkpoint_load(const char *path, struct dl_graph *g,
		       struct dl_optim *o, struct dl_train_pos *pos,
		       struct dl_error *err);

#endif
