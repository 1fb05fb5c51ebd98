"""Milvus' fixed names, limits and rules that several components (and the operator) must agree
on: written here once, imported everywhere else."""

from __future__ import annotations

from pymilvus.grpc_gen import common_pb2

DEFAULT_DB = "default"
DEFAULT_PARTITION = "_default"
ALL_PARTITIONS = -1  # Milvus' common.AllPartitionsID: a Delete that names no partition
MAX_DIM = 32768  # Milvus' proxy.maxDimension
MAX_VARCHAR_LENGTH = 65535  # Milvus' max VarChar max_length

SegmentState = common_pb2.SegmentState
# Segments that still take (Growing) or hold unflushed rows (Sealed, Flushing).
LIVE_SEGMENT_STATES = (SegmentState.Growing, SegmentState.Sealed, SegmentState.Flushing)
