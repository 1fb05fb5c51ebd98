#!/usr/bin/env bash
# End-to-end test of kmilvus on a throw-away kind cluster:
#   1. create the kind cluster (its own kubeconfig: yours is not touched)
#   2. build the kmilvus and Spark images (docker build) and `kind load` them
#   3. install the Kubeflow spark-operator with Helm, watching the kmilvus namespace
#   4. install charts/kmilvus with in-chart etcd, NATS JetStream and MinIO (e2e/values.yaml)
#   5. wait until everything is ready, then run `pytest e2e/` against the cluster
#   6. delete the cluster (unless --keep)
#
# Usage: e2e/run.sh [--keep] [--reuse] [--skip-build] [-- PYTEST_ARGS...]
#   --keep        leave the cluster running afterwards (prints how to use it)
#   --reuse       use the existing cluster of that name instead of creating one
#   --skip-build  do not rebuild the images (they must exist locally)
# Environment: KIND_CLUSTER_NAME (kmilvus-e2e), E2E_NAMESPACE (kmilvus), E2E_RELEASE (kmilvus),
#   E2E_IMAGE_TAG (e2e), SPARK_OPERATOR_VERSION (2.4.0), KIND_NODE_IMAGE (kind's default),
#   PYTHON (.venv/bin/python: needs pytest, kubernetes, pymilvus, pyyaml).
# Needs: docker, kind, kubectl, helm (v3 or v4).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

KEEP=0; REUSE=0; BUILD=1; PYTEST_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) KEEP=1 ;;
    --reuse) REUSE=1 ;;
    --skip-build) BUILD=0 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    --) shift; PYTEST_ARGS+=("$@"); break ;;
    *) PYTEST_ARGS+=("$1") ;;
  esac
  shift
done

CLUSTER=${KIND_CLUSTER_NAME:-kmilvus-e2e}
NS=${E2E_NAMESPACE:-kmilvus}
RELEASE=${E2E_RELEASE:-kmilvus}
TAG=${E2E_IMAGE_TAG:-e2e}
SPARK_OPERATOR_VERSION=${SPARK_OPERATOR_VERSION:-2.4.0}
PY=${PYTHON:-$ROOT/.venv/bin/python}
ARTIFACTS="$ROOT/e2e/.artifacts"
export KUBECONFIG="$ROOT/e2e/.kubeconfig-$CLUSTER"
IMAGE="kmilvus/kmilvus:$TAG"
SPARK_IMAGE="kmilvus/kmilvus-spark:$TAG"

log() { printf '\n[e2e] %s\n' "$*" >&2; }
die() { printf '[e2e] ERROR: %s\n' "$*" >&2; exit 1; }

for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is required (see e2e/README.md)"
done
[ -x "$PY" ] || die "no Python at $PY (set PYTHON=...; it needs pytest, kubernetes, pymilvus)"
docker info >/dev/null 2>&1 || die "the Docker engine is not reachable"

diagnostics() {
  mkdir -p "$ARTIFACTS"
  log "collecting diagnostics into $ARTIFACTS"
  {
    kubectl get nodes -o wide
    kubectl get all,collections,flushrequests,segments,sparkapplications,kopfpeerings -A -o wide
    kubectl -n "$NS" get events --sort-by=.lastTimestamp
    kubectl -n "$NS" describe pods
  } >"$ARTIFACTS/cluster.txt" 2>&1 || true
  for c in operator proxy datanode querynode indexnode etcd nats minio; do
    kubectl -n "$NS" logs -l "app.kubernetes.io/instance=$RELEASE,app.kubernetes.io/component=$c" \
      --all-containers --prefix --tail=-1 >"$ARTIFACTS/$c.log" 2>&1 || true
  done
  kubectl -n spark-operator logs -l app.kubernetes.io/name=spark-operator --all-containers --prefix \
    --tail=2000 >"$ARTIFACTS/spark-operator.log" 2>&1 || true
}

cleanup() {
  local rc=$?
  if [ $rc -ne 0 ]; then diagnostics; fi
  if [ $KEEP -eq 1 ]; then
    log "keeping cluster $CLUSTER:  export KUBECONFIG=$KUBECONFIG"
    log "  kubectl -n $NS port-forward svc/$RELEASE-milvus 19530:19530"
    log "  delete it with: kind delete cluster --name $CLUSTER"
  else
    log "deleting cluster $CLUSTER"
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
    rm -f "$KUBECONFIG"
  fi
  exit $rc
}
trap cleanup EXIT

# 1. cluster -------------------------------------------------------------------------------
if [ $REUSE -eq 1 ] && kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  log "reusing kind cluster $CLUSTER"
  kind export kubeconfig --name "$CLUSTER" --kubeconfig "$KUBECONFIG"
else
  log "creating kind cluster $CLUSTER"
  kind create cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG" --wait 180s \
    ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"}
fi
kubectl cluster-info

# 2. images --------------------------------------------------------------------------------
if [ $BUILD -eq 1 ]; then
  log "building $IMAGE and $SPARK_IMAGE"
  DOCKER_BUILDKIT=1 docker build -f images/kmilvus/Dockerfile -t "$IMAGE" .
  DOCKER_BUILDKIT=1 docker build -f images/spark/Dockerfile -t "$SPARK_IMAGE" .
fi
log "loading images into the cluster"
kind load docker-image --name "$CLUSTER" "$IMAGE" "$SPARK_IMAGE"

# 3. spark-operator ------------------------------------------------------------------------
kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f -
log "installing the Kubeflow spark-operator $SPARK_OPERATOR_VERSION (watching namespace $NS)"
helm repo add spark-operator https://kubeflow.github.io/spark-operator --force-update >/dev/null
helm repo update spark-operator >/dev/null
# The driver's service account and RBAC (kmilvus-spark) come with charts/kmilvus.
helm upgrade --install spark-operator spark-operator/spark-operator \
  --namespace spark-operator --create-namespace \
  --version "$SPARK_OPERATOR_VERSION" \
  --set "spark.jobNamespaces={$NS}" \
  --set spark.serviceAccount.create=false \
  --set spark.rbac.create=false \
  --wait --timeout 5m

# 4. kmilvus -------------------------------------------------------------------------------
log "installing charts/kmilvus as release $RELEASE in namespace $NS"
helm upgrade --install "$RELEASE" charts/kmilvus \
  --namespace "$NS" \
  --values e2e/values.yaml \
  --set image.tag="$TAG" --set spark.image.tag="$TAG" \
  --wait --timeout 10m

# 5. ready? then test ----------------------------------------------------------------------
log "waiting for kmilvus"
for sts in etcd nats minio; do
  kubectl -n "$NS" rollout status "statefulset/$RELEASE-$sts" --timeout 5m
done
kubectl -n "$NS" rollout status "deployment/$RELEASE-operator" --timeout 5m
kubectl -n "$NS" rollout status "deployment/$RELEASE-proxy" --timeout 5m
kubectl -n "$NS" rollout status "statefulset/$RELEASE-datanode" --timeout 5m
kubectl -n "$NS" rollout status "statefulset/$RELEASE-querynode" --timeout 5m
kubectl -n "$NS" rollout status "deployment/$RELEASE-indexnode" --timeout 5m
kubectl wait --for condition=established --timeout 60s \
  crd/collections.kmilvus.io crd/flushrequests.kmilvus.io crd/segments.kmilvus.io
kubectl -n "$NS" get pods -o wide

log "running pytest e2e/"
E2E_NAMESPACE="$NS" E2E_RELEASE="$RELEASE" \
  "$PY" -m pytest e2e/ -v -p no:cacheprovider -o timeout=1800 ${PYTEST_ARGS[@]+"${PYTEST_ARGS[@]}"}
log "end-to-end tests passed"
