"""The custom resources (crds/) and the labels, annotations and properties that tie them to Milvus."""

from __future__ import annotations

from controllers.kube import Resource

GROUP = "kmilvus.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

COLLECTION = Resource(GROUP, VERSION, "collections", "Collection")
FLUSHREQUEST = Resource(GROUP, VERSION, "flushrequests", "FlushRequest")
SEGMENT = Resource(GROUP, VERSION, "segments", "Segment")
EVENT = Resource("", "v1", "events", "Event")
CLUSTER_PEERING = Resource("kopf.dev", "v1", "clusterkopfpeerings", "ClusterKopfPeering", namespaced=False)
PEERING = Resource("kopf.dev", "v1", "kopfpeerings", "KopfPeering")

# kopf resource selectors (group, version, plural).
COLLECTIONS = (GROUP, VERSION, "collections")
FLUSHREQUESTS = (GROUP, VERSION, "flushrequests")
SEGMENTS = (GROUP, VERSION, "segments")

# On Collection resources.
ANN_CREATED_BY = "kmilvus.io/created-by"  # "sdk" on resources mirrored from pymilvus
# On Segment resources.
LABEL_COLLECTION = "kmilvus.io/collection"  # the Collection resource's name
LABEL_COLLECTION_ID = "kmilvus.io/collection-id"  # Milvus' collection ID
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "kmilvus-operator"
# Collection properties (stored with the collection in etcd) written by the operator.
PROP_MANAGED_BY = "kmilvus.io/managed-by"  # "operator": created for a Collection resource
PROP_OWNER = "kmilvus.io/owner"  # "namespace/name/uid" of that resource
