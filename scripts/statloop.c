/* stat client for scripts/fuse-vs-libfuse.sh and scripts/fuse-callgrind.sh.
 *
 *   statloop DIR THREADS SECONDS [MAX_STATS_PER_THREAD] [PATH]
 *
 * Opens DIR once (O_PATH: no OPENDIR/RELEASEDIR request through FUSE),
 * then THREADS threads each call
 * fstatat(dirfd, PATH, &st, 0) (PATH defaults to "a/b/c/file") in a loop
 * for SECONDS seconds, or until each thread has made MAX_STATS_PER_THREAD
 * calls when that is given and above 0 (SECONDS is then only an upper
 * bound). Prints one line:
 *
 *   threads=N stats=TOTAL seconds=ELAPSED stats/s=RATE
 *
 * Exits 1 on the first failed fstatat (prints errno).
 * Build: cc -O2 -pthread -o statloop statloop.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static atomic_int stop;
static int dirfd_;
static long max_per_thread;
static const char *path = "a/b/c/file";

struct worker {
	pthread_t tid;
	long count;
	int err;
	atomic_int done;
};

static void *run(void *arg)
{
	struct worker *w = arg;
	struct stat st;
	long n = 0;

	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		if (max_per_thread > 0 && n >= max_per_thread)
			break;
		if (fstatat(dirfd_, path, &st, 0) != 0) {
			w->err = errno;
			break;
		}
		n++;
	}
	w->count = n;
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
	if (argc < 4 || argc > 6) {
		fprintf(stderr,
			"usage: %s DIR THREADS SECONDS [MAX_STATS_PER_THREAD] [PATH]\n",
			argv[0]);
		return 2;
	}
	int threads = atoi(argv[2]);
	double seconds = atof(argv[3]);
	if (argc > 4)
		max_per_thread = atol(argv[4]);
	if (argc > 5)
		path = argv[5];
	if (threads < 1 || seconds <= 0) {
		fprintf(stderr, "statloop: THREADS >= 1 and SECONDS > 0\n");
		return 2;
	}
	dirfd_ = open(argv[1], O_PATH | O_DIRECTORY);
	if (dirfd_ < 0) {
		fprintf(stderr, "statloop: open %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	struct worker *w = calloc(threads, sizeof(*w));
	if (!w)
		return 1;

	double t0 = now();
	for (int i = 0; i < threads; i++)
		if (pthread_create(&w[i].tid, NULL, run, &w[i]) != 0) {
			fprintf(stderr, "statloop: pthread_create failed\n");
			return 1;
		}

	/* Sleep in short steps so a run whose threads all stopped early (a
	 * MAX_STATS_PER_THREAD bound, an error) is not held for SECONDS. */
	double end = t0 + seconds;
	for (;;) {
		double left = end - now();
		if (left <= 0)
			break;
		int all_done = 1;
		for (int i = 0; i < threads && all_done; i++)
			if (!atomic_load(&w[i].done))
				all_done = 0;
		if (all_done)
			break;
		struct timespec ts = { 0, left < 0.01 ? (long)(left * 1e9) : 10000000L };
		nanosleep(&ts, NULL);
	}
	atomic_store(&stop, 1);

	long total = 0;
	int err = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(w[i].tid, NULL);
		total += w[i].count;
		if (w[i].err)
			err = w[i].err;
	}
	double elapsed = now() - t0;
	printf("threads=%d stats=%ld seconds=%.3f stats/s=%.0f\n", threads, total,
	       elapsed, total / elapsed);
	if (err) {
		fprintf(stderr, "statloop: fstatat %s: %s\n", path, strerror(err));
		return 1;
	}
	return 0;
}
