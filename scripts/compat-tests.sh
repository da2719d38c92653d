#!/bin/bash
# Run the FUSE mount test suites with every feature the daemon negotiates
# with the kernel switched off, as an older kernel would leave it: no FUSE
# over io_uring, no passthrough I/O, no zero-trip opens (NO_OPEN /
# NO_OPENDIR), no POSIX_ACL / DONT_MASK, no HANDLE_KILLPRIV_V2, no
# file handles in the passthrough backend, and no locks kept by the
# daemon (POSIX_LOCKS / FLOCK_LOCKS). Every mount the tests make gets
# these options after its own (DCACHE_TEST_MOUNT_OPTIONS, read by
# dcache-cli/tests/fuse_common); a test of one of those features itself
# prints a SKIPPED line.
#
# Only dcache-cli's mount suites read the variable, so only they run.
# In the gate fuse_uring is left out (with io_uring off all its tests
# skip but no_uring_says_so, which `cargo test --workspace` ran as it
# is), and fuse_scale (6 minutes); DCACHE_CI_TIER=full (`.ci/run full`)
# runs both.
#
#   scripts/compat-tests.sh [CARGO TEST ARGS..]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export DCACHE_TEST_MOUNT_OPTIONS=no_uring,no_passthrough_io,no_zero_trip_open,no_posix_acl,no_killpriv,no_file_handles,no_locks
suites=(fuse fuse_tools fuse_fileops fuse_xattr fuse_acl fuse_edges fuse_escape
    fuse_daemon mount_diff fuse_writeback perm_diff etcd_mounts etcd_locks)
if [ "${DCACHE_CI_TIER:-gate}" = full ]; then
    # (--test fuse_uring also names dcache-fuse's, which ignores the
    # options: a second run of it, in the full tier only.)
    suites+=(fuse_uring fuse_scale)
fi
targets=()
for s in "${suites[@]}"; do targets+=(--test "$s"); done
echo "compat-tests: every mount with -o $DCACHE_TEST_MOUNT_OPTIONS; ${#suites[@]} suites (${DCACHE_CI_TIER:-gate} tier)"
# --workspace: built with the workspace's features, as `cargo test
# --workspace` built them, so nothing is rebuilt (see uring-tests.sh).
cargo test --no-fail-fast --workspace "$@" "${targets[@]}"
