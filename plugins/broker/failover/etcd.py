"""A small trio client for etcd v3 over its JSON gateway (``POST /v3/kv/range`` ...), on h11.

The PyPI etcd clients speak gRPC or asyncio and none runs on trio; the gateway every etcd 3.4+ serves on its client
port takes the same messages as protobuf JSON (bytes as base64, int64 as strings). What pyrmq's failover needs:

- ``get`` / ``range`` (a prefix), ``put`` (optionally bound to a lease), ``delete``;
- ``txn``: compares (``Compare.absent(key)``, ``Compare.value(key, v)``, ``Compare.mod_revision(key, r)`` ...) and
  the puts / deletes / gets run when all hold (``succeeded``) or when one does not;
- leases: ``grant``, ``keepalive_once`` (the gateway's keepalive stream, one request per HTTP call), ``revoke``;
- ``wait_until``: polling a key with a deadline (the gateway's watch is a never-ending HTTP stream; a poll every
  ``interval`` is simpler and bounded).

Every call has a timeout; every error (:class:`EtcdError`) names the operation and the key at fault. Connections are
HTTP/1.1 keep-alive, one request at a time each, pooled.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import h11
import trio

log = logging.getLogger("pyrmq.broker.failover.etcd")


class EtcdError(Exception):
    """An etcd call failed: ``op`` (``put``, ``txn`` ...), ``key`` at fault, and etcd's or the network's message."""

    def __init__(self, op: str, key: str, message: str, code: int | None = None) -> None:
        super().__init__(f"etcd {op} {key!r}: {message}")
        self.op = op
        self.key = key
        self.message = message
        self.code = code


class EtcdUnavailable(EtcdError):
    """etcd did not answer (connection refused or reset, timeout)."""


class LeaseExpired(EtcdError):
    """The lease is gone (expired or revoked): keys bound to it were deleted."""


def _b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def _unb64(data: str | None) -> bytes:
    return base64.b64decode(data) if data else b""


def _prefix_end(prefix: bytes) -> bytes:
    """etcd's range_end for "every key starting with prefix"."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


@attrs.frozen
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int

    @classmethod
    def from_json(cls, kv: dict[str, Any]) -> KeyValue:
        return cls(
            key=_unb64(kv.get("key")).decode(),
            value=_unb64(kv.get("value")),
            create_revision=int(kv.get("create_revision", 0)),
            mod_revision=int(kv.get("mod_revision", 0)),
            version=int(kv.get("version", 0)),
            lease=int(kv.get("lease", 0)),
        )

    def json(self) -> Any:
        return json.loads(self.value)


@attrs.frozen
class Compare:
    """One txn compare (``result`` EQUAL / GREATER / LESS / NOT_EQUAL on ``target`` VERSION / CREATE / MOD / VALUE)."""

    key: str
    target: str
    result: str
    operand: Any

    @classmethod
    def absent(cls, key: str) -> Compare:
        return cls(key, "VERSION", "EQUAL", 0)

    @classmethod
    def value(cls, key: str, value: str | bytes) -> Compare:
        return cls(key, "VALUE", "EQUAL", value)

    @classmethod
    def mod_revision(cls, key: str, revision: int) -> Compare:
        return cls(key, "MOD", "EQUAL", revision)

    @classmethod
    def version(cls, key: str, version: int, result: str = "EQUAL") -> Compare:
        return cls(key, "VERSION", result, version)

    def to_json(self) -> dict[str, Any]:
        field = {"VERSION": "version", "CREATE": "create_revision", "MOD": "mod_revision", "VALUE": "value"}[self.target]
        operand = _b64(self.operand) if self.target == "VALUE" else str(int(self.operand))
        return {"key": _b64(self.key), "target": self.target, "result": self.result, field: operand}


def put_op(key: str, value: str | bytes, lease: int = 0) -> dict[str, Any]:
    body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
    if lease:
        body["lease"] = str(lease)
    return {"request_put": body}


def delete_op(key: str) -> dict[str, Any]:
    return {"request_delete_range": {"key": _b64(key)}}


def get_op(key: str, *, prefix: bool = False) -> dict[str, Any]:
    body = {"key": _b64(key)}
    if prefix:
        body["range_end"] = _b64(_prefix_end(key.encode()))
    return {"request_range": body}


@attrs.frozen
class TxnResult:
    succeeded: bool
    revision: int
    #: per op of the branch that ran, the key-values of its gets (empty for puts and deletes)
    responses: list[list[KeyValue]]


class _Connection:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT)

    async def request(self, host: str, path: str, body: bytes) -> tuple[int, bytes]:
        conn = self.h11
        headers = [("Host", host), ("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        await self.stream.send_all(
            conn.send(h11.Request(method="POST", target=path, headers=headers))
            + conn.send(h11.Data(data=body))
            + conn.send(h11.EndOfMessage())
        )
        status = 0
        chunks: list[bytes] = []
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await self.stream.receive_some(65536)
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise trio.BrokenResourceError("etcd closed the connection")
        conn.start_next_cycle()
        return status, b"".join(chunks)


class EtcdClient:
    """``async with EtcdClient(["127.0.0.1:23790"]) as etcd: await etcd.put("k", "v")``.

    ``endpoints`` are tried in order (the next one after a connection failure); ``timeout`` bounds each call.
    """

    def __init__(self, endpoints: Iterable[str], *, timeout: float = 2.0) -> None:
        self.endpoints = [e.removeprefix("http://").rstrip("/") for e in endpoints]
        if not self.endpoints:
            raise ValueError("etcd client needs at least one endpoint (host:port)")
        self.timeout = timeout
        self._current = 0
        self._idle: list[tuple[str, _Connection]] = []

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for _, connection in idle:
            await connection.stream.aclose()

    # -- transport -------------------------------------------------------------------------------------------

    async def _call(self, op: str, key: str, path: str, payload: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        body = json.dumps(payload).encode()
        last = ""
        attempts = len(self.endpoints)
        while attempts:
            attempts -= 1
            endpoint = self.endpoints[self._current]
            connection = None
            while self._idle:
                where, candidate = self._idle.pop()
                if where == endpoint:
                    connection = candidate
                    break
                await candidate.stream.aclose()
            reused = connection is not None
            try:
                with trio.fail_after(timeout or self.timeout):
                    if connection is None:
                        host, _, port = endpoint.rpartition(":")
                        connection = _Connection(await trio.open_tcp_stream(host, int(port)))
                    status, data = await connection.request(endpoint, path, body)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError, trio.TooSlowError) as exc:
                if connection is not None:
                    await connection.stream.aclose()
                last = f"{endpoint}: {type(exc).__name__} {exc}".rstrip()
                if reused and not isinstance(exc, trio.TooSlowError):
                    # a kept-alive connection the server closed meanwhile (etcd restarted): once more, afresh
                    self._drop_idle(endpoint)
                    attempts += 1
                    continue
                self._current = (self._current + 1) % len(self.endpoints)
                continue
            self._idle.append((endpoint, connection))
            try:
                answer = json.loads(data) if data else {}
            except ValueError:
                raise EtcdError(op, key, f"HTTP {status}, not JSON: {data[:200]!r}") from None
            if status != 200 or "error" in answer:
                message = answer.get("message") or answer.get("error") or f"HTTP {status}"
                code = answer.get("code")
                if "lease not found" in str(message):
                    raise LeaseExpired(op, key, message, code)
                raise EtcdError(op, key, message, code)
            return answer
        raise EtcdUnavailable(op, key, f"no etcd endpoint answered ({last})")

    def _drop_idle(self, endpoint: str) -> None:
        stale = [c for where, c in self._idle if where == endpoint]
        self._idle = [(where, c) for where, c in self._idle if where != endpoint]
        for connection in stale:
            connection.stream.socket.close()

    # -- key-value -------------------------------------------------------------------------------------------

    async def get(self, key: str) -> KeyValue | None:
        answer = await self._call("get", key, "/v3/kv/range", {"key": _b64(key)})
        kvs = answer.get("kvs") or []
        return KeyValue.from_json(kvs[0]) if kvs else None

    async def range(self, prefix: str, *, start: str | None = None) -> list[KeyValue]:
        """Every key starting with ``prefix``, in key order (from ``start`` on, when given: a key >= start)."""
        payload = {"key": _b64(start or prefix), "range_end": _b64(_prefix_end(prefix.encode()))}
        answer = await self._call("range", prefix, "/v3/kv/range", payload)
        return [KeyValue.from_json(kv) for kv in answer.get("kvs") or []]

    async def put(self, key: str, value: str | bytes, *, lease: int = 0) -> int:
        """Returns the revision of the write."""
        answer = await self._call("put", key, "/v3/kv/put", put_op(key, value, lease)["request_put"])
        return int(answer["header"]["revision"])

    async def delete(self, key: str, *, prefix: bool = False) -> int:
        """Returns how many keys were deleted."""
        payload = {"key": _b64(key)}
        if prefix:
            payload["range_end"] = _b64(_prefix_end(key.encode()))
        answer = await self._call("delete", key, "/v3/kv/deleterange", payload)
        return int(answer.get("deleted", 0))

    async def txn(self, compare: Sequence[Compare], success: Sequence[dict[str, Any]],
                  failure: Sequence[dict[str, Any]] = ()) -> TxnResult:
        keys = ",".join(c.key for c in compare) or ",".join(
            _unb64(next(iter(op.values()))["key"]).decode() for op in success
        )
        payload = {"compare": [c.to_json() for c in compare], "success": list(success), "failure": list(failure)}
        answer = await self._call("txn", keys, "/v3/kv/txn", payload)
        responses = []
        for response in answer.get("responses") or []:
            ranged = response.get("response_range")
            responses.append([KeyValue.from_json(kv) for kv in (ranged or {}).get("kvs") or []])
        return TxnResult(bool(answer.get("succeeded", False)), int(answer["header"]["revision"]), responses)

    # -- leases ----------------------------------------------------------------------------------------------

    async def grant(self, ttl: int) -> int:
        """A new lease of ``ttl`` seconds; returns its id."""
        answer = await self._call("lease grant", f"ttl={ttl}", "/v3/lease/grant", {"TTL": str(int(ttl))})
        return int(answer["ID"])

    async def keepalive_once(self, lease: int) -> int:
        """Refresh the lease; returns its TTL. :class:`LeaseExpired` when etcd no longer has it."""
        answer = await self._call("lease keepalive", f"lease={lease:x}", "/v3/lease/keepalive", {"ID": str(lease)})
        ttl = int((answer.get("result") or {}).get("TTL", 0))
        if ttl <= 0:
            raise LeaseExpired("lease keepalive", f"lease={lease:x}", "lease expired or revoked")
        return ttl

    async def revoke(self, lease: int) -> None:
        await self._call("lease revoke", f"lease={lease:x}", "/v3/lease/revoke", {"ID": str(lease)})

    async def time_to_live(self, lease: int) -> int:
        """Seconds left on the lease, -1 when it is gone."""
        answer = await self._call("lease ttl", f"lease={lease:x}", "/v3/lease/timetolive", {"ID": str(lease)})
        return int(answer.get("TTL", -1))

    # -- waiting ---------------------------------------------------------------------------------------------

    async def wait_until(self, key: str, predicate: Any, *, timeout: float, interval: float = 0.1) -> KeyValue | None:
        """Poll ``key`` until ``predicate(kv_or_None)`` is true; returns that value. :class:`EtcdError` (naming the
        key) after ``timeout`` seconds."""
        with trio.move_on_after(timeout):
            while True:
                try:
                    kv = await self.get(key)
                except EtcdUnavailable:
                    pass  # etcd not answering: not a value the predicate decides on
                else:
                    if predicate(kv):
                        return kv
                await trio.sleep(interval)
        raise EtcdError("wait", key, f"condition not met within {timeout} s")
