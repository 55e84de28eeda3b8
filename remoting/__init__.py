"""pyrmq.remoting: the RocketMQ 4.x wire protocol on trio (spec sections 1-4 and 8).

Sans-IO parts: ``codes`` (request/response codes), ``command`` (``RemotingCommand`` and its header codecs),
``framing`` (``FrameDecoder``), ``headers`` (custom headers), ``fastjson`` (tolerant JSON bodies), ``vocabulary``
(flag and permission bits, property and topic names), ``route`` (topic route records), ``message`` (the message
record codec: pull bodies, batch bodies, properties, message ids; the store re-exports it).
trio parts: ``connection`` (one socket, both directions), ``server`` (``RemotingServer``), ``client``
(``RemotingClient``), ``blocking`` (``BlockingRemotingClient`` for plain threads).
This package imports nothing from pyrmq.kernel, pyrmq.store or pyrmq.plugins.
"""

from .blocking import BlockingRemotingClient
from .client import RemotingClient, parse_address
from .codes import (
    CURRENT_VERSION,
    RPC_ONEWAY,
    RPC_RESPONSE,
    LanguageCode,
    MQVersion,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from .command import MAX_FRAME_SIZE, RemotingCommand
from .connection import Connection, Processor
from .errors import (
    HeaderError,
    ProtocolError,
    RemotingClosed,
    RemotingCommandError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeout,
)
from .framing import FrameDecoder
from .server import RemotingServer

__all__ = [
    "BlockingRemotingClient",
    "Connection",
    "CURRENT_VERSION",
    "FrameDecoder",
    "HeaderError",
    "LanguageCode",
    "MAX_FRAME_SIZE",
    "MQVersion",
    "Processor",
    "ProtocolError",
    "RPC_ONEWAY",
    "RPC_RESPONSE",
    "RemotingClient",
    "RemotingClosed",
    "RemotingCommand",
    "RemotingCommandError",
    "RemotingConnectError",
    "RemotingError",
    "RemotingServer",
    "RemotingTimeout",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "parse_address",
]
