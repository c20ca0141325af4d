/* The monitored validation value after each epoch: the best epoch's state,
 * early stopping as Keras's EarlyStopping (an improvement is by more than
 * min_delta; N epochs without one end the run), and ReduceLROnPlateau. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/monitor.h"

static const char *const monitor_names[] = {"val_loss", "val_accuracy", NULL};

const char *dl_monitor_name(enum dl_monitor_kind kind)
{
	return kind == DL_MONITOR_VAL_ACCURACY ? monitor_names[1] : monitor_names[0];
}

int dl_monitor_from_name(const char *name, enum dl_monitor_kind *kind,
			 struct dl_error *err)
{
	for (int i = 0; monitor_names[i]; i++)
		if (strcmp(name, monitor_names[i]) == 0) {
			*kind = (enum dl_monitor_kind)i;
			return 0;
		}
	return dl_error_set(err, DL_EINPUT, "--monitor: unknown value '%s' (val_loss or "
			    "val_accuracy)", name);
}

/* ---- ReduceLROnPlateau ---- */

void dl_plateau_init(struct dl_plateau *p, double lr)
{
	p->lr = lr;
	p->best = p->maximize ? -INFINITY : INFINITY;
	p->bad_epochs = 0;
}

int dl_plateau_step(struct dl_plateau *p, double value)
{
	/* is_better, threshold_mode 'rel' (NaN is never better) */
	int better = p->maximize ? value > p->best * (1.0 + p->threshold)
				 : value < p->best * (1.0 - p->threshold);
	if (better) {
		p->best = value;
		p->bad_epochs = 0;
	} else {
		p->bad_epochs++;
	}
	if (p->bad_epochs <= p->patience)
		return 0;
	p->bad_epochs = 0;   /* cooldown 0 */
	double lr = p->lr * p->factor;
	if (lr < p->min_lr)
		lr = p->min_lr;
	if (p->lr - lr > 1e-8) {   /* PyTorch's eps: smaller changes are ignored */
		p->lr = lr;
		return 1;
	}
	return 0;
}

/* ---- the monitor ---- */

int dl_monitor_active(const struct dl_monitor *m)
{
	return m->keep_best || m->early_stopping > 0 || m->plateau;
}

int dl_monitor_init(struct dl_monitor *m, size_t n, double lr, struct dl_error *err)
{
	if (m->plateau) {
		if (!(m->p.factor > 0 && m->p.factor < 1))
			return dl_error_set(err, DL_EINPUT, "--factor: %g is not in (0, 1) (the "
					    "plateau schedule multiplies the learning rate by it)",
					    m->p.factor);
		if (m->p.patience < 0)
			return dl_error_set(err, DL_EINPUT, "--patience: %lld is negative",
					    (long long)m->p.patience);
		m->p.maximize = m->kind == DL_MONITOR_VAL_ACCURACY;
		if (m->p.threshold == 0)
			m->p.threshold = 1e-4;
		dl_plateau_init(&m->p, lr);
	}
	if (!(m->min_delta >= 0))
		return dl_error_set(err, DL_EINPUT, "--min-delta: %g is negative", m->min_delta);
	m->best = NAN;
	m->best_epoch = 0;
	m->wait = 0;
	m->stop = 0;
	m->n = n;
	if (m->keep_best) {
		m->best_state = malloc(n * sizeof *m->best_state + 1);
		if (!m->best_state)
			return dl_error_set(err, DL_ERUN, "out of memory");
	}
	return 0;
}

void dl_monitor_epoch(struct dl_monitor *m, int64_t epoch, double value,
		      const float *state)
{
	int better;
	if (m->best_epoch == 0)
		better = !isnan(value);
	else if (m->kind == DL_MONITOR_VAL_ACCURACY)
		better = value - m->min_delta > m->best;
	else
		better = value + m->min_delta < m->best;
	if (better) {
		m->best = value;
		m->best_epoch = epoch;
		m->wait = 0;
		if (m->best_state && state)
			memcpy(m->best_state, state, m->n * sizeof *state);
	} else {
		m->wait++;
	}
	if (m->early_stopping > 0 && m->wait >= m->early_stopping)
		m->stop = 1;
	if (m->plateau)
		dl_plateau_step(&m->p, value);
}

void dl_monitor_free(struct dl_monitor *m)
{
	if (!m)
		return;
	free(m->best_state);
	m->best_state = NULL;
}

/* ---- checkpoints: doubles as the hex of their bits ---- */

static void put_real(char *v, double x)
{
	uint64_t bits;
	memcpy(&bits, &x, sizeof bits);
	snprintf(v, 40, "%016" PRIx64, bits);
}

int dl_monitor_meta(const struct dl_monitor *m, const char **keys, char vals[][40])
{
	int k = 0;
	keys[k] = "monitor.best";
	put_real(vals[k++], m->best);
	keys[k] = "monitor.best_epoch";
	snprintf(vals[k++], 40, "%" PRId64, m->best_epoch);
	keys[k] = "monitor.wait";
	snprintf(vals[k++], 40, "%" PRId64, m->wait);
	keys[k] = "monitor.plateau_lr";
	put_real(vals[k++], m->p.lr);
	keys[k] = "monitor.plateau_best";
	put_real(vals[k++], m->p.best);
	keys[k] = "monitor.plateau_bad";
	snprintf(vals[k++], 40, "%" PRId64, m->p.bad_epochs);
	return k;
}

static int get_u64(const struct dl_safetensors *st, const char *key, int hex, uint64_t *out,
		   struct dl_error *err)
{
	const char *s = dl_st_meta(st, key);
	if (!s)
		return 1;
	char *end;
	*out = strtoull(s, &end, hex ? 16 : 10);
	if (!*s || *end)
		return dl_error_set(err, DL_EINPUT, "%s: bad checkpoint metadata '%s'", st->path, key);
	return 0;
}

int dl_monitor_restore(struct dl_monitor *m, const struct dl_safetensors *st,
		       struct dl_error *err)
{
	uint64_t u[6];
	static const char *const keys[] = {"monitor.best", "monitor.best_epoch", "monitor.wait",
					   "monitor.plateau_lr", "monitor.plateau_best",
					   "monitor.plateau_bad"};
	for (int i = 0; i < 6; i++) {
		int rc = get_u64(st, keys[i], i == 0 || i == 3 || i == 4, &u[i], err);
		if (rc < 0)
			return rc;
		if (rc > 0)
			return 0;   /* a checkpoint of a run without monitoring */
	}
	memcpy(&m->best, &u[0], sizeof m->best);
	m->best_epoch = (int64_t)u[1];
	m->wait = (int64_t)u[2];
	if (m->plateau) {
		memcpy(&m->p.lr, &u[3], sizeof m->p.lr);
		memcpy(&m->p.best, &u[4], sizeof m->p.best);
		m->p.bad_epochs = (int64_t)u[5];
	}
	if (m->best_state && m->best_epoch > 0) {
		int t = dl_st_find(st, "__best__.state");
		if (t < 0 || st->t[t].numel != (int64_t)m->n)
			return dl_error_set(err, DL_EINPUT, "%s: the best epoch's state "
					    "('__best__.state') is missing or has the wrong size",
					    st->path);
		return dl_st_read_f32(st, t, m->best_state, err);
	}
	return 0;
}
