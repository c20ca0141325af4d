/* Training data held in memory: one array of samples per model input and
 * their labels (class ids or float targets), from .npy files, the named
 * arrays of an .npz, or a stream of .npy arrays. */
#ifndef DL_DATA_H
#define DL_DATA_H

#include <stdint.h>
#include <stdio.h>

#include "engine/error.h"
#include "engine/graph.h"
#include "engine/tensor.h"

/* One array of samples, [n, ...]: floats (integer token ids are read as
 * floats too), or int64 class ids. */
struct dl_array {
	struct dl_shape shape;
	float *f;                /* floats, or NULL */
	int64_t *ids;            /* class ids, or NULL */
	void *map;               /* memory-mapped file (else NULL): then f */
	size_t map_len;          /* or ids points into it */
};

/* What the model takes: its inputs (names, dtype: int or float, per-sample
 * shapes with -1 where symbolic) and the kind of labels of the loss. */
struct dl_data_spec {
	int n_inputs;
	const struct dl_input_spec *inputs;   /* [n_inputs], the graph's */
	int ids;                     /* labels are class ids (else floats) */
};

/* An input array of one sample in a set of n > 1: it serves every sample
 * (its row 0 is every batch row). */
static inline int dl_array_broadcast(const struct dl_array *a, int64_t n)
{
	return a->shape.ndim > 0 && a->shape.d[0] == 1 && n > 1;
}

/* Samples made when a batch asks for them (image files: train/image_data.h)
 * instead of held in x[].f: fill writes the inputs of samples idx[0..b)
 * (for epoch) into x, b samples of the model's one input. */
struct dl_sample_source {
	void *user;
	int (*fill)(void *user, int64_t epoch, const int64_t *idx, int64_t b, float *x,
		    struct dl_error *err);
	/* The order of the epoch's samples still to come (all of them, or
	 * those after a checkpoint's batch), in batches of `batch`, so they
	 * can be made ahead (may be NULL). */
	void (*plan)(void *user, int64_t epoch, const int64_t *order, int64_t n,
		     int64_t batch);
	void (*free)(void *user);
};

struct dl_dataset {
	struct dl_sample_source *src;  /* or NULL: x[].f holds the samples */
	int64_t n;               /* samples */
	int n_x;
	struct dl_array *x;      /* [n_x]: one per model input, in its order */
	struct dl_array y;       /* labels: y.ids or y.f */
	int64_t steps;           /* steps read from a stream */
	struct dl_text *text;    /* a text corpus (train/text.h): then x[0]
	                          * and y hold shapes only, [n, T] */
};

/* Reads a dataset from an .npz: one array per model input named as the
 * input (`x` also for a model with one input) and labels `y`; with val,
 * the arrays `<input>_val` (`x_val`) and `y_val`. An array of the archive
 * that is none of these (and not the other set's) is an error naming it;
 * with val, an archive without any `_val` array gives an empty set (n 0);
 * so is a missing one, and per-sample shapes that are not the model's.
 * With labels_path (not NULL) the labels come from that file instead (an
 * .npy, or the `y` of an .npz). */
int dl_dataset_load_npz(struct dl_dataset *d, const char *path, int val,
			const char *labels_path, const struct dl_data_spec *s,
			struct dl_error *err);
/* Reads x from an .npy and labels from labels_path (an .npy, or the `y`
 * of an .npz); a model with one input. */
int dl_dataset_load_npy(struct dl_dataset *d, const char *xpath,
			const char *labels_path, const struct dl_data_spec *s,
			struct dl_error *err);
/* Reads steps from f until it ends (`--data -`): per step one array per
 * model input in the model's order, then the labels; concatenates them. */
int dl_dataset_load_stream(struct dl_dataset *d, FILE *f,
			   const struct dl_data_spec *s, struct dl_error *err);
/* Moves the last `fraction` of train's samples into val (file order). */
int dl_dataset_split(struct dl_dataset *train, struct dl_dataset *val,
		     double fraction, struct dl_error *err);
/* Elements per sample of an array. */
int64_t dl_array_sample_numel(const struct dl_array *a);
void dl_dataset_free(struct dl_dataset *d);  /* NULL-safe */

#endif
