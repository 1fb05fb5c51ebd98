"""DataNode decisions that need no servers."""

from __future__ import annotations

import types

from kmilvus.datanode.data_node import DataNode


class _Flowgraph:
    def __init__(self, owner: types.SimpleNamespace, other: str | None):
        self.owner, self.other, self.stopped = owner, other, False

    async def stop(self, drop: bool = False) -> None:
        # While this one stops, another task (a write told "channel watched elsewhere") drops
        # the other channel from the node.
        if self.other is not None:
            self.owner.flowgraphs.pop(self.other, None)
        self.stopped = drop


async def test_drop_all_survives_a_channel_dropped_meanwhile():
    """Found by bench/chaos.py: drop_all raised KeyError when a channel went away while it ran,
    the session-lost handler died, and the DataNode never came back under a new ID."""
    node = types.SimpleNamespace(flowgraphs={}, server_id=7)
    a = _Flowgraph(node, other="b")
    b = _Flowgraph(node, other=None)
    node.flowgraphs.update(a=a, b=b)
    await DataNode.drop_all(node)
    assert node.flowgraphs == {} and a.stopped
