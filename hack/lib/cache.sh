# Sourced by the build scripts under hack/: one build cached in a directory of its own.
#
#   cached_build OUT LABEL BUILD [ARGS...]
#
# Serialises on OUT.lock. When OUT/.complete exists the build is reused; otherwise
# `BUILD TMP ARGS...` fills TMP (OUT.tmp.<pid>, empty), which is then marked complete and
# renamed to OUT, so OUT never holds half a build. A failing BUILD ends the script (set -e or
# its own exit) and the EXIT trap removes TMP. Progress goes to the caller's `log`, prefixed
# with LABEL: while BUILD runs, a "still building" line every $CDRIVER_BUILD_HEARTBEAT_S
# seconds (default 30) says that it is alive.
#
#   plan_entry OUT LABEL SECONDS
#
# What `--plan` prints instead of building (one line on stdout, read by hack/plan.sh):
# "plan<TAB>cached<TAB>LABEL" when OUT is complete, else "plan<TAB>SECONDS<TAB>LABEL", SECONDS
# being a cold build's rough time on a 2-core machine.

CACHE_TMP_DIRS=()
HEARTBEAT_PID=""
HEARTBEAT_S="${CDRIVER_BUILD_HEARTBEAT_S:-30}"
_cache_cleanup() {
  local d
  _heartbeat_stop
  for d in "${CACHE_TMP_DIRS[@]}"; do rm -rf "$d"; done
}
trap _cache_cleanup EXIT
trap 'exit 130' INT TERM

# "2m30s" of a number of seconds.
minutes_seconds() { if (( $1 >= 60 )); then echo "$(($1 / 60))m$(printf %02d $(($1 % 60)))s"; else echo "$1s"; fi; }

# "about 7 min" of a rough number of seconds.
rough_time() { if (( $1 < 60 )); then echo "under 1 min"; else echo "about $((($1 + 30) / 60)) min"; fi; }

_heartbeat_start() { # label
  local label="$1"
  (
    elapsed=0
    # sleep does not keep the caller's output open: a reader sees its end when the build ends
    while sleep "$HEARTBEAT_S" </dev/null >/dev/null 2>&1; do
      elapsed=$((elapsed + HEARTBEAT_S))
      log "${label}still building ($(minutes_seconds "$elapsed"))"
    done
  ) &
  HEARTBEAT_PID=$!
}

_heartbeat_stop() {
  [[ -n "$HEARTBEAT_PID" ]] || return 0
  kill "$HEARTBEAT_PID" 2>/dev/null || true
  wait "$HEARTBEAT_PID" 2>/dev/null || true
  HEARTBEAT_PID=""
}

plan_entry() { # out label seconds
  if [[ -f "$1/.complete" ]]; then
    printf 'plan\tcached\t%s\n' "$2"
  else
    printf 'plan\t%s\t%s\n' "$3" "$2"
  fi
}

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
    _heartbeat_start "$label"
    "$1" "$tmp" "${@:2}"
    _heartbeat_stop
    touch "$tmp/.complete"
    rm -rf "$out"; mv "$tmp" "$out"
    log "${label}built in $(minutes_seconds $((SECONDS - start)))"
  fi
  exec {lock}>&-
}
