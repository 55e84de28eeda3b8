"""The failover plugin's option of ``pyrmq dev``: ``--ha`` runs a local etcd, a name server and a 3-replica failover
group as processes instead of the embedded roles (plugins/broker/failover/dev.py). In the ``cli`` bundle
(configs/cli.toml), so the command line has the option without loading the broker's plugins."""

from __future__ import annotations

import argparse

from pyrmq.kernel.hookspecs import hookimpl


@hookimpl
def pyrmq_add_options(command: str, parser: argparse.ArgumentParser) -> None:
    if command == "dev":
        parser.add_argument("--ha", action="store_true", help="instead: a local etcd, a name server and a 3-replica "
                            "failover group as processes (brokers on --port, +10, +20; store under ./.pyrmq-ha); kill "
                            "the master to watch")


@hookimpl
def pyrmq_run_instead(command: str, args: argparse.Namespace) -> int | None:
    if command != "dev" or not getattr(args, "ha", False):
        return None
    from pyrmq.plugins.broker.failover.dev import run_ha_dev  # etcd + name server + 3 failover replicas

    return run_ha_dev(args.store_dir or ".pyrmq-ha", args.namesrv_port or 9876, args.port or 10911)
