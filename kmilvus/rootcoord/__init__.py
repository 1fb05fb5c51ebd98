"""RootCoord: TSO, global IDs, collection meta and DDL (seed 001), time-tick sync."""

from kmilvus.rootcoord.root_coord import RootCoord

__all__ = ["RootCoord"]
