"""Message queries: QUERY_MESSAGE by key (12) from the index, VIEW_MESSAGE_BY_ID (33) by commit-log offset
(spec 2.1, 3.5, 5.9, 6.4). Both answer with stored records, the same bytes a pull returns.

With automatic failover (the store's ``read_bound``, the confirm offset) both stop where pulls stop: a record that
ends beyond the bound is not found yet (5.x does not index it before the confirm offset passes it), on the master
as on a slave, so no query shows a message a failover could remove.
"""

from __future__ import annotations

from typing import Any

import attrs

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import StateKey
from pyrmq.kernel.settings import at_least, setting
from pyrmq.plugins.broker.core import BROKER, BrokerContext
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import QueryMessageRequestHeader, QueryMessageResponseHeader, ViewMessageRequestHeader
from pyrmq.remoting.message import PREFIX

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


@attrs.frozen
class QuerySettings:
    """The query plugin's broker.conf key (RocketMQ 4.9.8's name and default)."""

    defaultQueryMaxNum: int = setting(32, check=at_least(1), runtime=True, help="records a unique-key query returns")


class QueryProcessor:
    def __init__(self, ctx: BrokerContext, settings: QuerySettings) -> None:
        self.ctx = ctx
        self.settings = settings

    async def query_message(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_ext_fields(request.ext_fields)
        max_num = h.max_num
        if request.ext_fields.get(UNIQUE_KEY_QUERY, "").lower() == "true":
            max_num = self.settings.defaultQueryMaxNum  # a unique-key query overrides maxNum (spec 3.5)
        store = self.ctx.store
        result = store.query_message(h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp)
        bound = store.read_bound
        if bound is not None and result.buffers:
            top = bound()
            # each record's own TOTALSIZE and PHYSICALOFFSET: where it ends in the commit log
            result.buffers = [view for view in result.buffers if _ends(view) <= top]
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
        store = self.ctx.store
        record = store.look_message_bytes_by_offset(offset)
        if record is None:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
        bound = store.read_bound
        if bound is not None and offset + len(record) > bound():
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}: "
                                         "not confirmed by every in-sync replica yet")
        return request.make_response(ResponseCode.SUCCESS, body=record)


def _ends(record: memoryview) -> int:
    size, _, _, _, _, _, phys, _ = PREFIX.unpack_from(record)
    return phys + size


QUERY = StateKey[QueryProcessor]("broker.query")


@hookimpl(trylast=True)
def pyrmq_register_settings() -> dict[str, type]:
    return {"broker": QuerySettings}


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Any) -> None:
    ctx = kernel.state.find(BROKER)
    if ctx is not None:
        kernel.state.put(QUERY, QueryProcessor(ctx, kernel.settings(QuerySettings)))


@hookimpl(trylast=True)
def pyrmq_register_processors(kernel: Any, role: str) -> dict[int, Any] | None:
    p = kernel.state.find(QUERY)
    if role != "broker" or p is None:
        return None
    return {RequestCode.QUERY_MESSAGE: p.query_message, RequestCode.VIEW_MESSAGE_BY_ID: p.view_message_by_id}
