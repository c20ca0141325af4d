/* Training curves as an SVG picture, in the style of the model drawings
 * (render/svg.h): the loss panel (training loss solid, validation loss
 * dashed) and, when a log has it, the accuracy panel below, with axes,
 * ticks and a legend; one colour per run when several are compared. */
#ifndef DL_PLOT_H
#define DL_PLOT_H

#include <stddef.h>

#include "engine/error.h"

/* Points (x[i], y[i]); a NaN y breaks the line there. */
struct dl_plot_series {
	double *x, *y;
	int n, cap;
};

struct dl_plot_run {
	const char *name;                      /* the legend's label */
	struct dl_plot_series loss, val_loss, val_accuracy;
};

/* Appends a point; -1 when out of memory. */
int dl_plot_add(struct dl_plot_series *s, double x, double y);
void dl_plot_series_free(struct dl_plot_series *s);   /* NULL-safe */

/* Draws the runs against x (xlabel: "step" or "epoch"). On success *svg
 * is a malloc()ed, NUL-terminated document of *len bytes that the caller
 * frees; on failure (out of memory) err is set. */
int dl_plot_render(const struct dl_plot_run *runs, int n_runs, const char *xlabel,
		   char **svg, size_t *len, struct dl_error *err);

#endif
