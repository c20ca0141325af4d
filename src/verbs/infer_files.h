/* dlrun infer on image files (operands after the model): each file, or
 * each image in a folder, through the model's `data: image:` pipeline, one
 * step per file; --top K / --json print classes instead of arrays. */
#ifndef DL_INFER_FILES_H
#define DL_INFER_FILES_H

#include <stdio.h>

#include "model/model.h"
#include "io/imgproc.h"

struct infer_files {
	char **paths;             /* every file, folders expanded */
	int64_t n, next;
	const struct dl_pipeline *pipe;
	int c, h, w;              /* the model input's [C, H, W] */
	char **classes;           /* data: classes names, or NULL */
	int n_classes;
	int top;                  /* --top K (0: not given) */
	int json;                 /* --json */
};

/* The operands: image files and folders (sorted, any depth). */
int infer_files_open(struct infer_files *F, const struct dl_graph *g, char **operands,
		     int n, int top, int json, struct dl_error *err);
/* The next file's sample into buf ([c, h, w] floats) and its path: 1, or
 * 0 after the last. */
int infer_files_next(struct infer_files *F, float *buf, const char **path,
		     struct dl_error *err);
/* --top / --json lines of one file from its output ([1, ...], values
 * floats). */
int infer_files_print(const struct infer_files *F, FILE *f, const char *path,
		      const float *out, int64_t n, struct dl_error *err);
void infer_files_close(struct infer_files *F);   /* NULL-safe */

#endif
