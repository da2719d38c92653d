#!/usr/bin/env bash
# Build SeaweedFS's `weed` (the S3-compatible server the object-store
# tests start) from the Go module proxy at one pinned version, and print
# the binary's path on stdout. The binary is kept under a directory named
# by the version and reused when it is there, so only the first run pays
# for the build (about 7 minutes on 2 cores).
#
#   scripts/seaweedfs.sh            # prints e.g. ~/.cache/dcache/seaweedfs/<version>/weed
#   DCACHE_WEED=$(scripts/seaweedfs.sh) cargo test -p dcache-etcd
#
# The cache: $DCACHE_SEAWEEDFS_CACHE, else ~/.cache/dcache/seaweedfs. The
# dcache-etcd tests look for the binary in $DCACHE_WEED, else at the same
# place for the same version (dcache-bench/src/seaweedfs.rs names it: keep
# the two in step).
#
# Why not `go install MODULE@VERSION`: SeaweedFS's go.mod has replace
# directives, which `go install` refuses. So the module is downloaded
# (`go mod download`), copied somewhere writable, and built there, which
# fetches its dependencies from the module proxy as any module build does.
#
# Exits non-zero, with one line on stderr saying why, when Go is missing or
# the module cannot be fetched or built.
set -euo pipefail

module=github.com/seaweedfs/seaweedfs
version=v0.0.0-20261109003541-7506e5f91cd6

cache=${DCACHE_SEAWEEDFS_CACHE:-${HOME:-/root}/.cache/dcache/seaweedfs}
bin=$cache/$version/weed

fail() {
    echo "seaweedfs.sh: $*" >&2
    exit 1
}

usable() { [ -x "$1" ] && "$1" version >/dev/null 2>&1; }

if usable "$bin"; then
    echo "$bin"
    exit 0
fi
# Go's own installer puts it in /usr/local/go, which a PATH may lack.
command -v go >/dev/null 2>&1 || [ ! -x /usr/local/go/bin/go ] || PATH=$PATH:/usr/local/go/bin
command -v go >/dev/null 2>&1 ||
    fail "no Go toolchain on the PATH: cannot build SeaweedFS $version (install Go, or set DCACHE_WEED to a weed binary)"
mkdir -p "$cache/$version" || fail "cannot create $cache/$version"

# One build at a time per cache: a second run waits for the first and then
# finds its binary.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$cache/$version/.lock"
    flock 9
    if usable "$bin"; then
        echo "$bin"
        exit 0
    fi
fi

work=$(mktemp -d "$cache/$version/build.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
start=$(date +%s)
echo "seaweedfs.sh: building $module@$version (first run only; several minutes)" >&2

# Outside any module, so the download is of exactly this version.
cd "$work"
if ! json=$(GOFLAGS=-mod=mod go mod download -json "$module@$version" 2>"$work/download.err"); then
    cat "$work/download.err" >&2
    fail "could not download $module@$version from the Go module proxy ($(go env GOPROXY))"
fi
dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
[ -n "$dir" ] && [ -d "$dir/weed" ] || fail "go mod download printed no module directory: $json"

# The module cache is read-only: build in a writable copy.
cp -R "$dir" "$work/src"
chmod -R u+w "$work/src"
cd "$work/src"
if ! CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/weed" ./weed >"$work/build.log" 2>&1; then
    tail -n 40 "$work/build.log" >&2
    fail "go build of $module@$version failed (log above)"
fi
usable "$work/weed" || fail "the built weed does not run"
mv -f "$work/weed" "$bin"
echo "seaweedfs.sh: built $bin in $(($(date +%s) - start)) s" >&2
echo "$bin"
