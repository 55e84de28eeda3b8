"""``pyrmq admin acl``: the accounts of brokers with access control on (RocketMQ's ACL 1.0), through the ACL RPCs.

    pyrmq admin acl list                                     # accounts and white list; never secrets
    pyrmq admin acl add --account K --secret S [--topic-perm T=PUB ...] [--group-perm G=SUB ...] [--admin]
    pyrmq admin acl update --account K [--secret S] [--default-topic-perm DENY] ...
    pyrmq admin acl delete --account K
    pyrmq admin acl whitelist 10.0.0.* 192.168.1.{1,2}       # no address: empty the global white list

Every action needs an admin account: ``--access-key/--secret-key`` (or ROCKETMQ_ACCESS_KEY / ROCKETMQ_SECRET_KEY).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from pyrmq.client.console import EXIT_OK, EXIT_USAGE, credentials, format_table, run

__all__ = ["add_acl_parser"]

PERMS = ("PUB", "SUB", "PUB|SUB", "SUB|PUB", "DENY")


def _acl(command: str, args: argparse.Namespace, body: Any) -> int:
    async def main() -> int:
        from pyrmq.client import Admin

        async with Admin(args.namesrv, credentials=credentials(args)) as admin:
            return int(await body(admin) or 0)

    return run(f"admin acl {command}", main)


def _where(args: argparse.Namespace) -> dict[str, Any]:
    return {"cluster": args.cluster, "broker_addr": args.broker}


def cmd_list(args: argparse.Namespace) -> int:
    async def body(admin: Any) -> int:
        found = await admin.acl_accounts(**_where(args))
        if args.json:
            print(json.dumps(found, indent=2, sort_keys=True))
            return EXIT_OK
        for broker, data in sorted(found.items()):
            print(f"broker {broker} (ACL version {data.get('version')}); global white list: "
                  f"{', '.join(data.get('globalWhiteAddrs') or []) or '-'}")
            rows = [[a["accessKey"], "yes" if a.get("admin") else "no", a.get("whiteRemoteAddress") or "-",
                     a.get("defaultTopicPerm"), a.get("defaultGroupPerm"), ",".join(a.get("topicPerms") or []) or "-",
                     ",".join(a.get("groupPerms") or []) or "-"]
                    for a in data.get("plainAccessConfigs") or []]
            print(format_table(["ACCESS KEY", "ADMIN", "WHITE ADDRESS", "TOPIC DEFAULT", "GROUP DEFAULT", "TOPICS", "GROUPS"], rows))
        return EXIT_OK

    return _acl("list", args, body)


def _account_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "white_remote_address": args.white_address,
        "admin": args.admin,
        "default_topic_perm": args.default_topic_perm,
        "default_group_perm": args.default_group_perm,
        "topic_perms": args.topic_perm,
        "group_perms": args.group_perm,
    }


def _report(args: argparse.Namespace, document: dict[str, Any], text: str) -> None:
    """What a changing command did: ``text`` for people, ``document`` as JSON with ``--json``."""
    print(json.dumps(document, indent=2, sort_keys=True) if args.json else text)


def cmd_add(args: argparse.Namespace) -> int:
    async def body(admin: Any) -> int:
        if args.account in (a["accessKey"] for d in (await admin.acl_accounts(**_where(args))).values()
                            for a in d.get("plainAccessConfigs") or []):
            print(f"pyrmq admin acl add: account {args.account} exists; use `pyrmq admin acl update`")
            return EXIT_USAGE
        done = await admin.update_acl_account(args.account, args.secret, **_account_options(args), **_where(args))
        _report(args, {"account": args.account, "added": done}, f"account {args.account} added on {', '.join(done)}")
        return EXIT_OK

    return _acl("add", args, body)


def cmd_update(args: argparse.Namespace) -> int:
    async def body(admin: Any) -> int:
        done = await admin.update_acl_account(args.account, args.secret, **_account_options(args), **_where(args))
        _report(args, {"account": args.account, "updated": done}, f"account {args.account} updated on {', '.join(done)}")
        return EXIT_OK

    return _acl("update", args, body)


def cmd_delete(args: argparse.Namespace) -> int:
    async def body(admin: Any) -> int:
        done = await admin.delete_acl_account(args.account, **_where(args))
        _report(args, {"account": args.account, "deleted": done}, f"account {args.account} deleted on {', '.join(done)}")
        return EXIT_OK

    return _acl("delete", args, body)


def cmd_whitelist(args: argparse.Namespace) -> int:
    async def body(admin: Any) -> int:
        done = await admin.update_acl_white_list(args.addresses, file=args.file, **_where(args))
        _report(args, {"globalWhiteRemoteAddresses": args.addresses, "brokers": done},
                f"global white list set to [{', '.join(args.addresses)}] on {', '.join(done)}")
        return EXIT_OK

    return _acl("whitelist", args, body)


def add_acl_parser(areas: Any, parent: argparse.ArgumentParser) -> None:
    acl = areas.add_parser("acl", help="access control accounts and white list (brokers with aclEnable)")
    a = acl.add_subparsers(dest="admin_action", metavar="ACTION")
    acl.set_defaults(func=lambda args: acl.print_help() or EXIT_USAGE)

    def action(name: str, help_text: str, func: Any) -> argparse.ArgumentParser:
        p = a.add_parser(name, parents=[parent], help=help_text)
        where = p.add_mutually_exclusive_group()
        where.add_argument("--cluster", "-c", help="every master of this cluster (default: every cluster)")
        where.add_argument("--broker", "-b", metavar="ADDR", help="one broker")
        p.set_defaults(func=func)
        return p

    p = action("list", "accounts (never their secrets) and the global white list", cmd_list)

    for name, func, help_text in (("add", cmd_add, "create an account"), ("update", cmd_update, "change an account")):
        p = action(name, help_text, func)
        p.add_argument("--account", required=True, metavar="ACCESS_KEY", help="the account's access key (> 6 characters)")
        p.add_argument("--secret", required=name == "add", metavar="SECRET_KEY", help="its secret key (> 6 characters)")
        p.add_argument("--white-address", metavar="PATTERN", help="address that gets in without a signature")
        p.add_argument("--admin", action=argparse.BooleanOptionalAction, default=None, help="admin account")
        p.add_argument("--default-topic-perm", choices=PERMS)
        p.add_argument("--default-group-perm", choices=PERMS)
        p.add_argument("--topic-perm", action="append", metavar="TOPIC=PERM", help="repeatable; replaces the list")
        p.add_argument("--group-perm", action="append", metavar="GROUP=PERM", help="repeatable; replaces the list")

    p = action("delete", "delete an account", cmd_delete)
    p.add_argument("--account", required=True, metavar="ACCESS_KEY")

    p = action("whitelist", "replace the global white list (no address: empty it)", cmd_whitelist)
    p.add_argument("addresses", nargs="*", metavar="PATTERN")
    p.add_argument("--file", help="the broker's ACL file to write (default its plain_acl.yml)")
