/* Atomic output files: write to PATH.XXXXXX beside the target (same file
 * system, so rename() is atomic), fsync, then rename over the target; a
 * failed run leaves the previous file untouched. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/atomic.h"

int dl_atomic_open(struct dl_atomic *a, const char *path, struct dl_error *err)
{
	memset(a, 0, sizeof *a);
	a->path = strdup(path);
	if (!a->path)
		return dl_error_set(err, DL_ERUN, "%s: out of memory", path);
	if (!strcmp(path, "-")) {
		a->f = stdout;
		a->direct = 1;
		return 0;
	}
	struct stat st;
	if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
		char *real = realpath(path, NULL);
		if (real) {      /* replace the file the link points to */
			free(a->path);
			a->path = real;
			path = real;
		}
	}
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		if (S_ISDIR(st.st_mode)) {
			dl_atomic_abort(a);
			return dl_error_set(err, DL_EINPUT, "%s: is a directory; name a file", path);
		}
		a->f = fopen(path, "wb");
		if (!a->f) {
			int e = errno;
			dl_atomic_abort(a);
			return dl_error_set(err, DL_EINPUT, "%s: cannot write: %s", path, strerror(e));
		}
		a->direct = 1;
		return 0;
	}
	size_t n = strlen(path);
	a->tmp = malloc(n + 8);
	if (!a->tmp) {
		dl_atomic_abort(a);
		return dl_error_set(err, DL_ERUN, "%s: out of memory", path);
	}
	memcpy(a->tmp, path, n);
	memcpy(a->tmp + n, ".XXXXXX", 8);
	int fd = mkstemp(a->tmp);
	if (fd < 0) {
		int e = errno;
		free(a->tmp);
		a->tmp = NULL;
		dl_atomic_abort(a);
		/* a path the user got wrong is bad input; anything else is a
		 * failure of the system */
		int code = (e == ENOENT || e == ENOTDIR || e == EACCES ||
			    e == EROFS) ? DL_EINPUT : DL_ERUN;
		return dl_error_set(err, code, "%s: cannot create a file there: %s",
				    path, strerror(e));
	}
	/* mkstemp makes the file 0600; give it the mode a plain fopen would,
	 * or keep the mode of the file being replaced */
	mode_t mode;
	if (stat(path, &st) == 0) {
		mode = st.st_mode & 07777;
	} else {
		mode = umask(0);
		umask(mode);
		mode = 0666 & ~mode;
	}
	(void)fchmod(fd, mode);
	a->f = fdopen(fd, "wb");
	if (!a->f) {
		int e = errno;
		close(fd);
		dl_atomic_abort(a);
		return dl_error_set(err, DL_ERUN, "%s: %s", path, strerror(e));
	}
	return 0;
}

int dl_atomic_commit(struct dl_atomic *a, struct dl_error *err)
{
	int rc = 0;
	if (!a->f)
		return dl_error_set(err, DL_ERUN, "%s: internal error: not open",
				    a->path ? a->path : "?");
	if (a->direct) {  /* stdout (kept open), a FIFO or a device */
		if (fflush(a->f) != 0 || ferror(a->f))
			rc = dl_error_set(err, DL_ERUN, "%s: write error: %s",
					  a->f == stdout ? "stdout" : a->path, strerror(errno));
		if (a->f != stdout && fclose(a->f) != 0 && rc == 0)
			rc = dl_error_set(err, DL_ERUN, "%s: write error: %s", a->path,
					  strerror(errno));
		a->f = NULL;
		dl_atomic_abort(a);
		return rc;
	}
	if (fflush(a->f) != 0 || ferror(a->f) || fsync(fileno(a->f)) != 0)
		rc = dl_error_set(err, DL_ERUN, "%s: write error: %s", a->path,
				  strerror(errno));
	if (fclose(a->f) != 0 && rc == 0)
		rc = dl_error_set(err, DL_ERUN, "%s: write error: %s", a->path,
				  strerror(errno));
	a->f = NULL;
	if (rc == 0 && rename(a->tmp, a->path) != 0)
		rc = dl_error_set(err, DL_ERUN, "%s: cannot rename %s over it: %s",
				  a->path, a->tmp, strerror(errno));
	if (rc == 0) {
		free(a->tmp);  /* renamed: nothing left to unlink */
		a->tmp = NULL;
	}
	dl_atomic_abort(a);
	return rc;
}

void dl_atomic_abort(struct dl_atomic *a)
{
	if (!a)
		return;
	if (a->f && a->f != stdout)
		fclose(a->f);
	a->f = NULL;
	if (a->tmp)
		unlink(a->tmp);
	free(a->tmp);
	free(a->path);
	a->tmp = NULL;
	a->path = NULL;
}
