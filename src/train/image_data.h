/* Image files as training data: a folder with one subfolder per class
 * (torchvision's ImageFolder) or a list file of `PATH LABEL` lines,
 * decoded and prepared by the model's `data:` pipeline on worker threads,
 * a few batches ahead of the training step. */
#ifndef DL_IMAGE_DATA_H
#define DL_IMAGE_DATA_H

#include <stdint.h>

#include "engine/graph.h"
#include "engine/rng.h"
#include "io/imgproc.h"
#include "train/data.h"

/* 1 when path is image data: a directory, or a list file whose first
 * line is `PATH LABEL` (not an .npy or .npz); 2 when it is one image. */
int dl_image_data_probe(const char *path);

/* Reads the folder or list file at path into d: labels in d->y.ids, the
 * samples made by d->src with the model's `data:` pipeline (train: the
 * `train:` one, random steps drawn from (seed, epoch, sample)), threads
 * decoding (<= 0: one). The first image is prepared at once, so a shape
 * that is not the model input's fails here. *n_classes (may be NULL)
 * gets the number of classes. */
int dl_image_data_load(struct dl_dataset *d, const char *path, const struct dl_graph *g,
		       int train, uint64_t seed, int threads, int64_t *n_classes,
		       struct dl_error *err);

/* The image files (.png, .jpg, .jpeg) under dir at any depth, sorted by
 * folder, then name: *paths (malloc()ed, each path too; free with
 * dl_image_paths_free) and *n. */
int dl_image_list_dir(const char *dir, char ***paths, int64_t *n, struct dl_error *err);
void dl_image_paths_free(char **paths, int64_t n);

/* The model's image input: one float input of fixed shape [C, H, W] with C
 * 1 or 3, and a `data: image:` (train: `train:`) pipeline; else
 * DL_EINPUT saying what is missing. */
int dl_image_input(const struct dl_graph *g, int train, const struct dl_pipeline **pipe,
		   int *c, int *h, int *w, struct dl_error *err);
/* Reads, decodes and prepares the image file at path into out ([c, h, w]
 * floats, as dl_image_input gave), drawing random steps from rng. */
int dl_image_sample(const struct dl_pipeline *pipe, int c, int h, int w, const char *path,
		    struct dl_rng *rng, float *out, struct dl_error *err);
/* The generator of sample `index` in `epoch`: the same for a seed at any
 * thread count or order. */
void dl_image_rng(struct dl_rng *r, uint64_t seed, int64_t epoch, int64_t index);

#endif
