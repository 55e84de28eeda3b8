"""The async-aware relay: order, first-result, merging, and the checks at load time."""

from __future__ import annotations

import pluggy
import pytest
import trio

from pyrmq.kernel.bundles import Bundle
from pyrmq.kernel.errors import PluginError
from pyrmq.kernel.hooks import HookRelay
from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.manager import load_plugins


def bundle(**kw) -> Bundle:
    return Bundle(name="t", file="t.toml", roles=(), plugins=(), entry_points=False, **kw)


def relay_with(*plugins) -> HookRelay:
    return HookRelay(load_plugins(bundle(), extra=plugins))


async def test_async_hooks_are_awaited_one_by_one_in_pluggy_order():
    events: list[str] = []

    class Early:
        @hookimpl(tryfirst=True)
        async def pyrmq_serve(self, kernel, nursery):
            events.append("early-start")
            await trio.sleep(0.01)
            events.append("early-end")

    class Late:
        @hookimpl(trylast=True)
        async def pyrmq_serve(self, kernel, nursery):
            events.append("late")

    class Middle:
        @hookimpl
        async def pyrmq_serve(self, kernel, nursery):
            events.append("middle")

    relay = relay_with(Late(), Middle(), Early())
    async with trio.open_nursery() as nursery:
        await relay.serve(kernel=None, nursery=nursery)
    assert events == ["early-start", "early-end", "middle", "late"]


def test_processor_tables_merge_and_the_user_plugin_wins_a_code():
    async def builtin_send(conn, request): ...
    async def builtin_pull(conn, request): ...
    async def user_send(conn, request): ...

    class Builtin:
        @hookimpl(trylast=True)
        def pyrmq_register_processors(self, kernel, role):
            return {10: builtin_send, 11: builtin_pull} if role == "broker" else {105: builtin_pull}

    class User:
        @hookimpl
        def pyrmq_register_processors(self, kernel):  # a plugin may leave out parameters it does not need
            return {10: user_send}

    builtin, user = Builtin(), User()
    relay = relay_with(builtin, user)
    table, owners = relay.register_processors(kernel=None, role="broker")
    assert table == {10: user_send, 11: builtin_pull}
    # who serves each code, as `pyrmq plugins --codes` prints it
    assert owners == {10: relay.pm.get_name(user), 11: relay.pm.get_name(builtin)}
    assert relay.register_processors(kernel=None, role="namesrv")[0] == {10: user_send, 105: builtin_pull}


def test_store_dispatchers_are_ordered_by_order_then_name():
    class D:
        def __init__(self, name, order):
            self.name, self.order = name, order

        def dispatch(self, request):
            pass

    class A:
        @hookimpl
        def pyrmq_register_store_dispatchers(self, kernel):
            return [D("notify", 20), D("cq", 0)]

    class B:
        @hookimpl
        def pyrmq_register_store_dispatchers(self, kernel):
            return [D("index", 10), D("bitmap", 10)]

    found = relay_with(A(), B()).register_store_dispatchers(kernel=None)
    assert [d.name for d in found] == ["cq", "bitmap", "index", "notify"]


def test_first_result_sync_hooks_let_the_user_answer_first():
    class BuiltinFilter:
        @hookimpl(trylast=True)
        def pyrmq_make_message_filter(self, kernel, expression_type, expression):
            return ("builtin", expression) if expression_type == "TAG" else None

    class UserFilter:
        @hookimpl
        def pyrmq_make_message_filter(self, kernel, expression_type, expression):
            return ("user", expression) if expression.startswith("user:") else None

    relay = relay_with(BuiltinFilter(), UserFilter())
    assert relay.make_message_filter(None, "TAG", "user:x") == ("user", "user:x")
    assert relay.make_message_filter(None, "TAG", "TagA") == ("builtin", "TagA")
    assert relay.make_message_filter(None, "SQL92", "a > 1") is None


def test_allocate_strategies_and_put_interceptors_are_collected():
    def avg(group, cid, mqs, cids):
        return list(mqs)

    class Strategies:
        @hookimpl
        def pyrmq_register_allocate_strategies(self):
            return {"AVG": avg}

        @hookimpl
        def pyrmq_register_put_interceptors(self, kernel):
            return [Interceptor("timer", 310), Interceptor("levels", 300), Interceptor("acl", 100)]

    class Interceptor:
        def __init__(self, name, order):
            self.name, self.order = name, order

        def intercept(self, record, context):
            return record

    relay = relay_with(Strategies())
    assert relay.register_allocate_strategies() == {"AVG": avg}
    # ordered by their own order, never by the plugins' registration order
    assert [i.name for i in relay.register_put_interceptors(None)] == ["acl", "levels", "timer"]


def test_connection_events_reach_plugins():
    events = []

    class Watch:
        @hookimpl
        def pyrmq_connection_opened(self, kernel, role, connection):
            events.append(("open", role, connection))

        @hookimpl
        def pyrmq_connection_closed(self, kernel, role, connection):
            events.append(("close", role, connection))

    relay = relay_with(Watch())
    relay.connection_opened(None, "namesrv", "c1")
    relay.connection_closed(None, "namesrv", "c1")
    assert events == [("open", "namesrv", "c1"), ("close", "namesrv", "c1")]


def test_misspelled_hook_fails_at_load_with_the_hook_name():
    class Typo:
        @hookimpl
        def pyrmq_configur(self, kernel):
            pass

    with pytest.raises(PluginError, match="pyrmq_configur"):
        relay_with(Typo())


def test_wrong_colour_fails_at_load():
    class SyncServe:
        @hookimpl
        def pyrmq_serve(self, kernel, nursery):
            pass

    with pytest.raises(PluginError, match="wrong colour"):
        relay_with(SyncServe())

    class AsyncConfigure:
        @hookimpl
        async def pyrmq_configure(self, kernel):
            pass

    with pytest.raises(PluginError, match="wrong colour"):
        relay_with(AsyncConfigure())


def test_wrappers_are_refused_on_async_hooks():
    class Wrapper:
        @hookimpl(wrapper=True)
        async def pyrmq_serve(self, kernel, nursery):
            yield

    with pytest.raises(PluginError):
        relay_with(Wrapper())


@pytest.mark.hook("pyrmq_addhooks")
def test_addhooks_lets_a_plugin_add_its_own_hooks():
    class NewSpecs:
        @pluggy.HookspecMarker("pyrmq")
        def pyrmq_example_custom(self, value):
            """A third-party hook."""

    class Adds:
        @hookimpl
        def pyrmq_addhooks(self, pluginmanager):
            pluginmanager.add_hookspecs(NewSpecs)

    class Uses:
        @hookimpl
        def pyrmq_example_custom(self, value):
            return value * 2

    relay = relay_with(Adds(), Uses())
    assert relay.pm.hook.pyrmq_example_custom(value=21) == [42]


async def test_unconfigure_keeps_going_when_one_plugin_fails():
    closed = []

    class Broken:
        @hookimpl(tryfirst=True)
        async def pyrmq_unconfigure(self, kernel):
            raise RuntimeError("disk gone")

    class Fine:
        @hookimpl
        async def pyrmq_unconfigure(self, kernel):
            closed.append("fine")

    await relay_with(Broken(), Fine()).unconfigure(kernel=None)
    assert closed == ["fine"]


def test_the_put_chain_runs_only_for_messages_an_interceptor_asks_for():
    from pyrmq.kernel.types import PutChain, PutContext, PutKind, Rejection
    from pyrmq.store.format import MessageRecord

    seen = []

    class Wants:
        def __init__(self, name, order, **triggers):
            self.name, self.order = name, order
            for key, value in triggers.items():
                setattr(self, key, value)

        def intercept(self, record, context):
            seen.append(self.name)
            return Rejection(16, f"{self.name} refuses") if record.topic == "Refused" else record

    delay = Wants("delay", 300, trigger_properties=frozenset({"DELAY"}))
    dlq = Wants("dlq", 200, trigger_topic_prefixes=("%RETRY%",))
    chain = PutChain([delay, dlq])
    plain = MessageRecord("Orders", 0, b"x", properties={"TAGS": "a"})
    assert not PutChain().applies(plain) and not PutChain()
    assert not chain.applies(plain)
    assert chain.applies(MessageRecord("Orders", 0, b"x", properties={"DELAY": "3"}))
    assert chain.applies(MessageRecord("%RETRY%g", 0, b"x"))
    context = PutContext(PutKind.SEND, None, ("127.0.0.1", 1))
    assert chain(MessageRecord("%RETRY%g", 0, b"x"), context).topic == "%RETRY%g"
    assert seen == ["dlq", "delay"]  # by order, and the whole chain once it runs
    every = PutChain([delay, dlq, Wants("acl", 100)])
    assert every.applies(plain)
    assert every(MessageRecord("Refused", 0, b"x"), context) == Rejection(16, "acl refuses")
