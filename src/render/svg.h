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

/* The helpers of the drawing, shared with the plots (render/plot.c). */

/* A growing string; all zero is an empty one. Appends that run out of
 * memory set oom and leave s as it was; the owner frees s. */
struct dl_svg_buf {
	char *s;
	size_t n, cap;
	int oom;
};
void dl_svg_printf(struct dl_svg_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* s as XML character data (markup escaped, invalid UTF-8 as '?'). */
void dl_svg_escape(struct dl_svg_buf *b, const char *s);
/* The width of s at font size `size` in px, for layout. */
double dl_svg_text_width(const char *s, double size);

#define DL_SVG_FONT "DejaVu Sans, Helvetica, Arial, sans-serif"
#define DL_SVG_LINE "#333333"    /* lines and text */
#define DL_SVG_GRAY "#666666"    /* secondary text */

#endif
