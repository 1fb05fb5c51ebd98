#!/usr/bin/env bash
# Build the pinned servers and tools (tools/versions.env) from their Go modules, once per version.
#
#   tools/build.sh [NAME...]   build what is missing (etcd nats-server helm k8s; default: all) and
#                              link each binary into .venv/bin, where kmilvus looks first
#   tools/build.sh regen       rewrite the wrapper modules (go.mod, go.sum) after a pin changed
#
# Binaries live outside git, in $KMILVUS_CACHE/bin/<name>-<version>/ (default
# ~/.cache/kmilvus): a new pin builds into a new directory, an unchanged pin costs nothing.
# A directory appears only when its build finished (built aside, then renamed), and a lock keeps
# two checkouts that share the cache from building the same thing at once.
set -euo pipefail
TOOLS="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$TOOLS")"
# shellcheck source=versions.env
. "$TOOLS/versions.env"
CACHE="${KMILVUS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kmilvus}"
BIN="$CACHE/bin"
LINKS="${KMILVUS_BIN_LINKS:-$ROOT/.venv/bin}"
export CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"

log() { printf '[tools] %s\n' "$*" >&2; }

# A Go that builds the pins. Go >= 1.21 fetches the toolchain a go.mod names by itself
# (GOTOOLCHAIN=auto); Debian 12's golang-go is 1.19, which cannot, so from it (or from nothing)
# the pinned toolchain is fetched as the Go module it is published as, golang.org/toolchain.
need_go() {
  local go_bin minor
  if go_bin=$(command -v go); then
    minor=$("$go_bin" env GOVERSION 2>/dev/null | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
    [ "${minor:-0}" -ge 21 ] && return 0
  fi
  local dir="$CACHE/go-$GO_VERSION"
  if [ ! -x "$dir/bin/go" ]; then
    if [ -z "${go_bin:-}" ]; then
      log "installing Debian's golang-go to fetch Go $GO_VERSION"
      local SUDO=""
      [ "$(id -u)" -eq 0 ] || SUDO="sudo"
      $SUDO apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends golang-go >/dev/null
      go_bin=$(command -v go)
    fi
    log "fetching Go $GO_VERSION (the golang.org/toolchain module)"
    local arch tmp src
    arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
    tmp=$(mktemp -d)
    src=$(cd "$tmp" && GOMODCACHE="$tmp/mod" GOFLAGS=-mod=mod GO111MODULE=on \
      "$go_bin" mod download -json "golang.org/toolchain@v0.0.1-go$GO_VERSION.linux-$arch" \
      | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    mkdir -p "$CACHE"
    rm -rf "$dir.tmp"
    cp -r "$src" "$dir.tmp"
    chmod -R u+w "$dir.tmp" "$tmp"
    chmod +x "$dir.tmp"/bin/* "$dir.tmp"/pkg/tool/*/*
    rm -rf "$tmp"
    mv "$dir.tmp" "$dir"
  fi
  export PATH="$dir/bin:$PATH" GOTOOLCHAIN=local
}

k8s_minor() { local v=${1#v}; v=${v#*.}; echo "${v%%.*}"; }

# build NAME VERSION MODULE_DIR LDFLAGS PACKAGE... : go build every PACKAGE into bin/NAME-VERSION/.
build() {
  local name=$1 version=$2 dir=$3 ldflags=$4
  shift 4
  local dest="$BIN/$name-$version"
  [ -f "$dest/.complete" ] && return 0
  mkdir -p "$BIN"
  exec 9>"$BIN/.$name.lock"
  flock 9
  if [ ! -f "$dest/.complete" ]; then
    local start=$SECONDS tmp
    need_go
    tmp=$(mktemp -d "$BIN/.$name-$version.XXXXXX")
    chmod 755 "$tmp"
    log "building $name $version from its Go module (first time only; a cold Kubernetes build takes a while)..."
    # One `go build` for all the packages: the packages they share compile once, and the linker
    # of one binary runs while the compiler works for another. One package: name the binary (go
    # would name etcd's "server"); several: into the directory, after their own directories.
    local out="$tmp/$name"
    [ $# -eq 1 ] || out="$tmp/"
    # go build prints nothing while it compiles: say every minute that it is still at it.
    (while sleep 60; do log "  ... still compiling $name ($((SECONDS - start)) s)"; done) &
    local ticker=$!
    (cd "$TOOLS/$dir" && go build -trimpath -ldflags "-s -w $ldflags" -o "$out" "$@") >&2 \
      || { kill "$ticker"; return 1; }
    kill "$ticker"
    touch "$tmp/.complete"
    rm -rf "$dest"
    mv "$tmp" "$dest"
    log "built $name $version in $((SECONDS - start)) s"
  fi
  exec 9>&-
}

link() {  # link NAME-VERSION BINARY...
  mkdir -p "$LINKS"
  local d=$1
  shift
  for b in "$@"; do ln -sfn "$BIN/$d/$b" "$LINKS/$b"; done
}

ensure() {
  case "$1" in
    etcd)
      build etcd "$ETCD_VERSION" etcd "" go.etcd.io/etcd/server/v3
      link "etcd-$ETCD_VERSION" etcd
      ;;
    nats-server)
      build nats-server "$NATS_SERVER_VERSION" nats "" github.com/nats-io/nats-server/v2
      link "nats-server-$NATS_SERVER_VERSION" nats-server
      ;;
    helm)
      local client_minor=""
      # Helm's default Kubernetes version (template, lint) is that of the client-go it links.
      [ -f "$BIN/helm-$HELM_VERSION/.complete" ] \
        || { need_go && client_minor=$(k8s_minor "$(cd "$TOOLS/helm" && go list -m -f '{{.Version}}' k8s.io/client-go)"); }
      build helm "$HELM_VERSION" helm \
        "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
         -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$client_minor \
         -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$client_minor" \
        helm.sh/helm/v3/cmd/helm
      link "helm-$HELM_VERSION" helm
      ;;
    k8s)
      local v=$KUBERNETES_VERSION flags="" p
      for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        flags+=" -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$(k8s_minor "$v") -X $p.gitTreeState=clean"
      done
      build kubernetes "$v" k8s "$flags" k8s.io/kubernetes/cmd/kube-apiserver \
        k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
      link "kubernetes-$v" kube-apiserver kube-controller-manager kube-scheduler kubectl
      ;;
    *)
      log "unknown tool: $1 (etcd, nats-server, helm, k8s)"
      return 2
      ;;
  esac
}

regen() {
  (cd "$TOOLS/etcd" && rm -f go.sum && go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION")
  (cd "$TOOLS/nats" && rm -f go.sum && go get -tool "github.com/nats-io/nats-server/v2@$NATS_SERVER_VERSION")
  (cd "$TOOLS/helm" && rm -f go.sum && go get -tool "helm.sh/helm/v3/cmd/helm@$HELM_VERSION")
  # k8s.io/kubernetes replaces every staging module with ./staging/src/k8s.io/<name>; replace each
  # with its tagged release (v1.X.Y ↔ v0.X.Y) instead, read from the real go.mod.
  local v=$KUBERNETES_VERSION gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@$v" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  {
    echo "// Wrapper module for the Kubernetes control plane, generated by \`tools/build.sh regen\` from"
    echo "// k8s.io/kubernetes' own go.mod: its replaces point at ./staging, so each staging module is"
    echo "// replaced by its tagged release instead."
    echo "module kmilvus.tools/k8s"
    echo
    echo "go 1.26.0"
    echo
    echo "require k8s.io/kubernetes $v"
    echo
    echo "replace ("
    awk -v sv="v0.${v#v1.}" '/=> \.\/staging\/src\// {print "\t" $1 " => " $1 " " sv}' "$gomod"
    echo ")"
  } > "$TOOLS/k8s/go.mod"
  local p pkgs=()
  for p in kube-apiserver kube-controller-manager kube-scheduler kubectl; do pkgs+=("k8s.io/kubernetes/cmd/$p@$v"); done
  (cd "$TOOLS/k8s" && rm -f go.sum && go get -tool "${pkgs[@]}")
}

if [ "${1:-}" = regen ]; then
  need_go
  regen
  exit 0
fi
[ $# -gt 0 ] || set -- etcd nats-server helm k8s
for t in "$@"; do ensure "$t"; done
