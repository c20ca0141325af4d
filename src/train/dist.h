/* Data-parallel training over MPI: which process this is, each one's shard
 * of a global batch, and the all-reduces of gradients, losses and batch
 * statistics. Built without MPI (./configure without --with-mpi and no
 * mpicc) every function here is the one-process case. */
#ifndef DL_DIST_H
#define DL_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "dlrun.h"
#include "engine/op.h"

struct dl_dist {
	int rank, size;            /* 0 and 1 in one process */
	int active;                /* MPI was initialised by dl_dist_open */
	int sync_bn;               /* --sync-batch-norm */
	int local_data;            /* one data file per process: each takes
	                            * its whole local batch from its own */
	double allreduce_s;        /* seconds spent in MPI_Allreduce */
	int64_t allreduce_calls;
	struct dl_shard shard;     /* the current batch's */
};

/* 1 when dlrun was built with MPI. */
int dl_dist_built(void);
/* Initialises MPI when the process was started by mpirun (its
 * environment says so) and fills rank and size; otherwise a one-process
 * run. Started by mpirun with more than one process but built without MPI
 * is an error (every process would train alone and write the same files). */
int dl_dist_open(struct dl_dist *d, struct dl_error *err);
/* MPI_Finalize when active. */
void dl_dist_close(struct dl_dist *d);
/* Ends every process of the job with `code` (MPI_Abort); returns only in a
 * one-process run. */
void dl_dist_abort(struct dl_dist *d, int code);
/* Waits for rank 0 to end the job (an error every process found alike,
 * which rank 0 alone reports); returns only in a one-process run. */
void dl_dist_wait_abort(struct dl_dist *d);
/* Sets d->shard for a global batch of b samples: the ranks take
 * consecutive runs of b / size samples, the first b % size ranks one more.
 * With local_data, b is this process's batch of its own data, all of it
 * its shard, weighted 1 / size. */
void dl_dist_set_shard(struct dl_dist *d, int64_t b);
/* Sums buf[0..n) over every process, in place. */
int dl_dist_sum(struct dl_dist *d, double *buf, int n, struct dl_error *err);
/* The gradient of the global batch: grad[0..n) times this shard's weight,
 * summed over every process in one fused MPI_Allreduce; *loss likewise
 * (the global batch's mean loss). */
int dl_dist_reduce_grads(struct dl_dist *d, float *grad, size_t n, double *loss,
			 struct dl_error *err);
/* Copies buf[0..n) of rank 0 to every process. */
int dl_dist_bcast(struct dl_dist *d, float *buf, size_t n, struct dl_error *err);

#endif
