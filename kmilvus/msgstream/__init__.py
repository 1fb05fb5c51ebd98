"""kmilvus' message stream: vchannels as subjects of one JetStream stream per cluster."""

from kmilvus.msgstream import channels, jetstream, message
from kmilvus.msgstream.channels import (
    collection_of,
    datanode_tt_subject,
    pchannel_names,
    pchannel_of,
    stream_name,
    stream_subjects,
    subject_of,
    vchannel_name,
)
from kmilvus.msgstream.errors import MsgStreamError, StreamGapError
from kmilvus.msgstream.jetstream import AckTimeoutError, Consumer, MsgStream, Producer
from kmilvus.msgstream.message import Msg, MsgPosition, MsgType

__all__ = [
    "AckTimeoutError",
    "Consumer",
    "Msg",
    "MsgPosition",
    "MsgStream",
    "MsgStreamError",
    "MsgType",
    "Producer",
    "StreamGapError",
    "channels",
    "collection_of",
    "datanode_tt_subject",
    "jetstream",
    "message",
    "pchannel_names",
    "pchannel_of",
    "stream_name",
    "stream_subjects",
    "subject_of",
    "vchannel_name",
]
