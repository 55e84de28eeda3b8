"""Access control (RocketMQ's ACL 1.0): ``plain_acl.yml`` accounts, signed requests, per-topic and per-group rights.

On when the broker's ``aclEnable = true``. The rules are read from ``<home>/conf/plain_acl.yml`` and every
``<home>/conf/acl/*.yml`` (``home`` = plugin setting, else ``$ROCKETMQ_HOME``, else ``~``); ``file`` and ``dir``
settings name them directly::

    [plugins."pyrmq.plugins.broker.acl"]
    home = "/opt/rocketmq"        # or: file = ".../plain_acl.yml", dir = ".../acl"
    reloadIntervalMs = 5000

* The check (:class:`~pyrmq.plugins.broker.acl.validator.AclValidator`) is the broker's request guard
  (``pyrmq_make_request_guard``): the kernel runs it before every processor; with ACL off there is no guard.
* Every ``reloadIntervalMs`` the files' modification times are compared; a changed, added or removed file reloads
  all of them. A file that does not load (bad YAML, a bad key) leaves the previous rules in force and the log says
  which file and key.
* ACL management (admin accounts only): UPDATE_AND_CREATE_ACL_CONFIG (50), DELETE_ACL_CONFIG (51),
  GET_BROKER_CLUSTER_ACL_INFO (52: RocketMQ's version header, plus a body listing the accounts without secrets),
  UPDATE_GLOBAL_WHITE_ADDRS_CONFIG (53). GET_BROKER_CLUSTER_ACL_CONFIG (54, which sent secrets) does not exist.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import attrs
import trio

from pyrmq.kernel.errors import ConfigError
from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.types import Processor
from pyrmq.kernel.settings import setting
from pyrmq.kernel.kernel import Kernel
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand

from .rules import PERM_NAMES, AclRules, account_from, load_rules, parse_document, write_yaml
from .validator import AclValidator

__all__ = ["AclService", "ACL"]

log = logging.getLogger("pyrmq.broker.acl")

PLUGIN = "pyrmq.plugins.broker.acl"


def _split(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [part.strip() for part in text.split(",") if part.strip()]


class AclService:
    """The files, the validator holding the rules in force, the reload service and the admin RPCs."""

    def __init__(self, main_file: Path, directory: Path, *, broker_name: str, broker_addr: str, cluster: str,
                 reload_interval: float = 5.0) -> None:
        self.main_file = main_file
        self.directory = directory
        self.reload_interval = reload_interval
        self.broker_name = broker_name
        self.broker_addr = broker_addr
        self.cluster = cluster
        self.version = 0
        self._mtimes: dict[str, int] = {}
        self._lock = trio.Lock()
        rules, self._mtimes = self._load()  # a broken file at start is a ConfigError: the broker does not start
        self.validator = AclValidator(rules)
        self.version = 1

    # -- hooks (this object is registered as a plugin when aclEnable) ----------------------------------------------

    @hookimpl(trylast=True)
    def pyrmq_make_request_guard(self, role: str) -> AclValidator | None:
        return self.validator if role == "broker" else None

    @hookimpl(trylast=True)
    def pyrmq_register_processors(self, role: str) -> dict[int, Processor] | None:
        if role != "broker":
            return None
        return {
            RequestCode.UPDATE_AND_CREATE_ACL_CONFIG: self.update_account,
            RequestCode.DELETE_ACL_CONFIG: self.delete_account,
            RequestCode.GET_BROKER_CLUSTER_ACL_INFO: self.acl_info,
            RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: self.update_white_list,
        }

    @hookimpl(trylast=True)
    async def pyrmq_serve(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.run)

    # -- files -----------------------------------------------------------------------------------------------

    def files(self) -> list[Path]:
        found = [self.main_file] if self.main_file.exists() else []
        if self.directory.is_dir():
            found += sorted(p for p in self.directory.glob("*.yml") if p.is_file() and p != self.main_file)
        return found

    def _stat(self) -> dict[str, int]:
        out = {}
        for path in self.files():
            try:
                out[str(path)] = path.stat().st_mtime_ns
            except OSError:
                continue
        return out

    def _load(self) -> tuple[AclRules, dict[str, int]]:
        mtimes = self._stat()
        if not mtimes:
            raise ConfigError(f"aclEnable is true but there is no ACL file (looked for {self.main_file} and {self.directory}/*.yml)",
                              file=str(self.main_file))
        return load_rules(Path(p) for p in mtimes), mtimes

    def reload_if_changed(self) -> bool:
        """Reload when a file changed; returns True when new rules are in force. Blocking: run in a thread."""
        if self._stat() == self._mtimes:
            return False
        try:
            rules, mtimes = self._load()
        except ConfigError as exc:
            log.error("ACL files not reloaded, the previous rules stay in force: %s", exc)
            self._mtimes = self._stat()  # report a broken file once, not every interval
            return False
        self._install(rules, mtimes)
        return True

    def _install(self, rules: AclRules, mtimes: dict[str, int]) -> None:
        self.validator.rules = rules
        self._mtimes = mtimes
        self.version += 1
        log.info("ACL rules loaded (version %d): %d account(s), %d global white address pattern(s) from %s",
                 self.version, len(rules.accounts), len(rules.global_white), ", ".join(mtimes))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await trio.sleep(self.reload_interval)
            async with self._lock:
                await trio.to_thread.run_sync(self.reload_if_changed)

    # -- admin RPCs ------------------------------------------------------------------------------------------

    def _rewrite(self, path: Path, doc: dict[str, Any]) -> None:
        """Write one file and put the rules it gives in force at once (raises ConfigError, writing nothing)."""
        current = self.validator.rules
        docs = {p: dict(d) for p, d in current.documents.items()}
        docs[str(path)] = doc
        # check the whole set with the new document before touching the disk
        parse_document(doc, str(path))
        keys: dict[str, str] = {}
        for p, d in docs.items():
            for raw in d.get("accounts") or []:
                key = str(raw.get("accessKey"))
                if key in keys:
                    raise ConfigError(f"accessKey {key!r} is already defined in {keys[key]}", file=str(path))
                keys[key] = p
        path.parent.mkdir(parents=True, exist_ok=True)
        write_yaml(path, doc)
        rules, mtimes = self._load()
        self._install(rules, mtimes)

    def _account_file(self, access_key: str) -> Path:
        account = self.validator.rules.accounts.get(access_key)
        return Path(account.file) if account is not None else self.main_file

    def _document(self, path: Path) -> dict[str, Any]:
        doc = self.validator.rules.documents.get(str(path))
        return {k: v for k, v in (doc or {}).items()}

    async def update_account(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext_fields
        access_key = ext.get("accessKey")
        if not access_key:
            return request.make_response(ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED, "accessKey is missing")
        for name in ("topicPerms", "groupPerms"):
            for entry in _split(ext.get(name)) or []:
                _, eq, perm = entry.partition("=")
                if not eq or perm.strip() not in PERM_NAMES:
                    return request.make_response(
                        ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED,
                        f"{name}: {entry!r} is not name=PERM (PUB, SUB, PUB|SUB or DENY)",
                    )
        for name in ("defaultTopicPerm", "defaultGroupPerm"):
            if ext.get(name) is not None and ext[name].strip() not in PERM_NAMES:
                return request.make_response(
                    ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED, f"{name}: {ext[name]!r} is not PUB, SUB, PUB|SUB or DENY"
                )

        def apply() -> None:
            path = self._account_file(access_key)
            doc = self._document(path)
            accounts = [dict(a) for a in doc.get("accounts") or []]
            existing = next((a for a in accounts if str(a.get("accessKey")) == access_key), None)
            if existing is None:
                existing = {"accessKey": access_key}
                accounts.append(existing)
            for name in ("secretKey", "whiteRemoteAddress", "defaultTopicPerm", "defaultGroupPerm"):
                if ext.get(name) is not None:
                    existing[name] = ext[name]
            if ext.get("admin") is not None:
                existing["admin"] = ext["admin"].strip().lower() == "true"
            for name in ("topicPerms", "groupPerms"):
                if ext.get(name) is not None:
                    existing[name] = _split(ext[name])
            account_from(existing, file=str(path), key=f"accounts[{accounts.index(existing)}]")
            doc["accounts"] = accounts
            self._rewrite(path, doc)

        return await self._admin(request, apply, ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED,
                                 f"account {access_key} created/updated")

    async def delete_account(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        access_key = request.ext_fields.get("accessKey")
        if not access_key or access_key not in self.validator.rules.accounts:
            return request.make_response(ResponseCode.DELETE_ACL_CONFIG_FAILED, f"No acl config for {access_key}")

        def apply() -> None:
            path = self._account_file(access_key)
            doc = self._document(path)
            doc["accounts"] = [dict(a) for a in doc.get("accounts") or [] if str(a.get("accessKey")) != access_key]
            self._rewrite(path, doc)

        return await self._admin(request, apply, ResponseCode.DELETE_ACL_CONFIG_FAILED, f"account {access_key} deleted")

    async def update_white_list(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        addresses = _split(request.ext_fields.get("globalWhiteAddrs")) or []
        target = request.ext_fields.get("aclFileFullPath")
        path = self.main_file
        if target:
            known = {str(p) for p in self.files()} | {str(self.main_file)}
            if target not in known:
                return request.make_response(ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED,
                                             f"{target} is not one of the broker's ACL files ({', '.join(sorted(known))})")
            path = Path(target)

        def apply() -> None:
            doc = self._document(path)
            doc["globalWhiteRemoteAddresses"] = addresses
            self._rewrite(path, doc)

        return await self._admin(request, apply, ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED,
                                 f"global white list of {path} set to {addresses}")

    async def _admin(self, request: RemotingCommand, apply: Any, failed_code: int, done: str) -> RemotingCommand:
        async with self._lock:
            try:
                await trio.to_thread.run_sync(apply)
            except (ConfigError, OSError) as exc:
                log.warning("ACL change refused: %s", exc)
                return request.make_response(failed_code, str(exc))
        log.info("ACL: %s", done)
        return request.make_response(ResponseCode.SUCCESS)

    async def acl_info(self, connection: Any, request: RemotingCommand) -> RemotingCommand:
        rules = self.validator.rules
        body = {
            "globalWhiteAddrs": [p.text for p in rules.global_white],
            "plainAccessConfigs": [a.listing() for a in sorted(rules.accounts.values(), key=lambda a: a.access_key)],
        }
        return request.make_response(
            ResponseCode.SUCCESS,
            ext_fields={
                "version": str(self.version),
                "allAclFileVersion": json.dumps({p: self.version for p in self._mtimes}),
                "brokerName": self.broker_name,
                "brokerAddr": self.broker_addr,
                "clusterName": self.cluster,
            },
            body=json.dumps(body).encode(),
        )


@attrs.frozen
class AclSettings:
    """The broker.conf key that switches access control on (RocketMQ 4.9.8's name)."""

    aclEnable: bool = setting(False, help="check every request against plain_acl.yml (docs/acl.md)")


def _milliseconds(v: int) -> str | None:
    return None if v >= 100 else "a number of milliseconds >= 100"


@attrs.frozen
class AclFileSettings:
    """Where the rules are (``[plugins."pyrmq.plugins.broker.acl"]``)."""

    home: str = setting("", help="RocketMQ home (default $ROCKETMQ_HOME, else ~): rules in <home>/conf")
    file: str = setting("", help="the main rules file (default <home>/conf/plain_acl.yml)")
    dir: str = setting("", help="more rule files, *.yml (default <home>/conf/acl)")
    reloadIntervalMs: int = setting(5000, check=_milliseconds, help="how often changed files are read again")


def _paths(files: AclFileSettings) -> tuple[Path, Path]:
    home = Path(os.path.expanduser(files.home or os.environ.get("ROCKETMQ_HOME") or "~"))
    main = Path(os.path.expanduser(files.file or str(home / "conf" / "plain_acl.yml")))
    directory = Path(os.path.expanduser(files.dir or str(home / "conf" / "acl")))
    return main, directory


@hookimpl(trylast=True)
def pyrmq_register_settings() -> dict[str, type]:
    return {"broker": AclSettings, f"plugins.{PLUGIN}": AclFileSettings}


@hookimpl(trylast=True)
def pyrmq_configure(kernel: Kernel) -> None:
    from pyrmq.plugins.broker.core import BROKER

    ctx = kernel.state.find(BROKER)
    if ctx is None or not kernel.settings(AclSettings).aclEnable:
        return
    files = kernel.settings(AclFileSettings)
    main, directory = _paths(files)
    broker = ctx.settings
    kernel.register(AclService(main, directory, broker_name=broker.brokerName, broker_addr=ctx.registration.broker_addr,
                               cluster=broker.brokerClusterName, reload_interval=files.reloadIntervalMs / 1000),
                    "broker.acl")
