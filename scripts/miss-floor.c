// What the memory system allows a batched walk at best: K independent
// random cache-line reads per "path" over a region as large as the cached
// tree, each prefetched D paths ahead, so that every miss overlaps with
// the others (docs/BENCHMARKS.md, "The memory system's floor for
// stat_many"). Prints ns per path for several D; the best is the floor
// that misses alone put under `stat_many` on this machine.
//
//   cc -O2 -o miss-floor scripts/miss-floor.c && ./miss-floor [MIB] [K]
//   e.g. ./miss-floor 352 7   (1M paths at 352 bytes, ~7 LL misses each)
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <xmmintrin.h>

static uint64_t rng = 88172645463325252ull;

static inline uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

enum { RING = 256, KMAX = 16 };
static uint64_t ring[RING][KMAX];

int main(int argc, char **argv) {
  size_t bytes = (size_t)(argc > 1 ? atol(argv[1]) : 352) << 20;
  int k_per = argc > 2 ? atoi(argv[2]) : 7;
  if (bytes == 0 || k_per < 1 || k_per > KMAX) {
    fprintf(stderr, "usage: %s [MIB > 0] [K in 1..%d]\n", argv[0], KMAX);
    return 2;
  }
  size_t lines = bytes / 64;
  char *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  // As the dcache's slabs past 64 MiB: huge pages, so a miss is not also
  // a page walk.
  madvise(m, bytes, MADV_HUGEPAGE);
  memset(m, 1, bytes);
  const int ahead[] = {1, 8, 16, 24, 48, 96};
  for (size_t a = 0; a < sizeof ahead / sizeof ahead[0]; a++) {
    int d = ahead[a];
    long n = 3000000;
    uint64_t sum = 0;
    for (int i = 0; i < d; i++)
      for (int k = 0; k < k_per; k++) {
        ring[i][k] = (next() % lines) * 64;
        _mm_prefetch(m + ring[i][k], _MM_HINT_T0);
      }
    double t0 = now();
    for (long i = 0; i < n; i++) {
      int later = (i + d) % RING, here = i % RING;
      for (int k = 0; k < k_per; k++) {
        ring[later][k] = (next() % lines) * 64;
        _mm_prefetch(m + ring[later][k], _MM_HINT_T0);
      }
      for (int k = 0; k < k_per; k++) sum += (unsigned char)m[ring[here][k]];
    }
    double t = now() - t0;
    printf("region %zu MiB, %d misses per path, prefetched %2d paths ahead: %6.1f ns per path (%5.1f per miss)\n",
           bytes >> 20, k_per, d, t / n * 1e9, t / n / k_per * 1e9);
    if (sum == 42) puts(""); // keep the loads
  }
  return 0;
}
