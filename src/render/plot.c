/* Training curves as SVG: panels with axes, 1-2-5 ticks and light grid
 * lines, a polyline per series (broken where a value is not finite, a dot
 * for a lone point), validation dashed, and the legend right of the panels.
 * The look (font, line colour, sizes) is the model drawing's (svg.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "render/plot.h"
#include "render/svg.h"

/* ---- sizes, in px ---- */

#define LEFT 64.0       /* room for the y tick labels */
#define TOP 34.0        /* room for a panel's title */
#define PW 480.0        /* a panel's plotting area */
#define PH 240.0
#define PH_ACC 160.0    /* the accuracy panel */
#define BETWEEN 64.0    /* x tick labels, then the next panel's title */
#define BOTTOM 46.0     /* x tick labels and the x axis' name */
#define LEGEND_GAP 24.0
#define SAMPLE_W 28.0   /* a legend's line sample */
#define LEGEND_H 18.0
#define MARGIN 14.0
#define FS_TITLE 12.0
#define FS_TICK 10.0
#define FS_LEGEND 11.0

#define C_GRID "#e6e6e6"
#define DASH "6 4"

/* One colour per run (several runs), or per series (one run). */
static const char *const palette[] = {
	"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
	"#17becf", "#7f7f7f", "#bcbd22",
};
#define N_PALETTE (int)(sizeof palette / sizeof *palette)

int dl_plot_add(struct dl_plot_series *s, double x, double y)
{
	if (s->n == s->cap) {
		int cap = s->cap ? 2 * s->cap : 64;
		double *nx = realloc(s->x, (size_t)cap * sizeof *nx);
		if (!nx)
			return -1;
		s->x = nx;
		double *ny = realloc(s->y, (size_t)cap * sizeof *ny);
		if (!ny)
			return -1;
		s->y = ny;
		s->cap = cap;
	}
	s->x[s->n] = x;
	s->y[s->n] = y;
	s->n++;
	return 0;
}

void dl_plot_series_free(struct dl_plot_series *s)
{
	if (!s)
		return;
	free(s->x);
	free(s->y);
	memset(s, 0, sizeof *s);
}

/* ---- scales ---- */

struct range {
	double lo, hi;
	int any;
};

static void widen(struct range *r, const struct dl_plot_series *s, int use_x)
{
	for (int i = 0; i < s->n; i++) {
		double v = use_x ? s->x[i] : s->y[i];
		if (!isfinite(v) || !isfinite(s->y[i]))
			continue;
		if (!r->any || v < r->lo)
			r->lo = v;
		if (!r->any || v > r->hi)
			r->hi = v;
		r->any = 1;
	}
}

/* The 1, 2 or 5 times a power of ten that cuts span into about n. */
static double nice_step(double span, int n)
{
	double raw = span / n, p = pow(10, floor(log10(raw))), f = raw / p;
	return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * p;
}

/* A range with room: empty -> [0, 1], one value -> around it; a margin of
 * 5% on the value axis (pad). */
static void settle(struct range *r, int pad)
{
	if (!r->any) {
		r->lo = 0;
		r->hi = 1;
		return;
	}
	if (r->hi - r->lo <= 0) {
		double d = fabs(r->lo) > 0 ? fabs(r->lo) * 0.1 : 0.5;
		r->lo -= d;
		r->hi += d;
	} else if (pad) {
		double d = (r->hi - r->lo) * 0.05;
		r->lo -= d;
		r->hi += d;
	}
}

static void tick_label(char *buf, size_t size, double v, double step)
{
	int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
	if (fabs(v) < step * 1e-6)
		v = 0;
	snprintf(buf, size, "%.*f", dec, v);
}

/* ---- a panel ---- */

struct panel {
	double x0, y0, w, h;        /* the plotting area */
	struct range xr, yr;
	int int_x;                  /* x counts steps or epochs: whole ticks */
};

static double px(const struct panel *P, double x)
{
	return P->x0 + (x - P->xr.lo) / (P->xr.hi - P->xr.lo) * P->w;
}

static double py(const struct panel *P, double y)
{
	return P->y0 + P->h - (y - P->yr.lo) / (P->yr.hi - P->yr.lo) * P->h;
}

static void axes(struct dl_svg_buf *b, const struct panel *P, const char *title,
		 const char *xlabel)
{
	/* the grid and the ticks */
	double ys = nice_step(P->yr.hi - P->yr.lo, 5);
	char lab[48];
	for (double v = ceil(P->yr.lo / ys - 1e-9) * ys; v <= P->yr.hi + ys * 1e-9; v += ys) {
		double y = py(P, v);
		dl_svg_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\""
			      C_GRID "\"/>\n", P->x0, y, P->x0 + P->w, y);
		dl_svg_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\""
			      DL_SVG_LINE "\"/>\n", P->x0 - 4, y, P->x0, y);
		tick_label(lab, sizeof lab, v, ys);
		dl_svg_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%g\" text-anchor=\"end\" "
			      "fill=\"" DL_SVG_GRAY "\">%s</text>\n", P->x0 - 7, y + FS_TICK * 0.35,
			      FS_TICK, lab);
	}
	double xs = nice_step(P->xr.hi - P->xr.lo, 6);
	if (P->int_x && xs < 1)
		xs = 1;
	for (double v = ceil(P->xr.lo / xs - 1e-9) * xs; v <= P->xr.hi + xs * 1e-9; v += xs) {
		double x = px(P, v);
		dl_svg_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\""
			      C_GRID "\"/>\n", x, P->y0, x, P->y0 + P->h);
		dl_svg_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\""
			      DL_SVG_LINE "\"/>\n", x, P->y0 + P->h, x, P->y0 + P->h + 4);
		tick_label(lab, sizeof lab, v, xs);
		dl_svg_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%g\" text-anchor=\"middle\" "
			      "fill=\"" DL_SVG_GRAY "\">%s</text>\n", x, P->y0 + P->h + 6 + FS_TICK,
			      FS_TICK, lab);
	}
	/* the axes, the panel's title and the x axis' name */
	dl_svg_printf(b, "<path d=\"M%.1f,%.1fV%.1fH%.1f\" fill=\"none\" stroke=\"" DL_SVG_LINE
		      "\" stroke-width=\"1.2\"/>\n", P->x0, P->y0, P->y0 + P->h, P->x0 + P->w);
	dl_svg_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%g\" font-weight=\"bold\">%s"
		      "</text>\n", P->x0, P->y0 - 10, FS_TITLE, title);
	dl_svg_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%g\" text-anchor=\"middle\" "
		      "fill=\"" DL_SVG_GRAY "\">%s</text>\n", P->x0 + P->w / 2,
		      P->y0 + P->h + 12 + 2 * FS_TICK, FS_TICK + 1, xlabel);
}

/* The series as polylines, broken at values that are not finite; a lone
 * point as a dot. */
static void curve(struct dl_svg_buf *b, const struct panel *P, const struct dl_plot_series *s,
		  const char *color, int dashed)
{
	int i = 0;
	while (i < s->n) {
		while (i < s->n && !(isfinite(s->y[i]) && isfinite(s->x[i])))
			i++;
		int j = i;
		while (j < s->n && isfinite(s->y[j]) && isfinite(s->x[j]))
			j++;
		if (j - i == 1) {
			dl_svg_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n",
				      px(P, s->x[i]), py(P, s->y[i]), color);
		} else if (j - i > 1) {
			dl_svg_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" "
				      "stroke-linejoin=\"round\"%s points=\"", color,
				      dashed ? " stroke-dasharray=\"" DASH "\"" : "");
			for (int k = i; k < j; k++)
				dl_svg_printf(b, "%s%.1f,%.1f", k > i ? " " : "", px(P, s->x[k]),
					      py(P, s->y[k]));
			dl_svg_printf(b, "\"/>\n");
		}
		i = j;
	}
}

/* ---- the legend ---- */

struct entry {
	const char *label;
	const char *color;
	int dashed;
};

static void legend(struct dl_svg_buf *b, double x, double y, const struct entry *e, int n)
{
	for (int i = 0; i < n; i++, y += LEGEND_H) {
		dl_svg_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
			      "stroke-width=\"1.6\"%s/>\n", x, y, x + SAMPLE_W, y, e[i].color,
			      e[i].dashed ? " stroke-dasharray=\"" DASH "\"" : "");
		dl_svg_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%g\">", x + SAMPLE_W + 6,
			      y + FS_LEGEND * 0.35, FS_LEGEND);
		dl_svg_escape(b, e[i].label);
		dl_svg_printf(b, "</text>\n");
	}
}

int dl_plot_render(const struct dl_plot_run *runs, int n_runs, const char *xlabel,
		   char **svg, size_t *len, struct dl_error *err)
{
	*svg = NULL;
	*len = 0;
	struct range xr = {0}, lr = {0}, ar = {0};
	for (int r = 0; r < n_runs; r++) {
		widen(&xr, &runs[r].loss, 1);
		widen(&xr, &runs[r].val_loss, 1);
		widen(&xr, &runs[r].val_accuracy, 1);
		widen(&lr, &runs[r].loss, 0);
		widen(&lr, &runs[r].val_loss, 0);
		widen(&ar, &runs[r].val_accuracy, 0);
	}
	int acc = ar.any;
	settle(&xr, 0);
	settle(&lr, 1);
	settle(&ar, 1);
	if (acc && ar.lo < 0 && ar.hi - ar.lo > 0)
		ar.lo = 0;

	/* the legend: one entry a series for one run; else one a run, and
	 * the line styles in gray */
	struct entry *e = calloc((size_t)n_runs + 4, sizeof *e);
	if (!e)
		return dl_error_set(err, DL_ERUN, "out of memory");
	int ne = 0;
	if (n_runs == 1) {
		e[ne++] = (struct entry){"loss", palette[0], 0};
		if (runs[0].val_loss.n)
			e[ne++] = (struct entry){"val_loss", palette[1], 1};
		if (acc)
			e[ne++] = (struct entry){"val_accuracy", palette[2], 1};
	} else {
		for (int r = 0; r < n_runs; r++)
			e[ne++] = (struct entry){runs[r].name, palette[r % N_PALETTE], 0};
		e[ne++] = (struct entry){"training", DL_SVG_GRAY, 0};
		e[ne++] = (struct entry){"validation", DL_SVG_GRAY, 1};
	}
	double lw = 0;
	for (int i = 0; i < ne; i++) {
		double w = dl_svg_text_width(e[i].label, FS_LEGEND);
		if (w > lw)
			lw = w;
	}

	struct panel P = {LEFT, TOP, PW, PH, xr, lr, 1};
	struct panel A = {LEFT, TOP + PH + BETWEEN, PW, PH_ACC, xr, ar, 1};
	double W = LEFT + PW + LEGEND_GAP + SAMPLE_W + 6 + lw + MARGIN;
	double H = (acc ? A.y0 + A.h : P.y0 + P.h) + BOTTOM;
	struct dl_svg_buf body = {0}, out = {0};
	axes(&body, &P, "loss", xlabel);
	if (acc)
		axes(&body, &A, "accuracy", xlabel);
	for (int r = 0; r < n_runs; r++) {
		const char *c = palette[r % N_PALETTE];
		curve(&body, &P, &runs[r].loss, c, 0);
		curve(&body, &P, &runs[r].val_loss, n_runs == 1 ? palette[1] : c, 1);
		if (acc)
			curve(&body, &A, &runs[r].val_accuracy, n_runs == 1 ? palette[2] : c, 1);
	}
	legend(&body, LEFT + PW + LEGEND_GAP, TOP + 6, e, ne);

	dl_svg_printf(&out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
		      "viewBox=\"0 0 %.0f %.0f\" font-family=\"" DL_SVG_FONT "\">\n<title>",
		      ceil(W), ceil(H), ceil(W), ceil(H));
	for (int r = 0; r < n_runs; r++) {
		dl_svg_printf(&out, "%s", r ? ", " : "");
		dl_svg_escape(&out, runs[r].name);
	}
	dl_svg_printf(&out, "</title>\n<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" "
		      "fill=\"#ffffff\"/>\n<g>\n%s</g>\n</svg>\n", ceil(W), ceil(H),
		      body.s ? body.s : "");
	free(e);
	int oom = body.oom || out.oom;
	free(body.s);
	if (oom) {
		free(out.s);
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	*svg = out.s;
	*len = out.n;
	return 0;
}
