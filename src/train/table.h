/* CSV tables for training (cli.md "Tables"): a header line of column
 * names, one sample a row; the label column (--label, default the last)
 * gives the labels and every other column a float feature. Class names in
 * the label column become ids in sorted order; numbers stay numbers. */
#ifndef DL_TABLE_H
#define DL_TABLE_H

#include "engine/error.h"
#include "train/data.h"

/* The class names of a label column, sorted (byte order, as Python's
 * sorted()): name[i] is class i. n 0: the labels were numbers. */
struct dl_table_classes {
	int n;
	char **name;
	char *column;   /* the label column's name */
};

/* Reads the table at path into d: one input [rows, features] of floats,
 * labels y of class ids (ids) or floats [rows]. label names the label
 * column (NULL: the last). known is NULL for the training file, whose
 * class names (if any) go to *found (freed with dl_table_classes_free);
 * for a validation file it is the training file's classes, and a class
 * not among them is an error. A malformed row names path:line:col. */
int dl_table_load(struct dl_dataset *d, const char *path, const char *label, int ids,
		  const struct dl_table_classes *known, struct dl_table_classes *found,
		  struct dl_error *err);
void dl_table_classes_free(struct dl_table_classes *c);   /* NULL-safe */

#endif
