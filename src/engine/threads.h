/* Thread control (src/engine/threads.c): the count asked for, and the count
 * the op loops use, which adapts while another process holds a core. */
#ifndef DL_THREADS_H
#define DL_THREADS_H

#include <stdint.h>

#define DL_MAX_WORKERS 256

/* One runner's thread state: the count asked for and the count in use. */
struct dl_threads {
	int asked;          /* --threads, resolved: what plans size for */
	int used;           /* what the op loops use now */
	int adapt;          /* schedstat readable and asked > 1 */
	int n_tid;
	int tid[DL_MAX_WORKERS]; /* the team's thread ids, the caller's first */
	int64_t t0;         /* start of the measuring window */
	int64_t wait0;      /* the team's summed wait at t0 */
	int64_t until;      /* on one thread until this time */
	int64_t backoff;
	int strikes;        /* consecutive windows over WAIT_FRACTION */
};

/* A state with one thread asked for. */
void dl_threads_init(struct dl_threads *t);
/* Makes t the state that the calls below (and dl_threads, op.h) use on
 * this thread; NULL: the process's own (the verbs'). */
void dl_threads_use(struct dl_threads *t);

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
