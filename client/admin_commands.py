"""``pyrmq admin ...``: topics, clusters, consumer groups, messages, offsets and dead-letter queues, printed as
tables a person can read (in the spirit of RocketMQ's mqadmin)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from pyrmq.client.acl_commands import add_acl_parser
from pyrmq.client.console import (
    EXIT_FAILED, EXIT_OK, EXIT_USAGE, credentials, error, format_table, ms_text, run, timestamp,
)
from pyrmq.remoting.vocabulary import Permission

__all__ = ["add_admin_parser"]


def _admin(command: str, args: argparse.Namespace, body: Callable[[Any], Any]) -> int:
    async def main() -> int:
        from pyrmq.client import Admin

        async with Admin(args.namesrv, credentials=credentials(args)) as admin:
            return int(await body(admin) or 0)

    return run(f"admin {command}", main)


def _json(value: Any) -> None:
    """``--json``: one JSON document on stdout (scripts parse it; tables are for people)."""
    print(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def cmd_topic_create(args: argparse.Namespace) -> int:

    async def body(admin: Any) -> int:
        brokers = await admin.create_topic(
            args.topic, args.queues, read_queue_nums=args.read_queues, write_queue_nums=args.write_queues,
            perm=args.perm, order=args.order, cluster=args.cluster, broker_addr=args.broker,
        )
        if args.json:
            _json({"topic": args.topic, "brokers": brokers})
            return EXIT_OK
        print(f"topic {args.topic} created/updated on {', '.join(brokers)}")
        return EXIT_OK

    return _admin("topic create", args, body)


def cmd_topic_list(args: argparse.Namespace) -> int:

    async def body(admin: Any) -> int:
        from pyrmq.client.admin import is_system_topic
        from pyrmq.client.errors import TopicNotFoundError

        info = await admin.cluster_info()
        topics = [t for t in await admin.list_topics() if args.all or not is_system_topic(t, list(info.clusters) + list(info.brokers))]
        rows = []
        for topic in topics:
            try:
                route = await admin.topic_route(topic)
            except TopicNotFoundError:
                continue
            brokers = sorted(q.broker_name for q in route.queue_datas)
            rows.append([topic, ",".join(brokers), sum(q.write_queue_nums for q in route.queue_datas),
                         sum(q.read_queue_nums for q in route.queue_datas),
                         "system" if is_system_topic(topic, list(info.clusters) + list(info.brokers)) else "user"])
        if args.json:
            _json([dict(zip(("topic", "brokers", "writeQueueNums", "readQueueNums", "kind"), r)) for r in rows])
            return EXIT_OK
        print(format_table(["TOPIC", "BROKERS", "WRITE QUEUES", "READ QUEUES", "KIND"], rows))
        return EXIT_OK

    return _admin("topic list", args, body)


def cmd_topic_delete(args: argparse.Namespace) -> int:

    async def body(admin: Any) -> int:
        brokers = await admin.delete_topic(args.topic, cluster=args.cluster)
        if args.json:
            _json({"topic": args.topic, "brokers": brokers})
            return EXIT_OK
        print(f"topic {args.topic} deleted from {', '.join(brokers) or 'no broker'} and the name servers")
        return EXIT_OK

    return _admin("topic delete", args, body)


def cmd_topic_route(args: argparse.Namespace) -> int:

    async def body(admin: Any) -> int:
        route = await admin.topic_route(args.topic)
        if args.json:
            print(json.dumps(route.to_json(), indent=2))
            return EXIT_OK
        rows = []
        for q in sorted(route.queue_datas, key=lambda q: q.broker_name):
            b = route.broker(q.broker_name)
            addrs = " ".join(f"{i}={a}" for i, a in sorted(b.broker_addrs.items())) if b else "-"
            rows.append([q.broker_name, b.cluster if b else "-", addrs, q.read_queue_nums, q.write_queue_nums, _perm(q.perm)])
        print(format_table(["BROKER", "CLUSTER", "ADDRESSES (id=addr)", "READ QUEUES", "WRITE QUEUES", "PERM"], rows))
        return EXIT_OK

    return _admin("topic route", args, body)


def cmd_topic_status(args: argparse.Namespace) -> int:

    async def body(admin: Any) -> int:
        stats = await admin.topic_stats(args.topic)
        if args.json:
            _json([{"brokerName": mq.broker_name, "queueId": mq.queue_id, "minOffset": low, "maxOffset": high,
                    "lastUpdateTimestamp": last} for mq, low, high, last in stats])
            return EXIT_OK
        rows = [[mq.broker_name, mq.queue_id, low, high, ms_text(last)] for mq, low, high, last in stats]
        print(format_table(["BROKER", "QUEUE", "MIN OFFSET", "MAX OFFSET", "LAST UPDATED"], rows))
        return EXIT_OK

    return _admin("topic status", args, body)


def _perm(perm: int) -> str:
    return ("R" if perm & Permission.READ else "-") + ("W" if perm & Permission.WRITE else "-") + ("X" if perm & Permission.INHERIT else "-")


def _lag(b: Any) -> str:
    """A master: its slaves and the worst one's lag; a slave: how far behind the master it is."""
    if b.slaves is not None:
        return "no slave" if b.slaves == 0 else f"{b.slaves} slave(s), {b.lag_bytes} B / {b.lag_seconds:.1f} s behind"
    if b.lag_bytes is not None:
        return f"{b.lag_bytes} B behind"
    return "-"


def cmd_cluster_list(args: argparse.Namespace) -> int:

    async def body(admin: Any) -> int:
        brokers = await admin.list_clusters()
        if args.json:
            import attrs

            _json([attrs.asdict(b) for b in brokers])
            return EXIT_OK
        rows = [[b.cluster, b.broker_name, b.broker_id, b.addr, b.version or "-",
                 b.max_offset if b.max_offset >= 0 else "-", _lag(b), b.error or "ok"] for b in brokers]
        print(format_table(["CLUSTER", "BROKER", "ID", "ADDRESS", "VERSION", "COMMITLOG MAX OFFSET", "REPLICATION LAG",
                            "STATUS"], rows))
        return EXIT_OK

    return _admin("cluster list", args, body)


def cmd_group_progress(args: argparse.Namespace) -> int:

    async def body(admin: Any) -> int:
        progress = await admin.group_progress(args.group, args.topic)
        if args.json:
            _json([{"topic": p.topic, "brokerName": p.broker_name, "queueId": p.queue_id, "brokerOffset": p.broker_offset,
                    "consumerOffset": p.consumer_offset, "lag": p.lag, "inflight": p.inflight,
                    "lastTimestamp": p.last_timestamp} for p in progress])
            return EXIT_OK
        rows = [[p.topic, p.broker_name, p.queue_id, p.broker_offset, p.consumer_offset, p.lag, p.inflight,
                 ms_text(p.last_timestamp)] for p in progress]
        print(format_table(["TOPIC", "BROKER", "QUEUE", "BROKER OFFSET", "CONSUMER OFFSET", "LAG", "IN FLIGHT",
                            "LAST CONSUMED"], rows))
        inflight = sum(p.inflight for p in progress)
        print(f"\ngroup {args.group}: {len(rows)} queue(s), total lag {sum(p.lag for p in progress)}"
              + (f", {inflight} popped and not acked" if inflight else ""))
        return EXIT_OK

    return _admin("group progress", args, body)


def cmd_group_list(args: argparse.Namespace) -> int:

    async def body(admin: Any) -> int:
        groups = [g for g in await admin.list_groups() if args.all or not _system_group(g["group"])]
        if args.json:
            _json(groups)
            return EXIT_OK
        rows = [[g["group"], ",".join(sorted(g["brokers"])), "yes" if g.get("consumeEnable", True) else "no",
                 "yes" if g.get("consumeBroadcastEnable", True) else "no", "yes" if g.get("consumeMessageOrderly") else "no",
                 g.get("retryQueueNums", "-"), g.get("retryMaxTimes", "-")] for g in groups]
        print(format_table(["GROUP", "BROKERS", "CONSUME", "BROADCAST", "FIFO", "RETRY QUEUES", "RETRY MAX"], rows))
        return EXIT_OK

    return _admin("group list", args, body)


#: ``pyrmq admin group create/update`` options -> SubscriptionGroupConfig's JSON names
_GROUP_OPTIONS = {
    "fifo": "consumeMessageOrderly", "retry_max_times": "retryMaxTimes", "retry_queues": "retryQueueNums",
    "consume": "consumeEnable", "broadcast": "consumeBroadcastEnable", "from_min": "consumeFromMinEnable",
}


def _group_changes(args: argparse.Namespace) -> dict[str, Any]:
    return {name: getattr(args, option) for option, name in _GROUP_OPTIONS.items() if getattr(args, option) is not None}


def _put_group(args: argparse.Namespace, *, create: bool) -> int:
    """``group create`` (refused when the group exists on a broker asked) and ``group update`` (refused when it
    does not; only the options given change)."""

    async def body(admin: Any) -> int:
        from pyrmq.client.admin import GROUP_DEFAULTS

        known = {g["group"]: g for g in await admin.list_groups()}
        existing = known.get(args.group)
        if create and existing is not None:
            return error("admin group create", f"group {args.group} exists on {', '.join(sorted(existing['brokers']))}: "
                                               "use 'pyrmq admin group update' to change it")
        if not create and existing is None:
            return error("admin group update", f"no broker has group {args.group}: use 'pyrmq admin group create'")
        base = dict(GROUP_DEFAULTS) if create else {k: v for k, v in existing.items() if k not in ("group", "brokers")}
        config = {**base, **_group_changes(args), "groupName": args.group}
        done = await admin.put_group(config, cluster=args.cluster, broker_addr=args.broker)
        if args.json:
            _json({"group": args.group, "brokers": done, "config": config})
            return EXIT_OK
        print(f"group {args.group} {'created' if create else 'updated'} on {', '.join(done)}: "
              f"fifo={'yes' if config['consumeMessageOrderly'] else 'no'}, retryMaxTimes={config['retryMaxTimes']} "
              f"(then %DLQ%{args.group}), retryQueueNums={config['retryQueueNums']}, "
              f"consume={'yes' if config['consumeEnable'] else 'no'}")
        return EXIT_OK

    return _admin(f"group {'create' if create else 'update'}", args, body)


def cmd_group_create(args: argparse.Namespace) -> int:
    return _put_group(args, create=True)


def cmd_group_update(args: argparse.Namespace) -> int:
    return _put_group(args, create=False)


def cmd_group_delete(args: argparse.Namespace) -> int:

    async def body(admin: Any) -> int:
        known = {g["group"] for g in await admin.list_groups()}
        if args.group not in known:
            return error("admin group delete", f"no broker has group {args.group}")
        done = await admin.delete_group(args.group, cluster=args.cluster, broker_addr=args.broker)
        if args.json:
            _json({"group": args.group, "brokers": done})
        else:
            print(f"group {args.group} deleted on {', '.join(done)}")
        return EXIT_OK

    return _admin("group delete", args, body)


def _system_group(group: str) -> bool:
    # RocketMQ's own groups (MixAll: TOOLS_CONSUMER, FILTERSRV_CONSUMER, CID_RMQ_SYS_*, CID_ONSAPI_*, SELF_TEST_*)
    return group in ("TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "__MONITOR_CONSUMER", "CLIENT_INNER_PRODUCER",
                     "SELF_TEST_P_GROUP", "SELF_TEST_C_GROUP") or group.startswith(("CID_RMQ_SYS_", "CID_ONS"))


def cmd_group_connections(args: argparse.Namespace) -> int:

    async def body(admin: Any) -> int:
        info = await admin.group_connections(args.group)
        if args.json:
            _json(info)
            return EXIT_OK
        rows = [[c.get("clientId"), c.get("clientAddr"), c.get("language"), c.get("version"), c.get("broker")]
                for c in info["connections"]]
        print(format_table(["CLIENT ID", "ADDRESS", "LANGUAGE", "VERSION", "BROKER"], rows))
        print()
        subs = [[t, sub.get("subString"), sub.get("expressionType")] for t, sub in sorted(info["subscriptions"].items())]
        print(format_table(["TOPIC", "EXPRESSION", "TYPE"], subs))
        print(f"\nconsume type {info.get('consumeType')}, message model {info.get('messageModel')}, "
              f"from {info.get('consumeFromWhere')}")
        return EXIT_OK

    return _admin("group connections", args, body)


def cmd_producer_connections(args: argparse.Namespace) -> int:

    async def body(admin: Any) -> int:
        connections = await admin.producer_connections(args.group)
        if args.json:
            _json(connections)
            return EXIT_OK
        rows = [[c.get("clientId"), c.get("clientAddr"), c.get("language"), c.get("version"), c.get("broker")]
                for c in connections]
        print(format_table(["CLIENT ID", "ADDRESS", "LANGUAGE", "VERSION", "BROKER"], rows))
        return EXIT_OK

    return _admin("producer connections", args, body)


def cmd_broker_status(args: argparse.Namespace) -> int:

    async def body(admin: Any) -> int:
        brokers = await admin.broker_status(args.broker)
        if args.json:
            _json(brokers)
            return EXIT_OK
        for b in brokers:
            print(f"{b['brokerName']} (id {b['brokerId']}) at {b['brokerAddr']}")
            width = max(len(k) for k in b)
            for key in sorted(b):
                if key not in ("brokerName", "brokerId", "brokerAddr"):
                    print(f"  {key.ljust(width)}  {b[key]}")
            print()
        return EXIT_OK

    return _admin("broker status", args, body)


def cmd_broker_config_get(args: argparse.Namespace) -> int:

    async def body(admin: Any) -> int:
        config = await admin.broker_config(args.broker)
        if args.key:
            missing = [k for k in args.key if k not in config]
            if missing:
                return error("admin broker config get", f"no such setting: {', '.join(missing)}")
            config = {k: config[k] for k in args.key}
        if args.json:
            _json(config)
            return EXIT_OK
        print(format_table(["KEY", "VALUE"], [[k, v] for k, v in sorted(config.items())]))
        return EXIT_OK

    return _admin("broker config get", args, body)


def cmd_broker_config_set(args: argparse.Namespace) -> int:
    values = {}
    for item in args.setting:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"pyrmq admin broker config set: error: {item!r} is not KEY=VALUE", file=sys.stderr)
            return EXIT_USAGE
        values[key.strip()] = value.strip()

    async def body(admin: Any) -> int:
        brokers = await admin.update_broker_config(values, broker_addr=args.broker, cluster=args.cluster)
        if args.json:
            _json({"brokers": brokers, "updated": values})
            return EXIT_OK
        print(f"updated {', '.join(f'{k}={v}' for k, v in values.items())} on {', '.join(brokers)}")
        return EXIT_OK

    return _admin("broker config set", args, body)


def _print_messages(messages: Sequence[Any], with_body: bool) -> None:
    for m in messages:
        print(f"Message {m.msg_id}")
        rows = [
            ("topic", m.topic), ("broker/queue@offset", f"{m.broker_name or '?'}/{m.queue_id}@{m.queue_offset}"),
            ("offset msg id", m.offset_msg_id), ("tags", m.tags or "-"), ("keys", " ".join(m.keys) or "-"),
            ("born", f"{ms_text(m.born_timestamp)} from {m.born_host[0]}:{m.born_host[1]}"),
            ("stored", f"{ms_text(m.store_timestamp)} on {m.store_host[0]}:{m.store_host[1]}"),
            ("reconsume times", m.reconsume_times), ("body size", len(m.body)),
            ("properties", " ".join(f"{k}={v}" for k, v in sorted(m.properties.items()))),
        ]
        if with_body:
            rows.append(("body", m.text()))
        width = max(len(k) for k, _ in rows)
        for k, v in rows:
            print(f"  {k.ljust(width)}  {v}")
        print()


def cmd_message_query(args: argparse.Namespace) -> int:
    if bool(args.key) == bool(args.id):
        print("pyrmq admin message query: error: give exactly one of --key K (with -t) or --id ID", file=sys.stderr)
        return EXIT_USAGE
    if args.key and not args.topic:
        print("pyrmq admin message query: error: --key needs the topic (-t)", file=sys.stderr)
        return EXIT_USAGE

    async def body(admin: Any) -> int:
        if args.key:
            found = await admin.query_message_by_key(args.topic, args.key, max_num=args.max, broker_id=args.broker_id or 0)
            if not found:
                print(f"no message with key {args.key!r} in topic {args.topic}", file=sys.stderr)
                return EXIT_FAILED
        else:
            found = [await admin.query_message_by_id(args.id, args.topic, broker_id=args.broker_id)]
        if args.json:
            for m in found:
                print(json.dumps(m.to_json(), ensure_ascii=False))
        else:
            _print_messages(found, args.body)
        return EXIT_OK

    return _admin("message query", args, body)


def cmd_offset_reset(args: argparse.Namespace) -> int:

    async def body(admin: Any) -> int:
        table = await admin.reset_offset(args.group, args.topic, args.timestamp, force=True)
        if args.json:
            _json([{"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": off}
                   for mq, off in table.items()])
            return EXIT_OK
        rows = [[mq.topic, mq.broker_name, mq.queue_id, off] for mq, off in table.items()]
        print(format_table(["TOPIC", "BROKER", "QUEUE", "NEW OFFSET"], rows))
        print(f"\ngroup {args.group} reset to {ms_text(args.timestamp) if args.timestamp > 0 else args.timestamp} "
              "(the broker tells the group's running consumers)")
        return EXIT_OK

    return _admin("offset reset", args, body)


def _namesrv_text(value: Any) -> str:
    from pyrmq.client.config import parse_namesrv

    return ";".join(parse_namesrv(value))


def _dlq() -> Any:
    try:
        from pyrmq.client import dlq
    except ImportError as exc:  # written by the delay/retry/DLQ work; absent in an older tree
        raise SystemExit(error("admin dlq", f"dead-letter tools are not available: {exc}")) from None
    return dlq


def cmd_dlq_list(args: argparse.Namespace) -> int:
    dlq = _dlq()

    async def main() -> int:
        letters = await dlq.list_dlq(_namesrv_text(args.namesrv), args.group, args.limit, credentials=credentials(args))
        if args.json:
            _json([{"msgId": d.msg_id, "uniqKey": d.uniq_key, "originalTopic": d.original_topic, "queueId": d.queue_id,
                    "queueOffset": d.queue_offset, "reconsumeTimes": d.reconsume_times,
                    "storeTimestamp": d.store_timestamp, "body": d.body.decode("utf-8", "replace")} for d in letters])
            return EXIT_OK
        rows = [[d.msg_id, d.uniq_key or "-", d.original_topic or "-", d.queue_id, d.queue_offset, d.reconsume_times,
                 ms_text(d.store_timestamp), d.body[:40].decode("utf-8", "replace")] for d in letters]
        print(format_table(["MSG ID", "UNIQ KEY", "ORIGINAL TOPIC", "QUEUE", "OFFSET", "RECONSUMED", "STORED", "BODY"], rows))
        print(f"\n%DLQ%{args.group}: {len(rows)} message(s) shown")
        return EXIT_OK

    return _run_dlq("admin dlq list", main, dlq)


def cmd_dlq_resend(args: argparse.Namespace) -> int:
    if not args.all and not args.msg_id:
        print("pyrmq admin dlq resend: error: give --msg-id ID (repeatable) or --all", file=sys.stderr)
        return EXIT_USAGE
    dlq = _dlq()

    async def main() -> int:
        sent = await dlq.resend_dlq(
            _namesrv_text(args.namesrv), args.group, None if args.all else list(args.msg_id),
            credentials=credentials(args),
        )
        if args.json:
            _json({"group": args.group, "resent": sent})
        else:
            print(f"re-sent {sent} message(s) of %DLQ%{args.group} to their original topics")
        return EXIT_OK if sent or args.all else EXIT_FAILED

    return _run_dlq("admin dlq resend", main, dlq)


def _run_dlq(command: str, main: Callable[[], Any], dlq: Any) -> int:
    import trio

    error_type = getattr(dlq, "DlqError", None)
    try:
        return run(command, main)
    except Exception as exc:  # DlqError is not a ClientError
        if error_type is not None and isinstance(exc, error_type):
            return error(command, exc)
        if isinstance(exc, trio.TooSlowError):
            return error(command, "timed out")
        raise


def cmd_transaction_pending(args: argparse.Namespace) -> int:

    async def body(admin: Any) -> int:
        pending = await admin.pending_transactions(args.topic)
        if args.json:
            _json([{"broker": p.broker_name, "topic": p.topic, "queueId": p.queue_id, "keys": p.keys, "tags": p.tags,
                    "msgId": p.msg_id, "producerGroup": p.producer_group, "checkTimes": p.check_times,
                    "bornTimestamp": p.born_timestamp} for p in pending])
            return EXIT_OK
        rows = [
            [p.broker_name, p.topic, p.queue_id, p.keys, p.tags, p.msg_id, p.producer_group, p.check_times,
             ms_text(p.born_timestamp)]
            for p in pending
        ]
        print(format_table(["BROKER", "TOPIC", "QUEUE", "KEYS", "TAGS", "MSG ID", "PRODUCER GROUP", "CHECKS", "BORN"], rows))
        return EXIT_OK

    return _admin("transaction pending", args, body)


def add_admin_parser(sub: Any, parent: argparse.ArgumentParser) -> None:
    admin = sub.add_parser("admin", help="administration: topics, clusters, brokers, groups, producers, messages, "
                                         "offsets, DLQ")
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    parent = argparse.ArgumentParser(add_help=False, parents=[parent, as_json])
    areas = admin.add_subparsers(dest="admin_area", metavar="AREA")
    admin.set_defaults(func=lambda args: admin.print_help() or EXIT_USAGE)

    topic = areas.add_parser("topic", help="create, list, delete topics; routes and status")
    t = topic.add_subparsers(dest="admin_action", metavar="ACTION")
    topic.set_defaults(func=lambda args: topic.print_help() or EXIT_USAGE)
    p = t.add_parser("create", parents=[parent], help="create or update a topic on a cluster's masters")
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--queues", "-q", type=int, default=8, help="read and write queues (default 8)")
    p.add_argument("--read-queues", "-r", type=int)
    p.add_argument("--write-queues", "-w", type=int)
    p.add_argument("--perm", "-p", type=int, default=6, help="2 write, 4 read, 6 both (default)")
    p.add_argument("--order", action="store_true", help="mark the topic ordered")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--cluster", "-c", help="every master of this cluster (default: every cluster)")
    where.add_argument("--broker", "-b", metavar="ADDR", help="one broker")
    p.set_defaults(func=cmd_topic_create)
    p = t.add_parser("list", parents=[parent], help="topics with their brokers and queues")
    p.add_argument("--all", action="store_true", help="include system topics")
    p.set_defaults(func=cmd_topic_list)
    p = t.add_parser("delete", parents=[parent], help="delete a topic from the brokers and name servers")
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--cluster", "-c")
    p.set_defaults(func=cmd_topic_delete)
    p = t.add_parser("route", parents=[parent], help="the route of a topic")
    p.add_argument("--topic", "-t", required=True)
    p.set_defaults(func=cmd_topic_route)
    p = t.add_parser("status", parents=[parent], help="min/max offsets of each queue")
    p.add_argument("--topic", "-t", required=True)
    p.set_defaults(func=cmd_topic_status)

    cluster = areas.add_parser("cluster", help="clusters and brokers")
    c = cluster.add_subparsers(dest="admin_action", metavar="ACTION")
    cluster.set_defaults(func=lambda args: cluster.print_help() or EXIT_USAGE)
    p = c.add_parser("list", parents=[parent], help="every broker of every cluster")
    p.set_defaults(func=cmd_cluster_list)

    group = areas.add_parser("group", help="consumer groups")
    g = group.add_subparsers(dest="admin_action", metavar="ACTION")
    group.set_defaults(func=lambda args: group.print_help() or EXIT_USAGE)
    p = g.add_parser("progress", parents=[parent], help="per queue: broker offset, consumer offset, lag")
    p.add_argument("--group", "-g", required=True)
    p.add_argument("--topic", "-t")
    p.set_defaults(func=cmd_group_progress)
    p = g.add_parser("list", parents=[parent], help="subscription groups of every master")
    p.add_argument("--all", action="store_true", help="include RocketMQ's own groups")
    p.set_defaults(func=cmd_group_list)
    p = g.add_parser("connections", parents=[parent], help="the live consumers of a group and their subscriptions")
    p.add_argument("--group", "-g", required=True)
    p.set_defaults(func=cmd_group_connections)
    for action, func, helptext in (
        ("create", cmd_group_create, "declare a subscription group on the masters (mqadmin updateSubGroup)"),
        ("update", cmd_group_update, "change some settings of a subscription group (the others stay)"),
    ):
        p = g.add_parser(action, parents=[parent], help=helptext)
        p.add_argument("--group", "-g", required=True)
        p.add_argument("--fifo", action=argparse.BooleanOptionalAction, default=None,
                       help="a FIFO group: a queue's next messages only once the last batch is acked "
                            "(consumeMessageOrderly; POP consumers)")
        p.add_argument("--retry-max-times", type=int, metavar="N",
                       help="deliveries after the first before a message goes to %%DLQ%%<group> (default 16)")
        p.add_argument("--retry-queues", type=int, metavar="N",
                       help="queues of %%RETRY%%<group> (default 1; 0 drops what a consumer sends back)")
        p.add_argument("--consume", action=argparse.BooleanOptionalAction, default=None,
                       help="the group may consume (--no-consume stops it: NO_PERMISSION)")
        p.add_argument("--broadcast", action=argparse.BooleanOptionalAction, default=None,
                       help="broadcast consumption allowed")
        p.add_argument("--from-min", action=argparse.BooleanOptionalAction, default=None,
                       help="a new consumer may start from the min offset")
        where = p.add_mutually_exclusive_group()
        where.add_argument("--cluster", "-c", help="every master of this cluster (default: every cluster)")
        where.add_argument("--broker", "-b", metavar="ADDR", help="one broker")
        p.set_defaults(func=func)
    p = g.add_parser("delete", parents=[parent], help="delete a subscription group from the masters")
    p.add_argument("--group", "-g", required=True)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--cluster", "-c", help="every master of this cluster (default: every cluster)")
    where.add_argument("--broker", "-b", metavar="ADDR", help="one broker")
    p.set_defaults(func=cmd_group_delete)

    producer = areas.add_parser("producer", help="producer groups")
    pr = producer.add_subparsers(dest="admin_action", metavar="ACTION")
    producer.set_defaults(func=lambda args: producer.print_help() or EXIT_USAGE)
    p = pr.add_parser("connections", parents=[parent], help="the live producers of a group")
    p.add_argument("--group", "-g", required=True)
    p.set_defaults(func=cmd_producer_connections)

    broker = areas.add_parser("broker", help="brokers: runtime status and settings")
    b = broker.add_subparsers(dest="admin_action", metavar="ACTION")
    broker.set_defaults(func=lambda args: broker.print_help() or EXIT_USAGE)
    p = b.add_parser("status", parents=[parent], help="runtime figures of one broker or every broker")
    p.add_argument("--broker", "-b", metavar="ADDR", help="one broker (default: every registered broker)")
    p.set_defaults(func=cmd_broker_status)
    config = b.add_parser("config", help="read or change a broker's settings")
    bc = config.add_subparsers(dest="admin_config_action", metavar="ACTION")
    config.set_defaults(func=lambda args: config.print_help() or EXIT_USAGE)
    p = bc.add_parser("get", parents=[parent], help="a broker's settings (GET_BROKER_CONFIG)")
    p.add_argument("--broker", "-b", metavar="ADDR", required=True)
    p.add_argument("--key", "-k", action="append", help="only this setting; repeatable")
    p.set_defaults(func=cmd_broker_config_get)
    p = bc.add_parser("set", parents=[parent], help="change settings of running brokers (UPDATE_BROKER_CONFIG; "
                                                      "only those that act at runtime)")
    p.add_argument("setting", nargs="+", metavar="KEY=VALUE")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--broker", "-b", metavar="ADDR", help="one broker")
    where.add_argument("--cluster", "-c", help="every master of this cluster")
    p.set_defaults(func=cmd_broker_config_set)

    message = areas.add_parser("message", help="find messages")
    m = message.add_subparsers(dest="admin_action", metavar="ACTION")
    message.set_defaults(func=lambda args: message.print_help() or EXIT_USAGE)
    p = m.add_parser("query", parents=[parent], help="by key (--key K -t T) or by id (--id ID [-t T])")
    p.add_argument("--key", "-k")
    p.add_argument("--id", "-i", help="offset message id, or the client id (UNIQ_KEY) with -t")
    p.add_argument("--topic", "-t")
    p.add_argument("--max", type=int, default=32, help="at most this many messages by key (default 32)")
    p.add_argument("--body", action="store_true", help="show the bodies")
    p.add_argument("--broker-id", type=int, metavar="ID",
                   help="read from this broker of each group (0 the master, 1 the first slave; default the master)")
    p.set_defaults(func=cmd_message_query)

    offset = areas.add_parser("offset", help="consumer offsets")
    o = offset.add_subparsers(dest="admin_action", metavar="ACTION")
    offset.set_defaults(func=lambda args: offset.print_help() or EXIT_USAGE)
    p = o.add_parser("reset", parents=[parent], help="move a group's offsets on a topic to a time")
    p.add_argument("--group", "-g", required=True)
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--timestamp", "-s", type=timestamp, required=True,
                   help="now, ms since the epoch, yyyyMMddHHmmss or ISO 8601; -1 = the end")
    p.set_defaults(func=cmd_offset_reset)

    transaction = areas.add_parser("transaction", help="transaction messages")
    tx = transaction.add_subparsers(dest="admin_action", metavar="ACTION")
    transaction.set_defaults(func=lambda args: transaction.print_help() or EXIT_USAGE)
    p = tx.add_parser("pending", parents=[parent], help="half messages not committed or rolled back, with check counts")
    p.add_argument("-t", "--topic", help="only this topic (default: every topic)")
    p.set_defaults(func=cmd_transaction_pending)

    dlq = areas.add_parser("dlq", help="dead-letter queues (%%DLQ%%<group>)")
    d = dlq.add_subparsers(dest="admin_action", metavar="ACTION")
    dlq.set_defaults(func=lambda args: dlq.print_help() or EXIT_USAGE)
    p = d.add_parser("list", parents=[parent], help="messages of a group's dead-letter queue")
    p.add_argument("--group", "-g", required=True)
    p.add_argument("--limit", type=int, default=100)
    p.set_defaults(func=cmd_dlq_list)
    p = d.add_parser("resend", parents=[parent], help="re-send dead letters to their original topic")
    p.add_argument("--group", "-g", required=True)
    p.add_argument("--msg-id", action="append", help="a message (offset msg id or UNIQ_KEY); repeatable")
    p.add_argument("--all", action="store_true", help="every message of the DLQ")
    p.set_defaults(func=cmd_dlq_resend)

    add_acl_parser(areas, parent)
