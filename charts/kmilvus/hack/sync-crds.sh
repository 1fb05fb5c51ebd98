#!/usr/bin/env bash
# Copy the CustomResourceDefinitions in crds/*.yaml (the source of truth) into
#   charts/kmilvus/crds/<same name>   (Helm installs them from the chart's crds/ folder)
#   operator/crds.yaml                (kustomize cannot load files outside operator/)
# tests/test_chart.py and tests/test_manifests.py fail when the copies drift.
set -euo pipefail
cd "$(dirname "$0")/../../.."
shopt -s nullglob

crd_files=()
for f in crds/*.yaml; do
  grep -q '^kind: CustomResourceDefinition' "$f" && crd_files+=("$f")
done
if [ ${#crd_files[@]} -eq 0 ]; then
  echo "crds/ holds no CustomResourceDefinition yet; nothing to sync" >&2
  exit 1
fi

# Drop chart copies whose source is gone (kopf's peering CRDs are the chart's own).
for f in charts/kmilvus/crds/*.yaml; do
  name=$(basename "$f")
  [ "$name" = kopf-peerings.yaml ] && continue
  [ -e "crds/$name" ] || rm -v "$f"
done
for f in "${crd_files[@]}"; do
  cp -v "$f" charts/kmilvus/crds/
done

{
  echo "# GENERATED from crds/*.yaml by charts/kmilvus/hack/sync-crds.sh: do not edit by hand."
  for f in "${crd_files[@]}"; do
    echo "---"
    cat "$f"
  done
} > operator/crds.yaml
echo "wrote operator/crds.yaml" >&2
