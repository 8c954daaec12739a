#!/usr/bin/env bash
# Print, before a build starts, what the named components need: which are cached, which will be
# built, and a cold build's rough time on a 2-core machine. Builds nothing.
#
# Usage: hack/plan.sh COMPONENT...   (the components of hack/kube/build.sh: all, etcd, kube,
#        helm, node, kubelet, containerd, cni, runc, prometheus, kube-1.<minor>; and checkpoint-reader
#        (hack/peer-checkpoint/build.sh), peer (hack/peer/build.sh))
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { echo "[build] $*" >&2; }
# shellcheck source=lib/cache.sh
source "$HERE/lib/cache.sh"

plan_of() { # component
  case "$1" in
    checkpoint-reader) "$HERE/peer-checkpoint/build.sh" --plan ;;
    peer) "$HERE/peer/build.sh" --plan ;;
    *) "$HERE/kube/build.sh" --plan "$1" ;;
  esac
}

declare -A seen=()
cached=() todo=() skipped=() total=0
for component in "$@"; do
  [[ -n "${seen[$component]:-}" ]] && continue
  seen[$component]=1
  while IFS=$'\t' read -r tag seconds label; do
    [[ "$tag" == plan ]] || continue
    case "$seconds" in
      cached) cached+=("$label") ;;
      skip) skipped+=("$label") ;;
      *) todo+=("$(printf '%-28s %s' "$label" "$(rough_time "$seconds")")"); total=$((total + seconds)) ;;
    esac
  done < <(plan_of "$component")
done

(( ${#cached[@]} == 0 )) || log "cached: $(IFS=,; echo "${cached[*]}" | sed 's/,/, /g')"
for s in "${skipped[@]}"; do log "skipped: $s"; done
if (( ${#todo[@]} == 0 )); then
  log "nothing to build"
  exit 0
fi
log "to build now (rough times of a cold build on 2 cores; more cores are faster):"
for t in "${todo[@]}"; do log "  $t"; done
log "  in all: $(rough_time "$total"). Each build logs when it starts and ends, and every ${HEARTBEAT_S} s that it is still building;"
log "  Go's 'go: downloading ...' lines come first. The results are cached in ${XDG_CACHE_HOME:-$HOME/.cache}/cdriver."
