/* Thread control (src/engine/threads.c): the count asked for, and the count
 * the op loops use, which adapts while another process holds a core. */
#ifndef DL_THREADS_H
#define DL_THREADS_H

/* Sets BLAS and op threads (<= 0: all cores). OpenBLAS runs on one thread;
 * dl_sgemm and the op loops share work among OpenMP's threads. */
void dl_set_threads(int n);
/* The threads the op loops use now: dl_threads() (op.h) on a free
 * machine, 1 while the workers wait for a CPU taken by another process. */
int dl_threads_used(void);
/* Called before each forward and backward pass: measures how long the
 * workers waited for a CPU since the last look and picks the count. */
void dl_threads_check(void);
/* Tests: stops adapting and runs the loops on n threads (at most the
 * count asked for), so a test can compare results across team sizes. */
void dl_threads_pin(int n);

#endif
