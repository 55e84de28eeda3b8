"""The request-guard hook: a check chosen once at start that every request of a role passes before its processor."""

from __future__ import annotations

import pytest

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand


class OnlyTicketHolders:
    """Refuses broker requests without a ``ticket`` field; the name server is left alone."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    @hookimpl
    def pyrmq_make_request_guard(self, kernel, role):
        if role != "broker":
            return None

        def guard(connection, request):
            self.seen.append(request.code)
            if request.ext_fields.get("ticket") != "yes":
                return request.make_response(ResponseCode.NO_PERMISSION, f"no ticket for code {request.code}")
            return None

        return guard


@pytest.mark.hook("pyrmq_make_request_guard")
async def test_a_guard_runs_before_every_broker_processor(start_role, remoting_client):
    plugin = OnlyTicketHolders()
    kernel = await start_role("dev", extra_plugins=[plugin])
    broker, namesrv = kernel.listening["broker"], kernel.listening["namesrv"]

    refused = await remoting_client.invoke(broker, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}))
    assert (refused.code, refused.remark) == (ResponseCode.NO_PERMISSION, "no ticket for code 28")
    allowed = await remoting_client.invoke(
        broker, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {"ticket": "yes"}))
    assert allowed.code == ResponseCode.SUCCESS and allowed.body_bytes()
    # an unknown code is answered "not supported" without the guard, as in RocketMQ
    unknown = await remoting_client.invoke(broker, RemotingCommand.request(9999, {}))
    assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    # the name server has no guard: its table is untouched
    route = await remoting_client.invoke(namesrv, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, {}))
    assert route.code == ResponseCode.SUCCESS
    assert plugin.seen == [28, 28]


async def test_without_a_guard_the_processors_are_not_wrapped(start_role):
    kernel = await start_role("broker")
    from pyrmq.plugins.broker.send import SEND

    send = kernel.state.get(SEND)
    assert kernel.processors["broker"][RequestCode.SEND_MESSAGE] == send.send
