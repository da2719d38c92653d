#!/bin/bash
# Run the FUSE mount test suites over FUSE over io_uring: with
# /sys/module/fuse/parameters/enable_uring set to Y every mount the tests
# make uses the rings (io_uring is the default wherever the kernel offers
# it), so the same tests answer for both transports. Needs root and a
# kernel with the parameter (6.14+, CONFIG_FUSE_IO_URING); elsewhere it
# prints one SKIPPED line and exits 0. The parameter is put back as it was,
# however the run ends.
#
#   scripts/uring-tests.sh [CARGO TEST ARGS..]
#   e.g. scripts/uring-tests.sh --release
set -uo pipefail
cd "$(dirname "$0")/.."
param=/sys/module/fuse/parameters/enable_uring
if [ "$(id -u)" -ne 0 ] || [ ! -w "$param" ]; then
    echo "uring-tests: SKIPPED (needs root and $param: Linux 6.14+ with CONFIG_FUSE_IO_URING)"
    exit 0
fi
was=$(cat "$param")
trap 'echo "$was" > "$param"' EXIT
echo Y > "$param"
# The mount suites: dcache-fuse's own, and the CLI's that mount, except
# fuse_scale (100,000 files under a descriptor bound: 6 minutes on a 2-CPU
# box; it passes over io_uring too, run it by hand when the ring changes).
# Both commands run to the end; the exit status is the first failure's.
rc=0
cargo test --no-fail-fast "$@" -p dcache-fuse || rc=$?
cargo test --no-fail-fast "$@" -p dcache-cli --test fuse --test fuse_tools \
    --test fuse_fileops --test fuse_xattr --test fuse_acl --test fuse_edges \
    --test fuse_escape --test fuse_daemon --test mount_diff --test fuse_writeback \
    --test perm_diff --test fuse_uring --test etcd_mounts --test etcd_locks || {
    r=$?
    [ "$rc" -ne 0 ] || rc=$r
}
exit "$rc"
