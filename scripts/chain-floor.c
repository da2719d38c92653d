// What the memory system allows a batched walk whose misses come in
// dependent chains, as a leaf's do (hash bucket -> dentry -> inode: each
// address is read from the line before). miss-floor.c measures independent
// misses; this one measures chains of DEPTH dependent random lines, the last
// one followed by its neighbour (an inode's second line), walked by LANES
// interleaved walks that prefetch each next line a round ahead, exactly as
// `vfs::batch` does (docs/BENCHMARKS.md, "What bounds stat_many at 1M").
// WORK adds that many rounds of dependent arithmetic per chain step (the
// walk's own instructions), so the floor with the walk's work can be read
// off as well. Prints ns per path for several lane counts.
//
//   cc -O2 -o chain-floor scripts/chain-floor.c && ./chain-floor [MIB] [DEPTH] [WORK]
//   e.g. ./chain-floor 352 3 0
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

enum { LMAX = 128 };

struct lane {
  uint64_t at; // byte offset of the line to read next (prefetched)
  int left;    // chain steps left
};

int main(int argc, char **argv) {
  size_t bytes = (size_t)(argc > 1 ? atol(argv[1]) : 352) << 20;
  int depth = argc > 2 ? atoi(argv[2]) : 3;
  int work = argc > 3 ? atoi(argv[3]) : 0;
  if (bytes < (1 << 20) || depth < 1 || work < 0) {
    fprintf(stderr, "usage: %s [MIB >= 1] [DEPTH >= 1] [WORK >= 0]\n", argv[0]);
    return 2;
  }
  size_t pairs = bytes / 128;
  char *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  // As the dcache's slabs past 64 MiB and its bucket array: huge pages.
  madvise(m, bytes, MADV_HUGEPAGE);
  // Every 128-byte pair's first word: the offset of a random other pair
  // (the pointer the next step follows).
  for (size_t p = 0; p < pairs; p++) *(uint64_t *)(m + p * 128) = (next() % pairs) * 128;
  const int lanes_of[] = {1, 4, 8, 16, 24, 32, 48, 64};
  for (size_t a = 0; a < sizeof lanes_of / sizeof lanes_of[0]; a++) {
    int nl = lanes_of[a];
    struct lane l[LMAX];
    for (int i = 0; i < nl; i++) {
      l[i].at = (next() % pairs) * 128;
      l[i].left = depth;
      _mm_prefetch(m + l[i].at, _MM_HINT_T0);
    }
    long paths = 0, target = 2000000;
    uint64_t sum = 0, x = 1;
    double t0 = now();
    while (paths < target) {
      for (int i = 0; i < nl; i++) {
        uint64_t nx = *(volatile uint64_t *)(m + l[i].at);
        for (int w = 0; w < work; w++) x = x * 6364136223846793005ull + nx;
        if (--l[i].left == 0) {
          // The inode: its second line too (its attributes span both).
          sum += (unsigned char)m[l[i].at + 64];
          paths++;
          l[i].left = depth;
          nx = (next() % pairs) * 128; // the next path's first bucket
        }
        l[i].at = nx;
        _mm_prefetch(m + nx, _MM_HINT_T0);
        if (l[i].left == 1) _mm_prefetch(m + nx + 64, _MM_HINT_T0);
      }
    }
    double t = now() - t0;
    printf("region %zu MiB, chains of %d lines (+1 adjacent), work %d, %2d lanes: %6.1f ns per path\n",
           bytes >> 20, depth, work, nl, t / paths * 1e9);
    if (sum + x == 42) puts(""); // keep the loads
  }
  return 0;
}
