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
#   scripts/compat-tests.sh [CARGO TEST ARGS..]
set -uo pipefail
cd "$(dirname "$0")/.."
export DCACHE_TEST_MOUNT_OPTIONS=no_uring,no_passthrough_io,no_zero_trip_open,no_posix_acl,no_killpriv,no_file_handles,no_locks
echo "compat-tests: every mount with -o $DCACHE_TEST_MOUNT_OPTIONS"
cargo test --no-fail-fast "$@" -p dcache-cli --test fuse --test fuse_tools \
    --test fuse_fileops --test fuse_xattr --test fuse_acl --test fuse_edges \
    --test fuse_escape --test fuse_daemon --test mount_diff --test fuse_writeback \
    --test perm_diff --test fuse_uring --test etcd_mounts --test etcd_locks
