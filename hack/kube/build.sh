#!/usr/bin/env bash
# Build the local control-plane binaries (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, helm) from the Go wrapper modules in this directory; `node` builds
# what a real node runs (kubelet, containerd with ctr and the runc shim, the CNI plugins) and
# makes sure runc is installed (Debian's package).
# `build.sh kube-1.33` builds an older Kubernetes minor (kube-apiserver, controller-manager,
# scheduler only) from the module in kube-1.33/, for the version-range tests.
# `build.sh prometheus` builds Prometheus and promtool (API only, no web UI assets; of service
# discovery only Kubernetes' and the file/HTTP ones), for the monitoring tests.
#
# Output: ${XDG_CACHE_HOME:-$HOME/.cache}/cdriver/<component>-<version>-<gosum hash>/
# A finished build is reused; a change of version or go.sum builds into a new directory.
# Concurrent invocations serialise on a lock file; a failed build leaves no binaries behind.
# Prints the bin directory of each component on the last lines:  <component>=<dir>
#
# `build.sh --plan [COMPONENT]` builds nothing: it prints, per component, whether it is cached
# or what a cold build of it roughly takes on 2 cores (the lines hack/plan.sh reads).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/cdriver"
KUBE_VERSION="v1.37.2"
ETCD_VERSION="v3.6.16"
HELM_VERSION="v3.22.0"
CONTAINERD_VERSION="v2.4.2"
CNI_VERSION="v1.10.0"
# Prometheus' Go module v0.3MM.P is Prometheus 3.MM.P
PROMETHEUS_MODULE_VERSION="v0.316.0"
PROMETHEUS_VERSION="3.16.0"
export GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false

PLAN=0
if [[ "${1:-}" == --plan ]]; then PLAN=1; shift; fi
# A cold build's rough time on a 2-core machine, in seconds (measured; kubelet after kube, whose
# compiled packages it shares through Go's build cache).
declare -A COLD_S=([etcd]=45 [kube]=420 [helm]=70 [kubelet]=60 [containerd]=95 [cni]=15 [runc]=20 [prometheus]=130)

mkdir -p "$CACHE_ROOT"

log() { echo "[build-control-plane] $*" >&2; }
# shellcheck source=../lib/cache.sh
source "$HERE/../lib/cache.sh"

case "${1:-all}" in
  all|etcd|kube|helm|node|kubelet|containerd|cni|runc|prometheus) ;;
  kube-1.*)
    [[ -f "$HERE/${1}/go.mod" ]] || { log "no module for '${1}': add $HERE/${1}/go.mod (one per Kubernetes minor)"; exit 2; } ;;
  *) log "unknown component '${1}': use one of all, etcd, kube, helm, node, kubelet, containerd, cni, runc, prometheus, kube-1.<minor> (see the kube-1.* modules here)"; exit 2 ;;
esac

key_dir() { # component version module-dir
  local sum
  sum="$(cat "$3/go.mod" "$3/go.sum" | sha256sum | cut -c1-12)"
  echo "$CACHE_ROOT/$1-$2-$sum"
}

build_component() { # component version module-dir expected-binaries... -- go build args
  local out; out="$(key_dir "$1" "$2" "$3")"
  if (( PLAN )); then plan_entry "$out" "$1 $2" "${COLD_S[$1]}"; return; fi
  cached_build "$out" "$1 $2: " go_build "$@"
  echo "$1=$out"
}

go_build() { # tmp-dir component version module-dir expected-binaries... -- go build args
  local tmp="$1" comp="$2" version="$3" moddir="$4"; shift 4
  local bins=() ; while [[ "$1" != "--" ]]; do bins+=("$1"); shift; done; shift
  if ! command -v go >/dev/null 2>&1; then
    log "Go was not found on PATH: install Go 1.26 or newer (with access to the Go module proxy)"
    log "or point CDRIVER_ETCD_BIN_DIR / CDRIVER_KUBE_BIN_DIR / CDRIVER_HELM_BIN_DIR / CDRIVER_PROMETHEUS_BIN_DIR at prebuilt binaries"
    exit 3
  fi
  log "$comp $version: building (cold: $(rough_time "${COLD_S[$comp]}") on 2 cores)"
  if ! (cd "$moddir" && go build -trimpath -o "$tmp/" "$@"); then
    log "$comp: build FAILED"; exit 1
  fi
  for b in "${bins[@]}"; do
    [[ -x "$tmp/$b" ]] || { log "$comp: missing binary $b"; exit 1; }
  done
}

want="${1:-all}"
kube_ldflags() { # version minor
  local v
  for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    printf -- ' -X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%s' "$v" "$1" "$v" "$v" "$2"
  done
}
KUBE_LDFLAGS="-s -w$(kube_ldflags "$KUBE_VERSION" 37)"

if [[ "$want" == kube-1.* ]]; then
  moddir="$HERE/$want"
  version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v1\./ {print $2; exit}' "$moddir/go.mod")"
  [[ -n "$version" ]] || { log "$moddir/go.mod: no 'k8s.io/kubernetes vX.Y.Z' requirement"; exit 2; }
  minor="${want#kube-1.}"
  # Cached as kube-<version>-<hash>; reported as kube-1.<minor>=<dir>.
  build_component kube "$version" "$moddir" kube-apiserver kube-controller-manager kube-scheduler -- \
    -ldflags "-s -w$(kube_ldflags "$version" "$minor")" k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler \
    | sed "s/^kube=/$want=/"
  exit 0
fi

if [[ "$want" == all || "$want" == etcd ]]; then
  build_component etcd "$ETCD_VERSION" "$HERE/etcd" etcd -- -ldflags "-s -w" .
fi
if [[ "$want" == all || "$want" == kube ]]; then
  build_component kube "$KUBE_VERSION" "$HERE/kube" kube-apiserver kube-controller-manager kube-scheduler kubectl -- \
    -ldflags "$KUBE_LDFLAGS" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
fi
if [[ "$want" == all || "$want" == helm ]]; then
  # Like a released helm, report the Kubernetes version of its client-go as the default
  # (an unset default is v1.20, which fails charts' kubeVersion in `helm template`).
  HELM_KUBE="-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37"
  HELM_KUBE+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37"
  build_component helm "$HELM_VERSION-kube1.37" "$HERE/helm" helm -- \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION} $HELM_KUBE" helm.sh/helm/v3/cmd/helm
fi

if [[ "$want" == prometheus ]]; then
  # remove_all_sd + enable_kubernetes_sd: of the service discoveries only Kubernetes' (and the
  # file and HTTP ones, always in); without the builtinassets tag the web UI is left out and the
  # HTTP API still served. A cold build takes about 2 min on 2 cores, against 4 with every discovery.
  PROM_VERSION_PKG=github.com/prometheus/common/version
  build_component prometheus "$PROMETHEUS_MODULE_VERSION" "$HERE/prometheus" prometheus promtool -- \
    -tags "remove_all_sd enable_kubernetes_sd" -ldflags "-s -w -X $PROM_VERSION_PKG.Version=$PROMETHEUS_VERSION" \
    github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
fi

if [[ "$want" == node || "$want" == kubelet ]]; then
  build_component kubelet "$KUBE_VERSION" "$HERE/kubelet" kubelet -- -ldflags "$KUBE_LDFLAGS" k8s.io/kubernetes/cmd/kubelet
fi
if [[ "$want" == node || "$want" == containerd ]]; then
  CTRD_LDFLAGS="-s -w -X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION}"
  build_component containerd "$CONTAINERD_VERSION" "$HERE/containerd" containerd ctr containerd-shim-runc-v2 -- \
    -tags "no_btrfs no_devmapper no_zfs" -ldflags "$CTRD_LDFLAGS" github.com/containerd/containerd/v2/cmd/containerd \
    github.com/containerd/containerd/v2/cmd/ctr github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
fi
if [[ "$want" == node || "$want" == cni ]]; then
  build_component cni "$CNI_VERSION" "$HERE/cni" bridge host-local loopback portmap -- -ldflags "-s -w" \
    github.com/containernetworking/plugins/plugins/main/bridge github.com/containernetworking/plugins/plugins/ipam/host-local \
    github.com/containernetworking/plugins/plugins/main/loopback github.com/containernetworking/plugins/plugins/meta/portmap
fi
if [[ "$want" == node || "$want" == runc ]]; then
  if (( PLAN )); then
    if command -v runc >/dev/null 2>&1; then printf 'plan\tcached\trunc\n'; else printf 'plan\t%s\trunc (Debian package)\n' "${COLD_S[runc]}"; fi
  elif ! command -v runc >/dev/null 2>&1; then
    log "runc: not found on PATH; installing Debian's runc package"
    if ! { apt-get install -y runc >&2 || { apt-get update >&2 && apt-get install -y runc >&2; }; }; then
      log "runc: installing the package failed: install runc (apt-get install runc) or put it on PATH"; exit 3
    fi
  fi
  (( PLAN )) || echo "runc=$(dirname "$(command -v runc)")"
fi
