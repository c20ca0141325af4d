/* Training data held in memory: samples x and their labels (class ids or
 * float targets). */
#ifndef DL_DATA_H
#define DL_DATA_H

#include <stdint.h>
#include <stdio.h>

#include "engine/error.h"
#include "engine/tensor.h"

struct dl_dataset {
	int64_t n;               /* samples */
	struct dl_shape xshape;  /* [n, ...] */
	float *x;
	struct dl_shape yshape;  /* [n, ...] */
	int64_t *ids;            /* class ids, or NULL */
	float *targets;          /* float targets, or NULL */
	int64_t pairs;           /* (x, y) pairs read from a stream */
	void *map[2];            /* x and y when memory-mapped (else NULL): */
	size_t map_len[2];       /* then x or ids/targets point into them */
};

/* Reads x from xpath (an .npy, or member xmember of an .npz) and, when
 * ypath is not NULL, y likewise: class ids when ids, else floats. x_is_int
 * accepts integer x (token ids). Sample counts must match. */
int dl_dataset_load(struct dl_dataset *d, const char *xpath, const char *xmember,
		    const char *ypath, const char *ymember, int ids,
		    int x_is_int, struct dl_error *err);
/* Reads (x, y) .npy pairs from f until it ends and concatenates them
 * (`--data -`). */
int dl_dataset_load_stream(struct dl_dataset *d, FILE *f, int ids,
			   int x_is_int, struct dl_error *err);
/* Moves the last `fraction` of train's samples into val (file order). */
int dl_dataset_split(struct dl_dataset *train, struct dl_dataset *val,
		     double fraction, struct dl_error *err);
void dl_dataset_free(struct dl_dataset *d);  /* NULL-safe */

#endif
