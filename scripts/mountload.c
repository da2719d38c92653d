/* Load client for scripts/mount-bench.sh: one workload, THREADS threads,
 * against a directory (a FUSE mount or tmpfs itself).
 *
 *   mountload MODE DIR THREADS SECONDS [MAX_OPS_PER_THREAD]
 *
 * MODE:
 *   stat-one     fstatat(dir, "one")                  (the name must exist)
 *   stat-deep    fstatat(dir, "a/b/c/file")           (must exist)
 *   openclose    open("a/b/c/file", O_RDONLY) + close
 *   create       open("t<T>/<n>", O_CREAT|O_EXCL|O_WRONLY) + close + unlink,
 *                each thread in its own directory t<T> (made here); one
 *                operation = one create and its unlink
 *   seqwrite     each thread writes 1 GiB to big<T> in 1 MiB writes, then
 *                fsync (SECONDS is ignored); rate in MB/s
 *   seqread      each thread reads big<T> in 1 MiB reads after dropping
 *                its cached pages (POSIX_FADV_DONTNEED); MB/s
 *   randread     each thread preads 4 KiB at random 4 KiB-aligned offsets
 *                of big<T> for SECONDS
 *
 * With MAX_OPS_PER_THREAD above 0, each thread of a timed mode stops after
 * that many operations (SECONDS is then only an upper bound): a fixed
 * count for instruction counting (scripts/fuse-callgrind.sh).
 *
 * Prints one line:  mode=M threads=N ops=TOTAL seconds=S rate=R unit=U
 * (U: ops/s or MB/s). Exits 1 on the first failed call (prints it).
 * Build: cc -O2 -pthread -o mountload mountload.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MIB (1L << 20)
#define BIG (1024L * MIB)

static atomic_int stop;
static long max_ops;
static int dirfd_;
static const char *mode;

struct worker {
	pthread_t tid;
	int id;
	long ops;
	long bytes;
	int err;
	const char *what;
	atomic_int done;
};

/* Whether a timed loop goes on after w's operations so far. */
static int more(const struct worker *w)
{
	return !atomic_load_explicit(&stop, memory_order_relaxed) &&
	       (max_ops <= 0 || w->ops < max_ops);
}

static int fail(struct worker *w, const char *what)
{
	w->err = errno ? errno : EIO;
	w->what = what;
	return -1;
}

static int run_stat(struct worker *w, const char *path)
{
	struct stat st;

	while (more(w)) {
		if (fstatat(dirfd_, path, &st, 0) != 0)
			return fail(w, "fstatat");
		w->ops++;
	}
	return 0;
}

static int run_openclose(struct worker *w)
{
	while (more(w)) {
		int fd = openat(dirfd_, "a/b/c/file", O_RDONLY);

		if (fd < 0)
			return fail(w, "open");
		close(fd);
		w->ops++;
	}
	return 0;
}

static int run_create(struct worker *w)
{
	char dir[32], name[64];

	snprintf(dir, sizeof dir, "t%d", w->id);
	if (mkdirat(dirfd_, dir, 0755) != 0 && errno != EEXIST)
		return fail(w, "mkdir");
	while (more(w)) {
		snprintf(name, sizeof name, "%s/%ld", dir, w->ops);
		int fd = openat(dirfd_, name, O_CREAT | O_EXCL | O_WRONLY, 0644);

		if (fd < 0)
			return fail(w, "create");
		close(fd);
		if (unlinkat(dirfd_, name, 0) != 0)
			return fail(w, "unlink");
		w->ops++;
	}
	return 0;
}

static int open_big(struct worker *w, int flags)
{
	char name[32];

	snprintf(name, sizeof name, "big%d", w->id);
	return openat(dirfd_, name, flags, 0644);
}

static int run_seqwrite(struct worker *w)
{
	char *buf = malloc(MIB);
	int fd = open_big(w, O_CREAT | O_TRUNC | O_WRONLY);

	if (!buf || fd < 0)
		return fail(w, "open for writing");
	memset(buf, 'x' + w->id, MIB);
	for (long off = 0; off < BIG; off += MIB) {
		if (write(fd, buf, MIB) != MIB)
			return fail(w, "write");
		w->bytes += MIB;
	}
	if (fsync(fd) != 0)
		return fail(w, "fsync");
	close(fd);
	free(buf);
	w->ops = w->bytes / MIB;
	return 0;
}

static int run_seqread(struct worker *w)
{
	char *buf = malloc(MIB);
	int fd = open_big(w, O_RDONLY);
	ssize_t n;

	if (!buf || fd < 0)
		return fail(w, "open for reading");
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	while ((n = read(fd, buf, MIB)) > 0)
		w->bytes += n;
	if (n < 0)
		return fail(w, "read");
	close(fd);
	free(buf);
	w->ops = w->bytes / MIB;
	return 0;
}

static int run_randread(struct worker *w)
{
	char buf[4096];
	uint64_t x = 0x9e3779b97f4a7c15ULL * (uint64_t)(w->id + 1);
	struct stat st;
	int fd = open_big(w, O_RDONLY);

	if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < 4096)
		return fail(w, "open for random reads");
	long pages = st.st_size / 4096;
	while (more(w)) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		if (pread(fd, buf, sizeof buf, (off_t)(x % pages) * 4096) != sizeof buf)
			return fail(w, "pread");
		w->ops++;
	}
	close(fd);
	return 0;
}

static void *run(void *arg)
{
	struct worker *w = arg;

	errno = 0;
	if (!strcmp(mode, "stat-one"))
		run_stat(w, "one");
	else if (!strcmp(mode, "stat-deep"))
		run_stat(w, "a/b/c/file");
	else if (!strcmp(mode, "openclose"))
		run_openclose(w);
	else if (!strcmp(mode, "create"))
		run_create(w);
	else if (!strcmp(mode, "seqwrite"))
		run_seqwrite(w);
	else if (!strcmp(mode, "seqread"))
		run_seqread(w);
	else if (!strcmp(mode, "randread"))
		run_randread(w);
	atomic_store(&w->done, 1);
	return NULL;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 5 && argc != 6) {
		fprintf(stderr, "usage: %s MODE DIR THREADS SECONDS [MAX_OPS_PER_THREAD]\n",
			argv[0]);
		return 2;
	}
	mode = argv[1];
	int threads = atoi(argv[3]);
	double seconds = atof(argv[4]);
	int timed = strcmp(mode, "seqwrite") && strcmp(mode, "seqread");

	if (argc == 6)
		max_ops = atol(argv[5]);

	static const char *const modes[] = { "stat-one", "stat-deep", "openclose", "create",
					     "seqwrite", "seqread", "randread" };
	int known = 0;

	for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
		known |= !strcmp(mode, modes[i]);
	if (!known) {
		fprintf(stderr, "unknown MODE %s\n", mode);
		return 2;
	}
	if (threads < 1 || threads > 256 || seconds <= 0) {
		fprintf(stderr, "bad THREADS or SECONDS\n");
		return 2;
	}
	dirfd_ = open(argv[2], O_PATH | O_DIRECTORY);
	if (dirfd_ < 0) {
		perror(argv[2]);
		return 1;
	}
	struct worker *ws = calloc(threads, sizeof *ws);
	double t0 = now();

	for (int i = 0; i < threads; i++) {
		ws[i].id = i;
		if (pthread_create(&ws[i].tid, NULL, run, &ws[i]) != 0) {
			perror("pthread_create");
			return 1;
		}
	}
	if (timed) {
		/* Until SECONDS have passed, or every thread has stopped on
		 * its count. */
		while (now() - t0 < seconds) {
			int running = 0;

			for (int i = 0; i < threads; i++)
				running |= !atomic_load(&ws[i].done);
			if (!running)
				break;
			struct timespec d = { 0, 1000000 };

			nanosleep(&d, NULL);
		}
		atomic_store(&stop, 1);
	}
	long ops = 0, bytes = 0;
	int bad = 0;

	for (int i = 0; i < threads; i++) {
		pthread_join(ws[i].tid, NULL);
		if (ws[i].err) {
			fprintf(stderr, "%s: thread %d: %s: %s\n", mode, i, ws[i].what,
				strerror(ws[i].err));
			bad = 1;
		}
		ops += ws[i].ops;
		bytes += ws[i].bytes;
	}
	double el = now() - t0;

	if (bad)
		return 1;
	if (timed)
		printf("mode=%s threads=%d ops=%ld seconds=%.3f rate=%.0f unit=ops/s\n", mode,
		       threads, ops, el, ops / el);
	else
		printf("mode=%s threads=%d ops=%ld seconds=%.3f rate=%.0f unit=MB/s\n", mode,
		       threads, ops, el, bytes / el / 1e6);
	return 0;
}
