#!/bin/bash
# Run the FUSE mount test suites over FUSE over io_uring: with
# /sys/module/fuse/parameters/enable_uring set to Y every mount the tests
# make uses the rings (io_uring is the default wherever the kernel offers
# it), so the same tests answer for both transports. Needs root and a
# kernel with the parameter (6.14+, CONFIG_FUSE_IO_URING); elsewhere it
# prints one SKIPPED line and exits 0. The parameter is put back as it was,
# however the run ends.
#
# Only the test binaries whose behaviour depends on the transport run
# here, not whole packages (`cargo test --workspace` ran everything once,
# on /dev/fuse); DCACHE_CI_TIER=full (`.ci/run full`) adds the rest of
# the mount suites (see below).
#
#   scripts/uring-tests.sh [CARGO TEST ARGS..]
#   e.g. scripts/uring-tests.sh --release
#        DCACHE_CI_TIER=full scripts/uring-tests.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
param=/sys/module/fuse/parameters/enable_uring
if [ "$(id -u)" -ne 0 ] || [ ! -w "$param" ]; then
    echo "uring-tests: SKIPPED (needs root and $param: Linux 6.14+ with CONFIG_FUSE_IO_URING)"
    exit 0
fi
was=$(cat "$param")
trap 'echo "$was" > "$param"' EXIT
echo Y > "$param"
# The tests that switch enable_uring on themselves (dcache_fuse::testing)
# may: it is on already, and put back above.
export DCACHE_TEST_ENABLE_URING=1

# The suites that reach the kernel through a mount. dcache-fuse's: locks
# (blocking waits and interrupts ride the transport), the zero-trip open,
# the xattr fallback, FLUSH, passthrough I/O and poll. dcache-cli's:
# every mount suite on memfs and passthrough (mount_diff and perm_diff
# compare each errno with tmpfs through the rings).
#
# Not here, because the transport does not change what they check:
# dcache-fuse's lib unit tests, doc tests, fuse_ops and cross_mounts (the
# request core called in-process, no kernel); and, in the gate, these:
# - fuse_uring (both crates): each test switches io_uring on itself, so
#   `cargo test --workspace` already ran them over the rings (given
#   DCACHE_TEST_ENABLE_URING, which .ci/run sets);
# - etcd_mounts, etcd_locks: the etcd backend answers behind the Vfs
#   whatever carried the request; what differs by transport (a handler
#   that blocks a queue's thread, a lock wait interrupted by a signal) is
#   covered by fuse_locks and the memfs/passthrough suites here, and
#   etcd_locks's own io_uring tests switch the rings on in the main run.
#   They start etcd and SeaweedFS and are the slowest suites here.
# - fuse_scale (100,000 files: 6 minutes on a 2-CPU box).
# The full tier runs all four over io_uring too.
suites=(fuse_locks fuse_no_open fuse_no_xattr fuse_noflush fuse_passthrough_io fuse_poll
    fuse fuse_tools fuse_fileops fuse_xattr fuse_acl fuse_edges fuse_escape
    fuse_daemon mount_diff fuse_writeback perm_diff)
if [ "${DCACHE_CI_TIER:-gate}" = full ]; then
    suites+=(fuse_uring etcd_mounts etcd_locks fuse_scale)
fi
targets=()
for s in "${suites[@]}"; do targets+=(--test "$s"); done
echo "uring-tests: enable_uring Y (was $was); ${#suites[@]} suites (${DCACHE_CI_TIER:-gate} tier)"
# --workspace with explicit targets: the features every crate is built
# with are the workspace's, as in `cargo test --workspace`, so nothing is
# rebuilt (a `-p dcache-fuse` build has the core without `experiments`, a
# `-p dcache-cli` one other features of serde, libc and more: each rebuilt
# half the graph).
cargo test --no-fail-fast --workspace "$@" "${targets[@]}"
