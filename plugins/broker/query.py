"""Message queries: QUERY_MESSAGE by key (12) from the index, VIEW_MESSAGE_BY_ID (33) by commit-log offset
(spec 2.1, 3.5, 5.9, 6.4). Both answer with stored records, the same bytes a pull returns.
"""

from __future__ import annotations

from typing import Any

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import StateKey
from pyrmq.plugins.broker.core import BROKER, BrokerContext
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import QueryMessageRequestHeader, QueryMessageResponseHeader, ViewMessageRequestHeader

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


class QueryProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    async def query_message(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_ext_fields(request.ext_fields)
        max_num = h.max_num
        if request.ext_fields.get(UNIQUE_KEY_QUERY, "").lower() == "true":
            max_num = self.ctx.settings.defaultQueryMaxNum  # a unique-key query overrides maxNum (spec 3.5)
        result = self.ctx.store.query_message(h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp)
        header = QueryMessageResponseHeader(
            index_last_update_timestamp=result.index_last_update_timestamp,
            index_last_update_phyoffset=result.index_last_update_phyoffset,
        ).to_ext_fields()
        if not result.buffers:
            return request.make_response(
                ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", header
            )
        return request.make_response(ResponseCode.SUCCESS, None, header, list(result.buffers))

    async def view_message_by_id(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        offset = ViewMessageRequestHeader.from_ext_fields(request.ext_fields).offset
        record = self.ctx.store.look_message_bytes_by_offset(offset)
        if record is None:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
        return request.make_response(ResponseCode.SUCCESS, body=record)


QUERY = StateKey[QueryProcessor]("broker.query")


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Any) -> None:
    ctx = kernel.state.find(BROKER)
    if ctx is not None:
        kernel.state.put(QUERY, QueryProcessor(ctx))


@hookimpl(trylast=True)
def pyrmq_register_processors(kernel: Any, role: str) -> dict[int, Any] | None:
    p = kernel.state.find(QUERY)
    if role != "broker" or p is None:
        return None
    return {RequestCode.QUERY_MESSAGE: p.query_message, RequestCode.VIEW_MESSAGE_BY_ID: p.view_message_by_id}
