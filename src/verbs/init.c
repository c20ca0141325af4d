/* dlrun init: fresh parameters with PyTorch's default initialisation,
 * deterministic from --seed. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "verbs/verbs.h"

static int init_main(int argc, char **argv, struct dl_error *err)
{
	static const struct option opts[] = {
		{"output", required_argument, NULL, 'o'},
		{"seed", required_argument, NULL, 's'},
		{"input-shape", required_argument, NULL, 'I'},
		{"force", no_argument, NULL, 'F'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *out = NULL, *model = NULL;
	long long seed = 0;
	int force = 0, rc = 0, c, n_specs = 0;
	char **specs = calloc((size_t)argc + 1, sizeof *specs);
	if (!specs)
		return dl_error_set(err, DL_ERUN, "out of memory");
	opterr = 0;
	while (rc == 0 && (c = getopt_long(argc, argv, ":o:s:h", opts, NULL)) != -1) {
		switch (c) {
		case 'o':
			out = optarg;
			break;
		case 's':
			rc = verb_int("init", "--seed", optarg, 0, INT64_MAX, &seed, err);
			break;
		case 'I':
			specs[n_specs++] = optarg;
			break;
		case 'F':
			force = 1;
			break;
		case 'h':
			verb_usage(&verb_init);
			free(specs);
			return 0;
		default:
			rc = verb_bad_option("init", c, argv, err);
		}
	}
	struct dl_graph *g = NULL;
	char *path = NULL;
	if (rc == 0)
		rc = verb_model_arg("init", argc, argv, &model, err);
	if (rc == 0)
		rc = dl_model_load(&g, model, err);
	if (rc == 0)
		rc = verb_infer_shapes(g, specs, n_specs, 1, err);
	if (rc == 0) {
		path = out ? strdup(out) : dl_model_default_weights(g);
		if (!path)
			rc = dl_error_set(err, DL_ERUN, "out of memory");
	}
	if (rc == 0 && !out && !force && access(path, F_OK) == 0)
		rc = dl_error_set(err, DL_EINPUT,
				  "init: %s exists; name the output with -o (or --force to replace it)",
				  path);
	if (rc == 0) {
		dl_graph_init_params(g, (uint64_t)seed);
		char seedtxt[32];
		snprintf(seedtxt, sizeof seedtxt, "%lld", seed);
		const char *meta[] = {"format", "pt", "dlrun_init_seed", seedtxt};
		rc = dl_model_save_weights(g, path, meta, 2, err);
	}
	free(path);
	free(specs);
	dl_graph_free(g);
	return rc;
}

const struct verb verb_init = {
	"init",
	"write fresh weights (PyTorch's default initialisation)",
	"usage: dlrun init MODEL.yaml [-o WEIGHTS] [--seed S] [--input-shape NAME=d,d...]\n"
	"\n"
	"Writes every parameter and buffer of the model, initialised as PyTorch's\n"
	"modules do by default, deterministically from the seed. A parameter\n"
	"entry's tensor is N(0, 1) (torch.randn); a tied tensor (share:, a shared\n"
	"repeat) is drawn and written once, under its owner's key.\n"
	"\n"
	"  -o, --output PATH      weights file (default: the model's default weights\n"
	"                         path, which must not exist yet unless --force)\n"
	"  -s, --seed S           random seed (default 0)\n"
	"      --input-shape NAME=d1,d2,...  per-sample sizes for symbolic inputs\n"
	"      --force            replace an existing default weights file\n"
	"  -h, --help             this help\n",
	init_main,
};
