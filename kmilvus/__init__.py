"""kmilvus: Milvus' data path (Proxy, RootCoord, DataCoord, DataNode, QueryCoord) in Python."""

# The one place the version is written: pyproject.toml reads it, the chart and the manifests
# repeat it (tests/unit/test_settings.py keeps them in step).
__version__ = "0.1.0"
