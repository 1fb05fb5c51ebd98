"""RootCoord: TSO, global IDs, collection meta and DDL, time-tick sync (docs/architecture/index.md)."""

from kmilvus.rootcoord.root_coord import RootCoord

__all__ = ["RootCoord"]
