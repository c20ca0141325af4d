/* The Check suites; tests/check_main.c runs them all. */
#ifndef DL_CHECK_SUITES_H
#define DL_CHECK_SUITES_H

#include <check.h>

Suite *make_engine_suite(void);
Suite *make_io_suite(void);
Suite *make_ops_suite(void);
Suite *make_conv_suite(void);
Suite *make_train_suite(void);
Suite *make_attention_suite(void);
Suite *make_vocab_suite(void);
Suite *make_monitor_suite(void);
Suite *make_ops3d_suite(void);
Suite *make_round3_suite(void);
Suite *make_textdata_suite(void);

#endif
