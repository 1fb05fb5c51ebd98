"""`Registry.late`: a coordinator client kept from a constructor reaches the coordinator in the
same process once it registers, not a loopback gRPC stub for good (kmilvus/components.py)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from kmilvus import components as roles
from kmilvus.components import RemoteClient


class FakeRootCoord:
    """Stands in for the in-process RootCoord object (only identity is checked)."""

    async def DescribeCollection(self, req: Any, context: Any = None) -> Any:
        return req


def test_a_client_taken_before_registration_reaches_the_local_coordinator() -> None:
    reg = roles.Registry(cast(Any, None))
    early = reg.late(roles.ROOTCOORD)
    resolved_early = reg.client(roles.ROOTCOORD)  # what a constructor used to keep
    assert isinstance(resolved_early, RemoteClient)  # nothing local yet (no network until a call)
    local = FakeRootCoord()
    reg.add_local(roles.ROOTCOORD, 7, local)
    assert cast(Any, early.DescribeCollection).__self__ is local
    assert isinstance(resolved_early, RemoteClient)  # stays a loopback gRPC stub for good
    reg.remove_local(roles.ROOTCOORD, 7)
    assert isinstance(reg.client(roles.ROOTCOORD), RemoteClient)


def test_private_names_are_not_forwarded() -> None:
    reg = roles.Registry(cast(Any, None))
    with pytest.raises(AttributeError):
        _ = cast(Any, reg.late(roles.DATACOORD))._stub
