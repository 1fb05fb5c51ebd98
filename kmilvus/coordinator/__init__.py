"""What other processes (the Kubernetes operator) may ask of the coordinators: `client`."""

from kmilvus.coordinator.client import CoordinatorClient, DropState

__all__ = ["CoordinatorClient", "DropState"]
