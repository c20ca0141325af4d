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

static int ops_main(int argc, char **argv, struct dl_error *err)
{
	if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
		verb_usage(&verb_ops);
		return 0;
	}
	for (int i = 1; i < argc; i++)
		if (argv[i][0] == '-')
			return dl_error_set(err, DL_EINPUT,
					    "ops: unknown option '%s'; see 'dlrun ops --help'", argv[i]);
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
	for (const struct dl_op_desc *const *o = dl_op_all(); *o; o++) {
		fputs((*o)->name, stdout);
		for (int i = 0; i < (*o)->n_hp; i++) {
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
