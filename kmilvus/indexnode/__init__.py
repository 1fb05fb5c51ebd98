"""The IndexNode role: builds segment indexes (kmilvus.indexnode.builder)."""
