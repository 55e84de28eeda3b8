"""The broker's traffic counters (plugins/broker/stats.py): RocketMQ's stats names and keys, and windows that drop
what is older than their oldest snapshot."""

from __future__ import annotations

from pyrmq.plugins.broker.stats import BrokerStats


def test_names_keys_and_totals_as_rocketmq_names_them():
    stats = BrokerStats("DefaultCluster")
    stats.put("T", 1, 300)
    stats.put("T", 4, 8000)  # a batch of 4: 2000 bytes each
    stats.put("%DLQ%g", 1, 500)
    stats.get("T", "g", 3, 900)
    stats.send_back("T", "g")
    assert stats.view("TOPIC_PUT_NUMS", "T")["statsMinute"]["sum"] == 5
    assert stats.view("TOPIC_PUT_NUMS", "T")["statsDay"]["avgpt"] == 2.5  # messages per send
    assert stats.view("TOPIC_PUT_SIZE", "T")["statsHour"]["sum"] == 8300
    assert stats.view("GROUP_GET_NUMS", "T@g")["statsMinute"]["sum"] == 3
    assert stats.view("GROUP_GET_SIZE", "T@g")["statsMinute"]["sum"] == 900
    assert stats.view("SNDBCK_PUT_NUMS", "T@g")["statsMinute"]["sum"] == 1
    assert stats.view("BROKER_PUT_NUMS", "DefaultCluster")["statsMinute"]["sum"] == 6
    assert stats.view("BROKER_GET_NUMS", "DefaultCluster")["statsMinute"]["sum"] == 3
    for name, key in [("TOPIC_PUT_NUMS", "U"), ("GROUP_GET_NUMS", "T"), ("BROKER_PUT_NUMS", "Other"), ("NOPE", "T")]:
        assert stats.view(name, key) is None
    # message sizes: one of 300 bytes (<= 1 KiB), four of 2000 (<= 4 KiB)
    assert stats.topics["T"].buckets[:2] == [1, 4] and sum(stats.topics["T"].buckets) == 5
    assert stats.topics["%DLQ%g"].dlq_group == "g" and stats.topics["T"].dlq_group is None


def test_the_minute_window_forgets_what_is_older_than_seven_snapshots():
    stats = BrokerStats("c")
    stats.put("T", 10, 1000)
    stats.sample()  # tick 1: minute snapshot with 10
    for _ in range(6):
        stats.put("T", 1, 100)
        stats.sample()
    # 7 minute snapshots kept: the first (0 at creation) was dropped, the oldest kept holds the 10
    minute = stats.view("TOPIC_PUT_NUMS", "T")["statsMinute"]
    assert minute["sum"] == 6 and minute["avgpt"] == 1.0
    # the hour and day windows sample every 60th / 360th tick: they still start at creation
    assert stats.view("TOPIC_PUT_NUMS", "T")["statsHour"]["sum"] == 16
    assert stats.view("TOPIC_PUT_NUMS", "T")["statsDay"]["sum"] == 16
    assert stats.view("BROKER_PUT_NUMS", "c")["statsMinute"]["sum"] == 6
