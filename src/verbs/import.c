/* dlrun import: an ONNX file to a dlrun model file and its weights. The
 * translation is src/import/onnx.c; without protobuf-c and onnx.proto at
 * build time the verb exists and says so. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "verbs/verbs.h"
#ifdef HAVE_ONNX_IMPORT
#include "import/onnx.h"
const int verb_import_built = 1;
#else
const int verb_import_built = 0;
#endif

/* MODEL.onnx -> MODEL.yaml (the extension replaced, else appended).
 * malloc()ed; caller frees. */
static char *default_out(const char *in)
{
	size_t n = strlen(in);
	const char *dot = strrchr(in, '.'), *slash = strrchr(in, '/');
	if (dot && (!slash || dot > slash) && dot != in && dot[-1] != '/')
		n = (size_t)(dot - in);
	char *s = malloc(n + 6);
	if (s) {
		memcpy(s, in, n);
		memcpy(s + n, ".yaml", 6);
	}
	return s;
}

static int import_main(int argc, char **argv, struct dl_error *err)
{
	static const struct option opts[] = {
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *out = NULL, *in = NULL;
	int rc = 0, c;
	opterr = 0;
	while (rc == 0 && (c = getopt_long(argc, argv, ":o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'o':
			out = optarg;
			break;
		case 'h':
			verb_usage(&verb_import);
			return 0;
		default:
			rc = verb_bad_option("import", c, argv, err);
		}
	}
	if (rc == 0)
		rc = verb_model_arg("import", argc, argv, &in, err);
	if (rc)
		return rc;
#ifdef HAVE_ONNX_IMPORT
	char *path = out ? strdup(out) : default_out(in);
	if (!path)
		return dl_error_set(err, DL_ERUN, "out of memory");
	rc = dl_onnx_import(in, path, err);
	free(path);
	return rc;
#else
	(void)out;
	(void)default_out;
	return dl_error_set(err, DL_EINPUT,
			    "import: this dlrun was built without ONNX support "
			    "(configure found no protoc-c, libprotobuf-c or onnx.proto)");
#endif
}

const struct verb verb_import = {
	"import",
	"convert an ONNX model to a model file and its weights",
	"usage: dlrun import MODEL.onnx [-o OUT.yaml]\n"
	"\n"
	"Writes OUT.yaml (default: MODEL with .yaml) and its weights\n"
	"OUT.safetensors from the ONNX file's graph and initializers, so that\n"
	"'dlrun infer OUT.yaml' gives the ONNX model's outputs. An op or\n"
	"attribute that has no dlrun equivalent stops the import (exit 2) and\n"
	"nothing is written.\n"
	"\n"
	"  -o, --output PATH   the model file to write (its weights go beside it,\n"
	"                      with .safetensors)\n"
	"  -h, --help          this help\n",
	import_main,
};
