#!/usr/bin/env bash
# Build the upstream ComputeDomain driver binaries (compute-domain-controller,
# compute-domain-kubelet-plugin, compute-domain-daemon) from its source tarball, for
# side-by-side runs against cdriver (bench/versus.py, the e2e parametrised over the driver).
#
# Usage: hack/peer/build.sh [TARBALL]   (default: what hack/peer/tarball.sh finds; exit 4 when
#        there is no tarball)
# Output: ${XDG_CACHE_HOME:-$HOME/.cache}/cdriver/peer-<tarball sha256 prefix>/
#   bin/      the three binaries;  src/  the extracted tree (its chart is read from there)
# A finished build (.complete marker) is reused; concurrent runs serialise on a lock file.
# Prints  peer=<dir>  on the last line. `build.sh --plan` builds nothing: it prints whether the
# build is cached (see hack/plan.sh).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/cdriver"
log() { echo "[build-peer] $*" >&2; }
# shellcheck source=../lib/cache.sh
source "$HERE/../lib/cache.sh"

PLAN=0
if [[ "${1:-}" == --plan ]]; then PLAN=1; shift; fi
COLD_S=150  # a cold build's rough time on 2 cores, in seconds

tarball="${1:-}"
if [[ -z "$tarball" ]] && (( PLAN )) && ! tarball="$("$HERE/tarball.sh" 2>/dev/null)"; then
  printf 'plan\tskip\tupstream driver (no upstream source tarball: its tests say so)\n'; exit 0
fi
if [[ -z "$tarball" ]]; then
  tarball="$("$HERE/tarball.sh")" || { rc=$?; log "nothing to build: no upstream source tarball"; exit "$rc"; }
fi
[[ -f "$tarball" ]] || { log "$tarball: no such file"; exit 4; }
out="$CACHE_ROOT/peer-$(sha256sum "$tarball" | cut -c1-16)"
if (( PLAN )); then plan_entry "$out" "upstream driver" "$COLD_S"; exit 0; fi
command -v go >/dev/null 2>&1 || { log "Go was not found on PATH: install Go 1.26 or newer"; exit 3; }
command -v gcc >/dev/null 2>&1 || { log "gcc was not found on PATH: the kubelet plugin needs cgo"; exit 3; }

build_peer() { # tmp-dir
  local tmp="$1"
  mkdir -p "$tmp/src" "$tmp/bin"
  log "building $(basename "$tarball") (cold: $(rough_time "$COLD_S") on 2 cores)"
  tar -xJf "$tarball" -C "$tmp/src" --strip-components=1
  if ! (cd "$tmp/src" && GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=1 \
        GOFLAGS="-mod=vendor -buildvcs=false" \
        CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" go build -trimpath -ldflags "-s -w" -o "$tmp/bin/" ./cmd/compute-domain-controller \
          ./cmd/compute-domain-kubelet-plugin ./cmd/compute-domain-daemon); then
    log "build FAILED"; exit 1
  fi
  for b in compute-domain-controller compute-domain-kubelet-plugin compute-domain-daemon; do
    [[ -x "$tmp/bin/$b" ]] || { log "missing binary $b"; exit 1; }
  done
}

cached_build "$out" "" build_peer
echo "peer=$out"
