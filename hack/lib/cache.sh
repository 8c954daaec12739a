# Sourced by the build scripts under hack/: one build cached in a directory of its own.
#
#   cached_build OUT LABEL BUILD [ARGS...]
#
# Serialises on OUT.lock. When OUT/.complete exists the build is reused; otherwise
# `BUILD TMP ARGS...` fills TMP (OUT.tmp.<pid>, empty), which is then marked complete and
# renamed to OUT, so OUT never holds half a build. A failing BUILD ends the script (set -e or
# its own exit) and the EXIT trap removes TMP. Progress goes to the caller's `log`, prefixed
# with LABEL.

CACHE_TMP_DIRS=()
_cache_cleanup() { local d; for d in "${CACHE_TMP_DIRS[@]}"; do rm -rf "$d"; done; }
trap _cache_cleanup EXIT
trap 'exit 130' INT TERM

cached_build() {
  local out="$1" label="$2"; shift 2
  local lock
  mkdir -p "$(dirname "$out")"
  exec {lock}>"$out.lock"
  if ! flock -n "$lock"; then
    log "${label}another build holds $out.lock; waiting for it"
    flock "$lock"
  fi
  if [[ -f "$out/.complete" ]]; then
    log "${label}cached in $out"
  else
    local tmp="$out.tmp.$$" start=$SECONDS
    CACHE_TMP_DIRS+=("$tmp")
    rm -rf "$tmp"; mkdir -p "$tmp"
    "$1" "$tmp" "${@:2}"
    touch "$tmp/.complete"
    rm -rf "$out"; mv "$tmp" "$out"
    log "${label}built in $((SECONDS - start)) s"
  fi
  exec {lock}>&-
}
