/* dlrun draw: the model as an SVG picture in the book's box conventions,
 * to stdout or, atomically, to a file. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "io/atomic.h"
#include "render/svg.h"
#include "verbs/verbs.h"

static int write_svg(const char *path, const char *svg, size_t len,
		     struct dl_error *err)
{
	struct dl_atomic out;
	int rc = dl_atomic_open(&out, path, err);
	if (rc)
		return rc;
	if (fwrite(svg, 1, len, out.f) != len) {
		dl_atomic_abort(&out);
		return dl_error_set(err, DL_ERUN, "%s: write failed",
				    out.direct && out.f == stdout ? "stdout" : path);
	}
	return dl_atomic_commit(&out, err);
}

static int draw_main(int argc, char **argv, struct dl_error *err)
{
	static const struct option opts[] = {
		{"output", required_argument, NULL, 'o'},
		{"input-shape", required_argument, NULL, 'I'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *out = "-", *model = NULL;
	int rc = 0, c, n_specs = 0;
	char **specs = calloc((size_t)argc + 1, sizeof *specs);
	if (!specs)
		return dl_error_set(err, DL_ERUN, "out of memory");
	opterr = 0;
	while (rc == 0 && (c = getopt_long(argc, argv, ":o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'o':
			out = optarg;
			break;
		case 'I':
			specs[n_specs++] = optarg;
			break;
		case 'h':
			verb_usage(&verb_draw);
			free(specs);
			return 0;
		default:
			rc = verb_bad_option("draw", c, argv, err);
		}
	}
	struct dl_graph *g = NULL;
	char *svg = NULL;
	size_t len = 0;
	if (rc == 0)
		rc = verb_model_arg("draw", argc, argv, &model, err);
	if (rc == 0)
		rc = dl_model_load(&g, model, err);
	/* symbolic sizes without --input-shape: drawn without shapes */
	if (rc == 0 && (n_specs > 0 || g->n_syms == 0))
		rc = verb_infer_shapes(g, specs, n_specs, 1, err);
	if (rc == 0)
		rc = dl_svg_render(g, &svg, &len, err);
	if (rc == 0)
		rc = write_svg(out, svg, len, err);
	free(svg);
	free(specs);
	dl_graph_free(g);
	return rc;
}

const struct verb verb_draw = {
	"draw",
	"draw the model as an SVG picture",
	"usage: dlrun draw MODEL.yaml [-o FILE.svg] [--input-shape NAME=d,d...]\n"
	"\n"
	"An SVG picture of the model in the box conventions of Fleuret's \"The\n"
	"Little Book of Deep Learning\", data flowing from the inputs at the top\n"
	"to the outputs at the bottom: one rounded box per op, darker when it\n"
	"has trainable parameters and taller for complex ones; hyperparameters\n"
	"that differ from their defaults in blue on the box's right, the entry's\n"
	"name in gray before them; a dashed frame \"xN\" around a repeat (its\n"
	"first copy drawn; \"xN, shared\" when the copies share their parameters);\n"
	"a residual's skip arrow (or its shortcut column)\n"
	"into a circled plus; `in:` wiring as arrows on the left; the output\n"
	"shape (per sample) on the right where an op changes it.\n"
	"\n"
	"  -o, --output FILE      write the picture to FILE, whole or not at all\n"
	"                         (default, or '-': stdout)\n"
	"      --input-shape NAME=d1,d2,...  per-sample sizes for symbolic inputs\n"
	"                         (without them such a model is drawn without\n"
	"                         shapes)\n"
	"  -h, --help             this help\n",
	draw_main,
};
