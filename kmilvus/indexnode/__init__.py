"""IndexNode: builds segment indexes for DataCoord (docs/architecture/indexes.md)."""
