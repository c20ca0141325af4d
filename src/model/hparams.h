/* The one routine that reads hyperparameters: YAML mapping -> the values of
 * an op's dl_hp_desc table, with defaults, type checks and located errors
 * ("did you mean" for unknown names). */
#ifndef DL_HPARAMS_H
#define DL_HPARAMS_H

#include <yaml.h>

#include "engine/op.h"

/* Reads the mapping `map` (or an empty/null node: all defaults) of doc into
 * n->hp, allocating it (n->op, n->file, n->line, n->col must be set).
 * Unknown keys, wrong types, bad values: DL_EINPUT at their line:col. */
int dl_hp_read(struct dl_node *n, yaml_document_t *doc, yaml_node_t *map,
	       struct dl_error *err);

/* Allocates n->hp with every hyperparameter at its default (the required
 * ones unset), for nodes built by C code (a composite's inner graph). */
int dl_hp_defaults(struct dl_node *n, struct dl_error *err);

/* For tests and tools: sets up n for op from the text of a YAML flow
 * mapping body, e.g. "kernel_size: 3, stride: [2, 1]" ("" for defaults).
 * Free with dl_node_release. */
int dl_node_setup(struct dl_node *n, const struct dl_op_desc *op,
		  const char *hps, struct dl_error *err);
/* Frees what dl_node_setup, dl_hp_read and infer allocated in n (hp,
 * params, priv); NULL-safe. Does not free n itself. */
void dl_node_release(struct dl_node *n);

/* Writes the default of hyperparameter d as shown by `dlrun ops`
 * ("stride=1", "out_channels" when required). */
void dl_hp_describe(const struct dl_hp_desc *d, char *buf, size_t size);

#endif
