/* The model as a picture: an SVG drawing of a graph in the box conventions
 * of Fleuret's "The Little Book of Deep Learning", data flowing from the
 * inputs at the top to the outputs at the bottom. */
#ifndef DL_SVG_H
#define DL_SVG_H

#include <stddef.h>

#include "engine/graph.h"

/* Draws g: one rounded box per op entry (darker when it has trainable
 * parameters, taller for complex ops), hyperparameters that differ from
 * their defaults in blue on the box's right, a dashed frame "xN" around a
 * repeat (its first copy drawn), residuals as a skip arrow (or a shortcut
 * column) into a circled plus, `in:` wiring as arrows on the left, and the
 * per-sample shape right of the arrow after each op that changes it (when
 * g's shapes are inferred).
 * On success *svg is a malloc()ed, NUL-terminated document of *len bytes
 * that the caller frees; on failure (out of memory) err is set. */
int dl_svg_render(const struct dl_graph *g, char **svg, size_t *len,
		  struct dl_error *err);

#endif
