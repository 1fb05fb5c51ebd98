# A tiny pymilvus program in the style of pymilvus' examples (address localhost:19530), for
# tests/system/test_compat.py: it creates a collection, inserts, flushes, searches, then calls
# get_replicate_configuration, which kmilvus answers UNIMPLEMENTED (cross-cluster replication is
# not built).
from pymilvus import DataType, MilvusClient

client = MilvusClient("http://localhost:19530")
schema = MilvusClient.create_schema()
schema.add_field("id", DataType.INT64, is_primary=True)
schema.add_field("vec", DataType.FLOAT_VECTOR, dim=4)
client.create_collection("tiny", schema=schema)
client.insert("tiny", [{"id": 1, "vec": [0.1, 0.2, 0.3, 0.4]}])
client.flush("tiny")
print(client.get_replicate_configuration())
print("analyzed")
