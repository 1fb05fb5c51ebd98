"""kmilvus: Milvus' data path (Proxy, RootCoord, DataCoord, DataNode, QueryCoord) in Python."""

__version__ = "0.1.0"
