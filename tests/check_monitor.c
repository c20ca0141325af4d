/* Choosing what to keep (train/monitor.c): the plateau schedule's learning
 * rates against torch.optim.lr_scheduler.ReduceLROnPlateau on the value
 * sequences of tools/gen_plateau_fixture.py (tests/data/monitor), and the
 * best epoch / early stopping rules. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "check_suites.h"
#include "train/monitor.h"

#ifndef SRCDIR
#define SRCDIR "."
#endif
#define PLATEAU SRCDIR "/tests/data/monitor/plateau.txt"

START_TEST(test_plateau_parity)
{
	FILE *f = fopen(PLATEAU, "r");
	ck_assert_msg(f != NULL, "cannot open %s", PLATEAU);
	char line[512];
	int cases = 0;
	while (fgets(line, sizeof line, f)) {
		if (line[0] == '#')
			continue;
		char name[64], mode[8];
		double factor, min_lr, lr;
		long long patience, n;
		ck_assert_msg(sscanf(line, "case %63s %7s %lf %lld %lf %lf %lld", name, mode, &factor,
				     &patience, &min_lr, &lr, &n) == 7, "bad line: %s", line);
		struct dl_monitor m = {.kind = strcmp(mode, "max") == 0 ? DL_MONITOR_VAL_ACCURACY
									: DL_MONITOR_VAL_LOSS,
				       .plateau = 1};
		m.p.factor = factor;
		m.p.patience = patience;
		m.p.min_lr = min_lr;
		struct dl_error err = {0};
		ck_assert_msg(dl_monitor_init(&m, 1, lr, &err) == 0, "%s", err.msg);
		for (long long i = 0; i < n; i++) {
			char vs[64];
			double want;
			ck_assert(fgets(line, sizeof line, f) != NULL);
			ck_assert(sscanf(line, "%63s %lf", vs, &want) == 2);
			double v = strcmp(vs, "nan") == 0 ? NAN : strtod(vs, NULL);
			dl_monitor_epoch(&m, i + 1, v, NULL);
			ck_assert_msg(m.p.lr == want, "%s: epoch %lld: lr %.17g, PyTorch %.17g", name,
				      i + 1, m.p.lr, want);
		}
		dl_monitor_free(&m);
		cases++;
	}
	fclose(f);
	ck_assert_int_eq(cases, 4);
}
END_TEST

/* The best epoch's state is copied when the value improves by more than
 * min_delta; N epochs without that stop the run. */
START_TEST(test_best_and_early_stopping)
{
	struct dl_monitor m = {.kind = DL_MONITOR_VAL_LOSS, .keep_best = 1, .early_stopping = 2,
			       .min_delta = 0.05};
	struct dl_error err = {0};
	ck_assert_int_eq(dl_monitor_init(&m, 2, 0.1, &err), 0);
	static const double loss[] = {NAN, 1.0, 0.9, 0.87, 0.86, 0.5};
	float state[2];
	for (int e = 0; e < 5; e++) {
		state[0] = (float)e;
		state[1] = -(float)e;
		dl_monitor_epoch(&m, e + 1, loss[e], state);
		/* NaN never counts; 0.87 and 0.86 are within 0.05 of 0.9 */
		ck_assert_int_eq(m.stop, e == 4);
	}
	ck_assert_int_eq(m.best_epoch, 3);
	ck_assert(m.best == 0.9);
	ck_assert(m.best_state[0] == 2.0f && m.best_state[1] == -2.0f);
	dl_monitor_free(&m);
	dl_monitor_free(NULL);

	/* accuracy: higher is better; ties are not improvements */
	struct dl_monitor a = {.kind = DL_MONITOR_VAL_ACCURACY, .early_stopping = 3};
	ck_assert_int_eq(dl_monitor_init(&a, 1, 0.1, &err), 0);
	static const double acc[] = {0.5, 0.7, 0.7, 0.6, 0.7};
	for (int e = 0; e < 5; e++)
		dl_monitor_epoch(&a, e + 1, acc[e], NULL);
	ck_assert_int_eq(a.best_epoch, 2);
	ck_assert_int_eq(a.wait, 3);
	ck_assert_int_eq(a.stop, 1);
	dl_monitor_free(&a);
}
END_TEST

START_TEST(test_monitor_errors)
{
	struct dl_error err = {0};
	struct dl_monitor m = {.plateau = 1};
	m.p.factor = 1.0;
	ck_assert_int_eq(dl_monitor_init(&m, 1, 0.1, &err), DL_EINPUT);
	ck_assert_msg(strstr(err.msg, "--factor") != NULL, "%s", err.msg);
	enum dl_monitor_kind k;
	dl_error_clear(&err);
	ck_assert_int_eq(dl_monitor_from_name("val_acc", &k, &err), DL_EINPUT);
	ck_assert_msg(strstr(err.msg, "val_accuracy") != NULL, "%s", err.msg);
	ck_assert_int_eq(dl_monitor_from_name("val_accuracy", &k, &err), 0);
	ck_assert_int_eq(k, DL_MONITOR_VAL_ACCURACY);
}
END_TEST

Suite *make_monitor_suite(void)
{
	Suite *s = suite_create("monitor");
	TCase *tc = tcase_create("monitor");
	tcase_add_test(tc, test_plateau_parity);
	tcase_add_test(tc, test_best_and_early_stopping);
	tcase_add_test(tc, test_monitor_errors);
	suite_add_tcase(s, tc);
	return s;
}
