#!/bin/bash
# Run the FUSE mount test suites as an unprivileged user: uid and gid 65534
# with no supplementary groups and no capabilities, so every `dcache mount`
# the tests start goes through the setuid fusermount3 and the daemon gets
# the fallbacks a user's daemon gets (no file handles, no mount(2), no
# chown to others). The test binaries are built here as root; for the run
# /dev/fuse is made usable by others (distributions ship it 0666) and its
# old mode put back however the run ends; each binary runs in a scratch
# TMPDIR and HOME owned by 65534, bounded in time. The exit status is the
# first failing binary's. Without root, fusermount3 or setpriv: one
# SKIPPED line, exit 0.
#
#   scripts/nonroot-tests.sh [CARGO ARGS..] [-- TEST ARGS..]
#   e.g. scripts/nonroot-tests.sh --release -- --test-threads=1
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

user=65534
# Per binary; perm_diff, the longest, takes about two minutes on 2 CPUs.
limit=${NONROOT_TEST_TIMEOUT:-900}
# dcache-cli's mount suites. Left out in the gate: fuse_uring (switching
# io_uring on needs root, so as uid 65534 its tests only say SKIPPED);
# DCACHE_CI_TIER=full (`.ci/run full`) runs it.
suites=(fuse fuse_tools fuse_fileops fuse_xattr fuse_acl fuse_edges
    fuse_escape fuse_daemon mount_diff perm_diff etcd_mounts fuse_writeback)
if [ "${DCACHE_CI_TIER:-gate}" = full ]; then
    suites+=(fuse_uring)
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "nonroot-tests: SKIPPED (needs root to build as root and run as uid $user)"
    exit 0
fi
for tool in fusermount3 setpriv timeout; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "nonroot-tests: SKIPPED ($tool not installed)"
        exit 0
    fi
done
if [ ! -c /dev/fuse ]; then
    echo "nonroot-tests: SKIPPED (no /dev/fuse: modprobe fuse)"
    exit 0
fi

cargo_args=()
test_args=()
while [ $# -gt 0 ]; do
    if [ "$1" = -- ]; then
        shift
        test_args=("$@")
        break
    fi
    cargo_args+=("$1")
    shift
done
targets=()
for s in "${suites[@]}"; do targets+=(--test "$s"); done

# Build as root; the JSON messages name each test binary. --workspace:
# with the features `cargo test --workspace` built everything with, so
# after it nothing is rebuilt (a `-p dcache-cli` build unifies features
# differently and rebuilds much of the graph).
json=$(cargo test --no-run --workspace "${targets[@]}" "${cargo_args[@]}" \
    --message-format=json-render-diagnostics) || {
    r=$?
    echo "nonroot-tests: build failed" >&2
    exit "$r"
}
declare -A bin=()
while IFS=$'\t' read -r name exe; do
    bin[$name]=$exe
done < <(grep '"manifest_path":"[^"]*/dcache-cli/Cargo.toml"' <<<"$json" |
    sed -n 's/.*"target":{"kind":\["test"\][^}]*"name":"\([^"]*\)".*"executable":"\([^"]*\)".*/\1\t\2/p')
for s in "${suites[@]}"; do
    if [ -z "${bin[$s]:-}" ]; then
        echo "nonroot-tests: cargo named no binary for --test $s" >&2
        exit 1
    fi
done

scratch=$(mktemp -d /tmp/dcache-nonroot.XXXXXX)
mode=$(stat -c %a /dev/fuse)
# shellcheck disable=SC2317 # (run by the EXIT trap)
cleanup() {
    chmod "$mode" /dev/fuse
    # A mount a failed test left behind is detached before its directory
    # goes (rm must not reach into a live mount).
    awk -v d="$scratch/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo |
        sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
    rm -rf --one-file-system "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
chmod 0666 /dev/fuse
mkdir "$scratch/home" "$scratch/tmp"
# The S3 server etcd_mounts starts (DCACHE_WEED, from scripts/seaweedfs.sh):
# a copy the user can run, since root's cache is not theirs to read.
if [ -n "${DCACHE_WEED:-}" ] && [ -x "$DCACHE_WEED" ]; then
    cp "$DCACHE_WEED" "$scratch/weed"
    export DCACHE_WEED="$scratch/weed"
fi
chown -R "$user:$user" "$scratch"

# Everything the binaries read must be reachable by the user: the test
# binaries, the dcache binary they start, and the sources they read.
for s in "${suites[@]}"; do
    if ! setpriv --reuid="$user" --regid="$user" --clear-groups test -x "${bin[$s]}"; then
        echo "nonroot-tests: uid $user cannot run ${bin[$s]} (a directory above it is not 0755?)" >&2
        exit 1
    fi
done

echo "nonroot-tests: as uid $user through $(command -v fusermount3), /dev/fuse 0666 for the run (was $mode)"
rc=0
for s in "${suites[@]}"; do
    echo "--- $s (uid $user)"
    start=$SECONDS
    # In the package's directory, as `cargo test` runs them.
    (cd dcache-cli && timeout --kill-after=30 "$limit" \
        setpriv --reuid="$user" --regid="$user" --clear-groups \
        env HOME="$scratch/home" TMPDIR="$scratch/tmp" PATH="$PATH" \
        "${bin[$s]}" "${test_args[@]}")
    r=$?
    echo "--- $s: exit $r, $((SECONDS - start)) s"
    [ "$r" -ne 124 ] || echo "nonroot-tests: $s ran past ${limit} s" >&2
    if [ "$r" -ne 0 ] && [ "$rc" -eq 0 ]; then
        rc=$r
    fi
done
exit "$rc"
