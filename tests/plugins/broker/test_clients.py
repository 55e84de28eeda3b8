"""Client bookkeeping of the broker: consumer groups by heartbeat, subscriptions, expiry of silent channels (spec 4.2,
7.4)."""

from __future__ import annotations

from pyrmq.plugins.broker.clients import ChannelInfo, ConsumerManager, ProducerManager, Subscription
from pyrmq.plugins.broker.tag_filter import compile_tag_expression


class Conn:
    def __init__(self, name):
        self.name = name
        self.closed = False


def manager(notified):
    return ConsumerManager(compile_filter=lambda kind, expr: compile_tag_expression(expr), notify=lambda g: notified.append(g.group))


def sub(topic, expr="*", version=1):
    return Subscription.from_json({"topic": topic, "subString": expr, "subVersion": version})


def test_channels_silent_for_120_s_are_dropped_and_the_group_is_told():
    notified: list[str] = []
    consumers = manager(notified)
    a, b = Conn("a"), Conn("b")
    consumers.register("g", ChannelInfo(a, "c-a", "JAVA", 409, 0.0), "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", [sub("T")])
    consumers.register("g", ChannelInfo(b, "c-b", "JAVA", 409, 100.0), "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", [sub("T")])
    notified.clear()
    assert consumers.expire(now=119.0, timeout=120.0) == []
    assert consumers.expire(now=121.0, timeout=120.0) == [a]
    assert consumers.groups["g"].client_ids() == ["c-b"] and notified == ["g"]
    # a heartbeat refreshes the channel
    consumers.register("g", ChannelInfo(b, "c-b", "JAVA", 409, 200.0), "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", [sub("T")])
    assert consumers.expire(now=300.0, timeout=120.0) == []
    assert consumers.expire(now=321.0, timeout=120.0) == [b] and "g" not in consumers.groups

    producers = ProducerManager()
    producers.register("pg", ChannelInfo(a, "p", "JAVA", 409, 0.0))
    assert producers.any_channel("pg") is a
    assert producers.expire(now=121.0, timeout=120.0) == [a] and producers.any_channel("pg") is None


def test_subscriptions_replace_only_when_newer_and_compile_once():
    compiled: list[str] = []
    consumers = ConsumerManager(compile_filter=lambda kind, expr: compiled.append(expr) or compile_tag_expression(expr), notify=lambda g: None)
    c = Conn("c")
    info = ChannelInfo(c, "c1", "JAVA", 409, 0.0)
    assert consumers.register("g", info, "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", [sub("T", "A || B", 5)])
    assert not consumers.register("g", info, "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", [sub("T", "C", 4)])
    assert consumers.find_subscription("g", "T").sub_string == "A || B" and compiled == ["A || B"]
    assert consumers.register("g", info, "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", [sub("T", "C", 6)])
    assert consumers.find_subscription("g", "T").tags_set == frozenset({"C"}) and compiled == ["A || B", "C"]
    assert consumers.register("g", info, "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", [])
    assert consumers.find_subscription("g", "T") is None
