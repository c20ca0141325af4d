/* Text corpora for training a model with a `vocab` (cli.md, "Data from
 * files"): the text is encoded once into token ids held in a file-backed
 * mapping (so a corpus larger than memory trains), and each batch's samples
 * are windows of T ids at random offsets, as nanoGPT's get_batch: input
 * ids [i, i+T), labels [i+1, i+T+1). */
#ifndef DL_TEXT_CORPUS_H
#define DL_TEXT_CORPUS_H

#include <stdint.h>

#include "engine/error.h"
#include "engine/graph.h"
#include "model/vocab.h"

struct dl_dataset;

struct dl_text {
	const unsigned char *ids; /* the whole text's ids, width bytes each */
	int width;                /* 1, 2 or 4 */
	int64_t start, len;       /* this set's tokens: [start, start + len) */
	int64_t T;                /* window length */
	int64_t max_id;           /* the largest id of the whole text */
	int consecutive;          /* a validation set: sample k is the window
	                           * at k T (else a sample index is its
	                           * window's offset) */
	void *map;                /* what to unmap (the owner's), or NULL */
	size_t map_len;
	void *heap;               /* or what to free, or NULL */
};

/* Reads and encodes the text file at path with the vocabulary v into d, a
 * dataset of one input (the token input) whose samples are windows of T
 * ids: d->n = len / T of them per epoch, with ids labels. A character the
 * vocabulary does not cover is DL_EINPUT naming path:line:col, the
 * character and its position. */
int dl_text_load(struct dl_dataset *d, const char *path, const struct dl_vocab *v,
		 int64_t T, struct dl_error *err);
/* Moves the last fraction of train's tokens into val, whose samples are
 * the consecutive windows of its text (offsets 0, T, 2T, ...). */
int dl_text_split(struct dl_dataset *train, struct dl_dataset *val, double fraction,
		  struct dl_error *err);
/* Makes d a validation set: its (len - 1) / T consecutive windows. */
int dl_text_as_val(struct dl_dataset *d, const char *what, struct dl_error *err);
/* The offsets of epoch's n windows: uniform in [0, len - T) from an rng
 * seeded by (seed, epoch) as the loop's shuffle is (get_batch's
 * torch.randint(len(data) - block_size, ...)), or 0, T, 2T, ... without
 * shuffle (the last one at most len - T - 1). */
void dl_text_offsets(const struct dl_text *x, int64_t seed, int64_t epoch, int shuffle,
		     int64_t *off, int64_t n);
/* The window at off: T input ids as floats and T labels. */
void dl_text_window(const struct dl_text *x, int64_t off, float *in, int64_t *labels);
/* Frees x's own storage and x; NULL-safe. */
void dl_text_free(struct dl_text *x);

/* The longest token input the model takes: the smallest max_len set on
 * any entry (a learned positional_encoding's table), or -1 when none. */
int64_t dl_model_max_context(const struct dl_graph *g);

#endif
