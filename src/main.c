/* dlrun: parses the verb, runs it, prints its error. Exit codes: 0 success,
 * 1 failure while running, 2 bad invocation or bad input. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "io/image.h"
#include "train/dist.h"
#include "verbs/verbs.h"

static const struct verb *const verbs[] = {
	&verb_infer, &verb_train, &verb_gradcheck, &verb_init, &verb_summary,
	&verb_bench, &verb_draw, &verb_ops, &verb_import, &verb_generate, &verb_plot,
	NULL,
};

static void usage(FILE *f)
{
	fputs("usage: dlrun VERB [OPTIONS] MODEL.yaml\n"
	      "       dlrun --version\n\nverbs:\n", f);
	for (const struct verb *const *v = verbs; *v; v++)
		fprintf(f, "  %-9s %s\n", (*v)->name, (*v)->summary);
	fputs("\n'dlrun VERB --help' describes a verb; man dlrun and man "
	      "dlrun-model describe everything.\n", f);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
		printf("dlrun %s (onnx import: %s, MPI: %s, PNG: %s, JPEG: %s)\n", PACKAGE_VERSION,
		       verb_import_built ? "yes" : "no", dl_dist_built() ? "yes" : "no",
		       dl_image_supported(DL_IMAGE_PNG) ? "yes" : "no",
		       dl_image_supported(DL_IMAGE_JPEG) ? "yes" : "no");
		return 0;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	/* A closed pipe or a file-size limit makes write() fail with EPIPE or
	 * EFBIG, which the verbs report, instead of killing the process
	 * midway through a file. */
	signal(SIGPIPE, SIG_IGN);
	signal(SIGXFSZ, SIG_IGN);
	struct dl_error err = {0};
	const char *names[16];
	int n = 0;
	for (const struct verb *const *v = verbs; *v; v++) {
		names[n++] = (*v)->name;
		if (strcmp((*v)->name, argv[1]) == 0) {
			int rc = (*v)->run(argc - 1, argv + 1, &err);
			if (rc == 0)
				return 0;
			if (rc == DL_EPIPE)
				return 1;    /* as `head` closing a pipe: nothing to say */
			fprintf(stderr, "dlrun: %s\n", err.msg[0] ? err.msg : "failed");
			if (rc < DL_ESIGNAL)
				return -rc;  /* 128 + the signal, as the shell reports it */
			return rc == DL_EINPUT ? 2 : 1;
		}
	}
	names[n] = NULL;
	const char *s = dl_suggest(argv[1], names);
	if (s)
		fprintf(stderr, "dlrun: unknown verb '%s'; did you mean '%s'?\n", argv[1], s);
	else
		fprintf(stderr, "dlrun: unknown verb '%s'; see 'dlrun --help'\n", argv[1]);
	return 2;
}
