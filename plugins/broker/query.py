"""Message queries: QUERY_MESSAGE by key (12) from the index, VIEW_MESSAGE_BY_ID (33) by commit-log offset
(spec 2.1, 3.5, 5.9, 6.4). Both answer with stored records, the same bytes a pull returns.

Both ask the store for what clients may see (``visible_only``): where the store bounds reads, they stop where pulls
stop, so a query never shows a record a pull could not return yet.
"""

from __future__ import annotations

from typing import Any

import attrs

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import Kernel
from pyrmq.kernel.types import Processor
from pyrmq.kernel.settings import at_least, setting
from pyrmq.plugins.broker.core import BrokerContext, register_feature
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import QueryMessageRequestHeader, QueryMessageResponseHeader, ViewMessageRequestHeader
from pyrmq.store.errors import NotVisibleError

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


@attrs.frozen
class QuerySettings:
    """The query plugin's broker.conf key (RocketMQ 4.9.8's name and default)."""

    defaultQueryMaxNum: int = setting(32, check=at_least(1), runtime=True, help="records a unique-key query returns")


class QueryProcessor:
    """QUERY_MESSAGE and VIEW_MESSAGE_BY_ID; registered as a plugin (``broker.query``)."""

    def __init__(self, ctx: BrokerContext, settings: QuerySettings) -> None:
        self.ctx = ctx
        self.settings = settings

    @hookimpl(trylast=True)
    def pyrmq_register_processors(self, role: str) -> dict[int, Processor] | None:
        if role != "broker":
            return None
        return {RequestCode.QUERY_MESSAGE: self.query_message, RequestCode.VIEW_MESSAGE_BY_ID: self.view_message_by_id}

    async def query_message(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_ext_fields(request.ext_fields)
        max_num = h.max_num
        if request.ext_fields.get(UNIQUE_KEY_QUERY, "").lower() == "true":
            max_num = self.settings.defaultQueryMaxNum  # a unique-key query overrides maxNum (spec 3.5)
        store = self.ctx.store
        result = store.query_message(h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp, visible_only=True)
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
        try:
            record = self.ctx.store.look_message_bytes_by_offset(offset, visible_only=True)
        except NotVisibleError as exc:  # stored, but not readable yet
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}: {exc}")
        if record is None:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
        return request.make_response(ResponseCode.SUCCESS, body=record)


@hookimpl(trylast=True)
def pyrmq_register_settings() -> dict[str, type]:
    return {"broker": QuerySettings}


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Kernel) -> None:
    register_feature(kernel, "broker.query", lambda ctx: QueryProcessor(ctx, kernel.settings(QuerySettings)))
