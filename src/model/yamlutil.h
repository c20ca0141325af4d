/* Strict literal typing of YAML scalars, shared by the hyperparameter
 * reader and the model loader: decimal numbers as strtoll/strtod read
 * them (no octal, hex or base 60), booleans true/false only. */
#ifndef DL_YAMLUTIL_H
#define DL_YAMLUTIL_H

#include <stdint.h>
#include <yaml.h>

/* 0 on success, -1 when s is not such a literal. */
int dl_parse_int(const char *s, int64_t *out);
int dl_parse_float(const char *s, double *out);
/* The same on a node: plain (unquoted) scalars only. */
int dl_yaml_int(const yaml_node_t *y, int64_t *out);
int dl_yaml_float(const yaml_node_t *y, double *out);
int dl_yaml_bool(const yaml_node_t *y, int *out);
/* null, ~ or an empty plain scalar. */
int dl_yaml_null(const yaml_node_t *y);
/* "a list", "a mapping", "a scalar", "null": for messages. */
const char *dl_yaml_kind(const yaml_node_t *y);

#endif
