/* Runs every Check suite; TAP output when CK_TAP_LOG_FILE_NAME=- (make check). */
#include <stdlib.h>

#include "check_suites.h"

int main(void)
{
	SRunner *sr = srunner_create(make_engine_suite());
	srunner_add_suite(sr, make_io_suite());
	srunner_add_suite(sr, make_ops_suite());
	srunner_add_suite(sr, make_conv_suite());
	srunner_add_suite(sr, make_train_suite());
	srunner_add_suite(sr, make_attention_suite());
	srunner_add_suite(sr, make_vocab_suite());
	srunner_add_suite(sr, make_monitor_suite());
	srunner_add_suite(sr, make_ops3d_suite());
	srunner_add_suite(sr, make_round3_suite());
	srunner_add_suite(sr, make_textdata_suite());
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
