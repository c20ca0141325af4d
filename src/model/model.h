/* The model layer (src/model): load a model description, give it weights,
 * run it. The verbs in src/verbs and the tests use only this and the
 * headers it includes. */
#ifndef DL_MODEL_H
#define DL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/error.h"
#include "engine/graph.h"
#include "engine/tensor.h"

/* Parses the model file at path into a graph (caller frees with
 * dl_graph_free). When the inputs have no symbolic sizes, shape inference
 * runs at once for a batch of one, so shape errors and the parameter list
 * are known before any data is read. */
int dl_model_load(struct dl_graph **out, const char *path, struct dl_error *err);
/* The same from the len bytes of a model file held in memory; path names
 * it in messages and resolves its relative weights: path. */
int dl_model_load_buffer(struct dl_graph **out, const char *path,
			 const char *buf, size_t len, struct dl_error *err);

/* A training default from the model's `train:` mapping, as text ("64",
 * "0.9,0.99" for a list), or NULL; *line and *col (may be NULL) get its
 * place. */
const char *dl_model_train_default(const struct dl_graph *g, const char *key,
				   int *line, int *col);

/* The default weights path: the model's `weights:` key, else the model
 * path with .yaml/.yml replaced by .safetensors. malloc()ed; caller frees. */
char *dl_model_default_weights(const struct dl_graph *g);

/* Binds every symbolic size from "NAME=d1,d2,..." per-sample shapes (one
 * string per input, in any order) and runs shape inference with batch n. */
int dl_model_infer_spec(struct dl_graph *g, const char *const *specs,
			int n_specs, int64_t batch, struct dl_error *err);
/* The same, with every symbolic size that no spec binds set to fill when
 * fill > 0; with fill 0 such a size is an error, and *unbound (may be
 * NULL) is set to 1 when that is the error. */
int dl_model_infer_spec_fill(struct dl_graph *g, const char *const *specs,
			     int n_specs, int64_t batch, int64_t fill,
			     int *unbound, struct dl_error *err);

/* Loads parameters and buffers from a safetensors file: every one must be
 * there with its shape (F32, F16, BF16 or F64); extra tensors are an error
 * except num_batches_tracked. Needs the parameter layout (a successful
 * shape inference). */
int dl_model_load_weights(struct dl_graph *g, const char *path,
			  struct dl_error *err);
/* The same, reporting every missing, unexpected and mis-shaped key at once
 * (one line). Keys the model does not use pass when ignore_extra is set or
 * an `ignore_keys:` glob names them; *n_ignored (may be NULL) gets their
 * number. A tied tensor's second key may be there with equal values. */
int dl_model_load_weights_ext(struct dl_graph *g, const char *path,
			      int ignore_extra, int *n_ignored,
			      struct dl_error *err);
/* One key problem of a weights file. */
struct dl_weights_problem {
	int kind;                  /* 0 missing, 1 unexpected, 2 mis-shaped */
	char key[256];
	struct dl_shape file;      /* the file's shape (unexpected, mis-shaped) */
	struct dl_shape model;     /* the model's (missing, mis-shaped) */
	int line, col;             /* the model entry's place (missing,
	                            * mis-shaped), else 0 */
};
/* Lists the key problems of a weights file (as dl_model_load_weights_ext
 * sees them) into *out (malloc()ed, caller frees; NULL when none) and *n. */
int dl_model_check_weights(struct dl_graph *g, const char *path,
			   int ignore_extra, struct dl_weights_problem **out,
			   int *n, struct dl_error *err);
/* Writes parameters and buffers as F32 safetensors, atomically. */
int dl_model_save_weights(struct dl_graph *g, const char *path,
			  const char *const *meta, int n_meta,
			  struct dl_error *err);
/* Number of trainable parameters (buffers excluded), and of buffers; a
 * tied tensor counts once. */
int64_t dl_model_count_params(const struct dl_graph *g, int64_t *buffers);

#define DLRUN_VERSION PACKAGE_VERSION

#endif
