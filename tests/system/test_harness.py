"""The test harness itself: an in-process node must not depend on a port chosen in advance.

`free_port()` releases the port before the node binds it; under a loaded CI machine another
process (a client's ephemeral source port, a child server) can take it in between, and the
test then errors in set-up with `Address already in use`. The in-process proxy binds port 0.
"""

from __future__ import annotations

import socket

from pymilvus import MilvusClient


def test_in_process_proxy_starts_when_its_configured_port_is_taken(node_factory):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen(1)
        taken = squatter.getsockname()[1]
        node = node_factory(proxy_port=taken)
        assert node.node.api_port != taken
        client = MilvusClient(uri=node.uri)
        try:
            assert client.list_collections() == []
        finally:
            client.close()
