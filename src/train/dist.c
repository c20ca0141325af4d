/* Data-parallel training over MPI (Open MPI): shards of each global batch,
 * one fused MPI_Allreduce of the weighted gradients per step, sums for the
 * loss, validation and synchronised batch norm. Without HAVE_MPI this is
 * the one-process case. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "train/dist.h"

#ifdef HAVE_MPI
#include <mpi.h>
#endif

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The size mpirun (Open MPI, or a PMI launcher) announces, or 0. */
static int launched_size(void)
{
	static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
	for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
		const char *s = getenv(vars[i]);
		if (s && *s)
			return atoi(s);
	}
	return getenv("PMIX_RANK") ? 1 : 0;
}

int dl_dist_built(void)
{
#ifdef HAVE_MPI
	return 1;
#else
	return 0;
#endif
}

#ifdef HAVE_MPI
static int mpi_error(int rc, const char *what, struct dl_error *err)
{
	char s[MPI_MAX_ERROR_STRING];
	int len = 0;
	if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS)
		snprintf(s, sizeof s, "error %d", rc);
	return dl_error_set(err, DL_ERUN, "%s failed (a process of the job failed?): %s", what, s);
}

/* The batch-norm hook: a failed collective cannot be returned through an
 * op, so it ends the job. */
static void shard_allreduce(const struct dl_shard *s, double *buf, int len)
{
	struct dl_dist *d = s->user;
	double t0 = now();
	int rc = MPI_Allreduce(MPI_IN_PLACE, buf, len, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	d->allreduce_s += now() - t0;
	d->allreduce_calls++;
	if (rc != MPI_SUCCESS) {
		struct dl_error e = {0};
		mpi_error(rc, "MPI_Allreduce (--sync-batch-norm)", &e);
		fprintf(stderr, "dlrun: rank %d: %s\n", d->rank, e.msg);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
}
#endif

int dl_dist_open(struct dl_dist *d, struct dl_error *err)
{
	memset(d, 0, sizeof *d);
	d->size = 1;
	int k = launched_size();
#ifdef HAVE_MPI
	if (k < 1)
		return 0;
	int provided;
	if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
		return dl_error_set(err, DL_ERUN, "MPI_Init failed");
	d->active = 1;
	/* errors come back as codes, so a failing peer ends this process
	 * with a message instead of a hang or Open MPI's default abort */
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
	MPI_Comm_size(MPI_COMM_WORLD, &d->size);
	d->shard.allreduce = shard_allreduce;
	d->shard.user = d;
	return 0;
#else
	if (k > 1)
		return dl_error_set(err, DL_EINPUT, "train: started by mpirun with %d processes, "
				    "but this dlrun was built without MPI (./configure --with-mpi, "
				    "with the Debian packages libopenmpi-dev and openmpi-bin)", k);
	return 0;
#endif
}

void dl_dist_close(struct dl_dist *d)
{
#ifdef HAVE_MPI
	if (d && d->active) {
		MPI_Finalize();
		d->active = 0;
	}
#else
	(void)d;
#endif
}

void dl_dist_abort(struct dl_dist *d, int code)
{
#ifdef HAVE_MPI
	if (d && d->active && d->size > 1) {
		fflush(stderr);
		MPI_Abort(MPI_COMM_WORLD, code);
	}
#else
	(void)d;
	(void)code;
#endif
}

void dl_dist_wait_abort(struct dl_dist *d)
{
#ifdef HAVE_MPI
	if (d && d->active && d->size > 1) {
		/* rank 0 never comes: its MPI_Abort ends this process; should it
		 * somehow come, end the job all the same */
		MPI_Barrier(MPI_COMM_WORLD);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
#else
	(void)d;
#endif
}

void dl_dist_set_shard(struct dl_dist *d, int64_t b)
{
	if (d->local_data) {
		d->shard = (struct dl_shard){0, b, b, 1.0 / d->size, d->sync_bn, d->shard.allreduce,
					     d->shard.user};
		return;
	}
	int64_t k = d->size, base = b / k, rem = b % k, r = d->rank;
	d->shard.total = b;
	d->shard.n = base + (r < rem);
	d->shard.off = r * base + (r < rem ? r : rem);
	d->shard.weight = b > 0 ? (double)d->shard.n / (double)b : 0.0;
	d->shard.sync_bn = d->sync_bn;
}

int dl_dist_sum(struct dl_dist *d, double *buf, int n, struct dl_error *err)
{
#ifdef HAVE_MPI
	if (!d->active || d->size < 2)
		return 0;
	double t0 = now();
	int rc = MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	d->allreduce_s += now() - t0;
	d->allreduce_calls++;
	return rc == MPI_SUCCESS ? 0 : mpi_error(rc, "MPI_Allreduce", err);
#else
	(void)d;
	(void)buf;
	(void)n;
	(void)err;
	return 0;
#endif
}

int dl_dist_reduce_grads(struct dl_dist *d, float *grad, size_t n, double *loss,
			 struct dl_error *err)
{
#ifdef HAVE_MPI
	if (!d->active || d->size < 2)
		return 0;
	float w = (float)d->shard.weight;
	for (size_t i = 0; i < n; i++)
		grad[i] *= w;
	double t0 = now();
	int rc = MPI_SUCCESS;
	/* MPI counts are ints: a model of more than 2^30 floats goes in pieces */
	for (size_t at = 0; rc == MPI_SUCCESS && at < n; at += (size_t)1 << 30) {
		size_t len = n - at < ((size_t)1 << 30) ? n - at : (size_t)1 << 30;
		rc = MPI_Allreduce(MPI_IN_PLACE, grad + at, (int)len, MPI_FLOAT, MPI_SUM,
				   MPI_COMM_WORLD);
	}
	d->allreduce_s += now() - t0;
	d->allreduce_calls++;
	if (rc != MPI_SUCCESS)
		return mpi_error(rc, "MPI_Allreduce of the gradients", err);
	if (loss) {
		*loss *= d->shard.weight;
		return dl_dist_sum(d, loss, 1, err);
	}
	return 0;
#else
	(void)d;
	(void)grad;
	(void)n;
	(void)loss;
	(void)err;
	return 0;
#endif
}

int dl_dist_bcast(struct dl_dist *d, float *buf, size_t n, struct dl_error *err)
{
#ifdef HAVE_MPI
	if (!d->active || d->size < 2)
		return 0;
	int rc = MPI_Bcast(buf, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
	return rc == MPI_SUCCESS ? 0 : mpi_error(rc, "MPI_Bcast", err);
#else
	(void)d;
	(void)buf;
	(void)n;
	(void)err;
	return 0;
#endif
}
