{{/* The operator's application rules, shared by the namespaced Role and the cluster-wide ClusterRole. */}}
{{- define "kmilvus.operatorRules" }}
  # kopf: events about handler progress and errors (core/v1 events, posted only).
  - apiGroups: [""]
    resources: ["events"]
    verbs: ["create"]
  # Collections: reconciled (finalizers and kopf's annotations live in metadata, hence
  # patch/update); created / deleted when a collection is created / dropped through pymilvus.
  - apiGroups: ["kmilvus.io"]
    resources: ["collections"]
    verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
  # FlushRequests: reconciled; deleted spec.ttlSecondsAfterFinished after they finish.
  - apiGroups: ["kmilvus.io"]
    resources: ["flushrequests"]
    verbs: ["get", "list", "watch", "patch", "update", "delete"]
  # Segments are mirrored from DataCoord by the operator.
  - apiGroups: ["kmilvus.io"]
    resources: ["segments"]
    verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
  - apiGroups: ["kmilvus.io"]
    resources: ["collections/status", "flushrequests/status", "segments/status"]
    verbs: ["get", "patch", "update"]
  # ownerReferences with blockOwnerDeletion on Segments / SparkApplications owned by a Collection.
  - apiGroups: ["kmilvus.io"]
    resources: ["collections/finalizers"]
    verbs: ["update"]
  # Spark jobs (bulk import, compaction) through the Kubeflow spark-operator.
  - apiGroups: ["sparkoperator.k8s.io"]
    resources: ["sparkapplications"]
    verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
  - apiGroups: ["sparkoperator.k8s.io"]
    resources: ["sparkapplications/status"]
    verbs: ["get"]
  # Read-only: where proxies, datanodes and Spark drivers run.
  - apiGroups: [""]
    resources: ["pods", "services"]
    verbs: ["get", "list", "watch"]
{{- end }}
