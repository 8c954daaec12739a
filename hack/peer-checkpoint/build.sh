#!/usr/bin/env bash
# Build upstream-checkpoint-reader: main.go here plus the upstream plugin's checkpoint code,
# taken at build time from the upstream source tarball (see ../../README.md, "Migrating from the
# upstream driver"). Nothing of upstream is kept in this repository.
#
# Source: the upstream source tarball hack/peer/tarball.sh finds
# Output: ${XDG_CACHE_HOME:-$HOME/.cache}/cdriver/upstream-checkpoint-reader-<hash>/upstream-checkpoint-reader
# Prints the binary's path on its last line. Exit 4: no tarball (nothing to build from).
# `build.sh --plan` builds nothing: it prints whether the reader is cached (see hack/plan.sh).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/cdriver"
FILES=(checkpoint.go checkpointv.go checkpoint_legacy.go prepared.go types.go deviceinfo.go)
export GOWORK=off GOTOOLCHAIN=local GOFLAGS="-mod=vendor -buildvcs=false" CGO_ENABLED=0

log() { echo "[upstream-checkpoint-reader] $*" >&2; }
# shellcheck source=../lib/cache.sh
source "$HERE/../lib/cache.sh"

PLAN=0
if [[ "${1:-}" == --plan ]]; then PLAN=1; fi
COLD_S=60  # a cold build's rough time on 2 cores, in seconds

if ! tarball="$("$HERE/../peer/tarball.sh" 2>/dev/null)"; then
  (( PLAN )) && { printf 'plan\tskip\tupstream checkpoint reader (no upstream source tarball: its tests say so)\n'; exit 0; }
  tarball="$("$HERE/../peer/tarball.sh")" || exit $?
fi
key="$(cat "$HERE/main.go" "$HERE/build.sh" | sha256sum | cut -c1-8)-$(basename "$tarball" .tar.xz | sed 's/.*-//')"
out="$CACHE_ROOT/upstream-checkpoint-reader-$key"
build_reader() { # tmp-dir
  local tmp="$1"
  log "building from $tarball (cold: $(rough_time "$COLD_S") on 2 cores)"
  tar -xJf "$tarball" -C "$tmp"
  local src pkg plugin
  src="$(ls -d "$tmp"/*/ | head -n1)"
  pkg="$src/cmd/cdriver-upstream-checkpoint-reader"
  mkdir -p "$pkg"
  for f in "${FILES[@]}"; do cp "$src/cmd/compute-domain-kubelet-plugin/$f" "$pkg/"; done
  cp "$HERE/main.go" "$pkg/main.go"
  # Two declarations the checkpoint code needs live in files with the whole plugin's dependencies.
  plugin="$src/cmd/compute-domain-kubelet-plugin"
  {
    echo "package main"
    grep -m1 'cdiapi "' "$plugin/device_state.go" | sed 's/^\s*/import /'
    sed -n '/^type DeviceConfigState struct/,/^}/p' "$plugin/device_state.go"
    grep -m1 -E '^\s+DriverName\s+=' "$plugin/main.go" | sed 's/^\s*/const /'
  } > "$pkg/declarations.go"
  (cd "$src" && go build -ldflags "-s -w" -o "$tmp/upstream-checkpoint-reader" ./cmd/cdriver-upstream-checkpoint-reader)
  find "$tmp" -mindepth 1 -maxdepth 1 ! -name upstream-checkpoint-reader -exec rm -rf {} +
}

if (( PLAN )); then plan_entry "$out" "upstream checkpoint reader" "$COLD_S"; exit 0; fi
cached_build "$out" "" build_reader
echo "$out/upstream-checkpoint-reader"
