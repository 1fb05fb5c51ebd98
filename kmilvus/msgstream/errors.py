"""The stream's errors (a module of their own: the dispatcher and the JetStream client both
raise and catch them)."""

from __future__ import annotations


class MsgStreamError(RuntimeError):
    """A publish was rejected by JetStream (or, as AckTimeoutError, never acknowledged)."""


class StreamGapError(MsgStreamError):
    """Messages after `after_seq` and before `next_seq` were purged before this consumer read
    them. Reading on continues with the message at `next_seq`."""

    def __init__(self, channel: str, after_seq: int, next_seq: int) -> None:
        super().__init__(f"{channel}: messages after seq {after_seq} and before {next_seq} were purged before read")
        self.channel = channel
        self.after_seq = after_seq
        self.next_seq = next_seq
