"""The custom resources (crds/) and the labels, annotations and properties that tie them to Milvus."""

from __future__ import annotations

from controllers import v1alpha1
from controllers.crd import GROUP, VERSION
from controllers.kube import Resource

API_VERSION = f"{GROUP}/{VERSION}"

# The kinds' names come from their definitions (controllers/v1alpha1.py), as the CRDs' do.
COLLECTION = Resource(GROUP, VERSION, v1alpha1.COLLECTION.plural, v1alpha1.COLLECTION.kind)
FLUSHREQUEST = Resource(GROUP, VERSION, v1alpha1.FLUSHREQUEST.plural, v1alpha1.FLUSHREQUEST.kind)
SEGMENT = Resource(GROUP, VERSION, v1alpha1.SEGMENT.plural, v1alpha1.SEGMENT.kind)
EVENT = Resource("", "v1", "events", "Event")
CLUSTER_PEERING = Resource("kopf.dev", "v1", "clusterkopfpeerings", "ClusterKopfPeering", namespaced=False)
PEERING = Resource("kopf.dev", "v1", "kopfpeerings", "KopfPeering")

# kopf resource selectors (group, version, plural).
COLLECTIONS = (GROUP, VERSION, COLLECTION.plural)
FLUSHREQUESTS = (GROUP, VERSION, FLUSHREQUEST.plural)
SEGMENTS = (GROUP, VERSION, SEGMENT.plural)

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
