/* Thread control: the thread count the user asked for, and the count the
 * op loops really use, which drops to one while another process holds a
 * core and comes back when the core is free again.
 *
 * Why: an OpenMP parallel region ends in a barrier. When another process
 * keeps one of our cores busy, our worker gets that core only in the
 * scheduler's slices, and every region waits for it: a scheduler tick per
 * op (digits-cnn training took 25x its one-thread time). No split of the
 * work fixes a barrier on a descheduled thread, so dlrun measures instead:
 * the kernel counts, per thread, the time it spent runnable but waiting for
 * a CPU (/proc/self/task/TID/schedstat, second field). When the workers
 * waited for a CPU for more than WAIT_FRACTION of the wall time since the
 * last look, the loops run on one thread; after a back-off they try all
 * threads again for one measuring window. Without schedstat (a kernel
 * without CONFIG_SCHED_INFO) the count stays what was asked for. */
#include <cblas.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "config.h"
#include "engine/op.h"
#include "engine/threads.h"

/* A window shorter than this says little: look again later. */
#define WINDOW_NS 5000000LL          /* 5 ms */
/* Workers waiting for a CPU more than this share of the window, in
 * STRIKES windows in a row: a core is taken. An idle machine measures
 * below 1% in most windows, but a 2-vCPU guest shows single windows of
 * 20% to 90% now and then (a worker woken onto the busy vCPU, or the host
 * running something else): with one window enough, an idle machine ran
 * three quarters of an efficientnet_b0 batch-32 run on one thread (a
 * quarter-second back-off after each false alarm). A process that holds
 * a core keeps the workers waiting in every window. */
#define WAIT_FRACTION 0.10
#define STRIKES 2

/* How long to stay on one thread before trying all again; doubled while
 * the core stays taken, up to BACKOFF_MAX. */
#define BACKOFF_MIN_NS 250000000LL   /* 0.25 s */
#define BACKOFF_MAX_NS 4000000000LL  /* 4 s */

/* The program's own state (the verbs), and the one in use on this thread:
 * libdlrun's callers give each model its own (dl_threads_use). */
static struct dl_threads process = {.asked = 1, .used = 1};
static _Thread_local struct dl_threads *cur;

#define T (*(cur ? cur : &process))

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Nanoseconds thread tid has spent runnable but not running, or -1. */
static int64_t wait_ns(int tid)
{
	char path[64], buf[128];
	snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", tid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t k = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (k <= 0)
		return -1;
	buf[k] = '\0';
	long long run, wait;
	if (sscanf(buf, "%lld %lld", &run, &wait) != 2)
		return -1;
	return wait;
}

static int64_t workers_wait(void)
{
	int64_t s = 0;
	for (int i = 0; i < T.n_tid; i++) {
		int64_t w = wait_ns(T.tid[i]);
		if (w < 0)
			return -1;
		s += w;
	}
	return s;
}

static void set_used(int n)
{
	T.used = n;
#ifdef _OPENMP
	omp_set_num_threads(n);
#endif
}

/* The thread ids of the OpenMP team the op loops run on, from one
 * parallel region when the count is set (libgomp keeps a caller's team
 * threads for its later regions). Only they are measured: every thread
 * of the process was, and OpenBLAS's own worker, which polls with
 * sched_yield for a while after the library starts although dlrun gives
 * it no work, is runnable all that time and waits whenever our two
 * threads hold both cores: 8 ms of "wait" per 6 ms window on an idle
 * machine, so a core counted as taken within the first 20 ms of every
 * run, and a short one (the resnet-block example's 20 training steps at
 * batch 32, 130 ms) ran on one thread from start to end. Another
 * model's team (libdlrun callers running models on several threads) no
 * longer counts either. */
static void find_team(void)
{
	T.n_tid = 0;
#ifdef _OPENMP
	int ids[DL_MAX_WORKERS], team = 1;
	int n = T.asked < DL_MAX_WORKERS ? T.asked : DL_MAX_WORKERS;
	#pragma omp parallel num_threads(n)
	{
		int k = omp_get_thread_num();
		if (k == 0)
			team = omp_get_num_threads();
		if (k < DL_MAX_WORKERS)
			ids[k] = (int)syscall(SYS_gettid);
	}
	for (int k = 0; k < team && k < DL_MAX_WORKERS; k++)
		T.tid[T.n_tid++] = ids[k];
#endif
}

/* Starts a measuring window on all threads (the team found by
 * find_team: reading their counters costs no parallel region, so no
 * wait for a worker that another process keeps from its core; threads
 * that sleep add no wait). */
static void start_window(void)
{
	set_used(T.asked);
	T.wait0 = T.n_tid ? workers_wait() : -1;
	T.t0 = now_ns();
	if (T.wait0 < 0)
		T.adapt = 0;
}

void dl_set_threads(int n)
{
	if (n <= 0) {
#ifdef _OPENMP
		n = omp_get_num_procs();
#else
		n = 1;
#endif
	}
	T.asked = n;
	T.adapt = n > 1;
	T.until = 0;
	T.backoff = BACKOFF_MIN_NS;
	T.strikes = 0;
	set_used(n);
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
	/* dl_sgemm shares products among OpenMP's threads instead */
	openblas_set_num_threads(1);
#endif
	if (T.adapt) {
		find_team();
		start_window();
	}
}

int dl_threads(void)
{
	return T.asked;
}

int dl_threads_used(void)
{
	return T.used;
}

void dl_threads_check(void)
{
	if (!T.adapt)
		return;
	int64_t t = now_ns();
	if (T.used == 1) {
		if (t >= T.until)
			start_window();
		return;
	}
	if (t - T.t0 < WINDOW_NS)
		return;
	int64_t w = workers_wait();
	if (w < 0) {
		T.adapt = 0;
		return;
	}
	if ((double)(w - T.wait0) > WAIT_FRACTION * (double)(t - T.t0))
		T.strikes++;
	else
		T.strikes = 0;
	int taken = T.strikes >= STRIKES;
	if (taken) {
		T.strikes = 0;
		set_used(1);
		T.until = t + T.backoff;
		if (T.backoff < BACKOFF_MAX_NS)
			T.backoff *= 2;
	} else {
		T.backoff = BACKOFF_MIN_NS;
	}
	T.wait0 = w;
	T.t0 = t;
}

void dl_threads_pin(int n)
{
	T.adapt = 0;
	set_used(n < 1 ? 1 : n > T.asked ? T.asked : n);
}

void dl_threads_init(struct dl_threads *t)
{
	*t = (struct dl_threads){.asked = 1, .used = 1};
}

void dl_threads_use(struct dl_threads *t)
{
	cur = t;
#ifdef _OPENMP
	/* OpenMP's thread count is the calling thread's own setting */
	omp_set_num_threads(T.used);
#endif
}
