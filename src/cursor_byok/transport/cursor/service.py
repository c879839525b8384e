"""The Cursor agent service as the Connect app sees it (`transport.connect.service.Service`):
its paths, its heartbeat, how to read the request id of a stream and a shim append, and its
unary RPCs (rpc.py)."""

from __future__ import annotations

import binascii

from google.protobuf.message import DecodeError  # type: ignore[import-untyped,unused-ignore]

from ..connect.service import Append, Codec, UnaryHandler
from . import encode
from .link import parse_client_message
from .proto import agent_pb2, aiserver_pb2
from .rpc import UNARY_METHODS, RpcSettings, encode_message, parse_message, unary_handler

__all__ = ["CursorService"]


class CursorService:
    run_path = "/agent.v1.AgentService/Run"
    runsse_path = "/agent.v1.AgentService/RunSSE"
    append_path = "/aiserver.v1.BidiService/BidiAppend"
    heartbeat = encode.HEARTBEAT
    error_details_type = "aiserver.v1.ErrorDetails"

    def __init__(self, rpc: RpcSettings | None = None) -> None:
        self.rpc = rpc or RpcSettings()
        self._unary = {path: unary_handler(m, self.rpc) for path, m in UNARY_METHODS.items()}

    def parse_client(self, payload: bytes) -> object:
        return parse_client_message(payload)

    def stream_request_id(self, first: object) -> str:
        if isinstance(first, agent_pb2.AgentClientMessage) and first.HasField("run_request"):
            return str(first.run_request.run_id)
        return ""

    def parse_stream_open(self, raw: bytes) -> str:
        try:
            return str(agent_pb2.BidiRequestId.FromString(raw).request_id)
        except DecodeError:
            raise ValueError("body is not a BidiRequestId") from None

    def parse_append(self, raw: bytes, codec: Codec) -> Append:
        request = parse_message(aiserver_pb2.BidiAppendRequest(), raw, codec)
        if request.data_binary:
            payload = bytes(request.data_binary)
        else:
            try:
                payload = binascii.unhexlify(request.data)
            except (binascii.Error, ValueError):
                raise ValueError("data is not valid hex") from None
        try:
            message = parse_client_message(payload)
        except ValueError:
            raise ValueError("data is not an AgentClientMessage") from None
        return Append(
            request_id=str(request.request_id.request_id),
            seqno=int(request.append_seqno),
            payload=payload,
            message=message,
        )

    def append_response(self, codec: Codec) -> bytes:
        return encode_message(aiserver_pb2.BidiAppendResponse(), codec)

    def unary(self, path: str) -> UnaryHandler | None:
        return self._unary.get(path)
