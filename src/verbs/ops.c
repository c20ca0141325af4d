/* dlrun ops: the ops this binary knows, from their descriptor tables. */
#include <stdio.h>
#include <string.h>

#include "model/hparams.h"
#include "ops/registry.h"
#include "verbs/verbs.h"

static void print_inputs(const struct dl_op_desc *op)
{
	if (op->max_in < 0)
		printf("  inputs: %d or more (in: [a, b, ...])\n", op->min_in);
	else if (op->min_in == op->max_in)
		printf("  inputs: %d%s\n", op->min_in, op->min_in > 1 ? " (in: [a, b, ...])" : "");
	else
		printf("  inputs: %d to %d\n", op->min_in, op->max_in);
}

/* A size that follows from the input (in_channels, d_model, ...). */
static int inferred(const struct dl_hp_desc *d)
{
	return d->def && strcmp(d->def, "inferred") == 0;
}

static int ops_main(int argc, char **argv, struct dl_error *err)
{
	/* -h/--help anywhere, as getopt_long's verbs take it: `ops conv2d -h` */
	for (int i = 1; i < argc && strcmp(argv[i - 1], "--") != 0; i++)
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			verb_usage(&verb_ops);
			return 0;
		}
	/* `--` ends the options: `ops -- conv2d` */
	int dd = 0;
	for (int i = 1; i < argc; i++)
		if (!dd && strcmp(argv[i], "--") == 0) {
			dd = 1;
			memmove(argv + i, argv + i + 1, (size_t)(argc - i) * sizeof *argv);
			argc--;
			i--;
		} else if (!dd && argv[i][0] == '-') {
			return dl_error_set(err, DL_EINPUT,
					    "ops: unknown option '%s'; see 'dlrun ops --help'", argv[i]);
		}
	if (argc > 2)
		return dl_error_set(err, DL_EINPUT, "ops: takes at most one op name");
	char buf[256];
	if (argc == 2) {
		const struct dl_op_desc *op = dl_op_find(argv[1]);
		if (!op) {
			const char *s = dl_op_suggest(argv[1]);
			if (s)
				return dl_error_set(err, DL_EINPUT, "ops: unknown op '%s'; did you mean '%s'?",
						    argv[1], s);
			return dl_error_set(err, DL_EINPUT, "ops: unknown op '%s'", argv[1]);
		}
		printf("%s: %s\n", op->name, op->doc ? op->doc : "");
		print_inputs(op);
		printf("  hyperparameters:%s\n", op->n_hp ? "" : " none");
		for (int i = 0; i < op->n_hp; i++) {
			dl_hp_describe(&op->hp[i], buf, sizeof buf);
			printf("    %s%s\n", buf,
			       op->hp[i].flags & DL_HP_REQUIRED ? " (required)" : "");
		}
		printf("  parameters: %s\n", op->params ? op->params : "none");
		printf("  training: %s\n", op->backward ? "yes" : "not yet (no backward)");
		return 0;
	}
	/* one line an op: the hyperparameters one writes, in order, then the
	 * sizes that follow from the input (cli.md's `conv2d out_channels
	 * kernel_size stride=1 padding=0 ...`) */
	for (const struct dl_op_desc *const *o = dl_op_all(); *o; o++) {
		fputs((*o)->name, stdout);
		for (int pass = 0; pass < 2; pass++)
			for (int i = 0; i < (*o)->n_hp; i++) {
				if (inferred(&(*o)->hp[i]) != pass)
					continue;
				dl_hp_describe(&(*o)->hp[i], buf, sizeof buf);
				char *paren = strstr(buf, " (");
				if (paren)
					*paren = '\0';
				printf(" %s", buf);
			}
		putchar('\n');
	}
	return 0;
}

const struct verb verb_ops = {
	"ops",
	"list the ops, or describe one",
	"usage: dlrun ops [OP]\n"
	"\n"
	"Without OP, lists every op, one a line, with its hyperparameters and\n"
	"defaults (a name without '=' is required). With OP, shows its inputs,\n"
	"hyperparameters, parameters and whether it can be trained.\n",
	ops_main,
};
