/* The model file's `data:` mapping: how image files become the model's
 * input (model-format section 1, cli.md "Data from files"). */
#ifndef DL_DATA_SPEC_H
#define DL_DATA_SPEC_H

#include <yaml.h>

#include "engine/error.h"
#include "io/imgproc.h"

/* One block (the graph frees it with free()). */
struct dl_data_conf {
	int has_image, has_train;
	struct dl_pipeline image;    /* evaluation and `infer` */
	struct dl_pipeline train;    /* training; image's when not given */
	char classes[4096];          /* class names file, resolved against the
	                              * model file's directory, or "" */
	int line, col;               /* the data: key's value */
};

/* Parses the `data:` value at node data of doc (file names it in
 * file:line:col errors) into *out (malloc()ed, one block). */
int dl_data_spec_parse(struct dl_data_conf **out, const char *file, yaml_document_t *doc,
		       yaml_node_t *data, struct dl_error *err);

/* The class names of c's classes file (one a line; *names and its
 * strings malloc()ed, free with dl_data_classes_free); none: *n 0. */
int dl_data_classes(const struct dl_data_conf *c, char ***names, int *n,
		    struct dl_error *err);
void dl_data_classes_free(char **names, int n);

#endif
