"""One TCP connection speaking the remoting protocol, shared by the server and the client (spec 1.5).

Both ends of a RocketMQ connection can be requester: the broker sends CHECK_TRANSACTION_STATE and
NOTIFY_CONSUMER_IDS_CHANGED to a client over the client's own socket. So one class does both jobs: a reader task
that parses many frames per receive, runs the processor of each request inline and matches responses to pending
invokes by opaque; and a writer that batches whatever was queued while the previous send was in progress.

Processor execution model
-------------------------
``processor(conn, request)`` is awaited inline in the connection's reader task, one request at a time, in arrival
order (so the requests of one connection are processed in order, like an ordered producer expects).

* It must not block the thread (no file IO, no fsync: use ``trio.to_thread``); it may await briefly (a lock, a
  store append). While it awaits, this connection reads nothing more; other connections are unaffected.
* Return a ``RemotingCommand`` to answer now (opaque, response flag and serialize type are set for you), or
  ``None`` to answer later from another task with ``await conn.send_response(response)`` (long polling, group
  commit). ``conn.start_soon(fn, *args)`` spawns such a task in the server's nursery.
* A oneway request never gets a response, whatever the processor returns or raises.
* Raising answers SYSTEM_ERROR (1) with the exception text.

Responses produced for one received chunk go out in one send. A request answered later counts as "in flight"
until ``send_response``; at ``max_in_flight`` the reader stops reading (TCP backpressure) and requests already
received beyond the bound are answered SYSTEM_BUSY ``[OVERLOAD]``.

Writing: there is no writer task. The first task with something to send becomes the writer and keeps sending until
the queue is empty; tasks that queue meanwhile return at once (their frames ride in the writer's next send). A
cancelled writer hands the unsent rest to a background task, so a frame is never cut in half.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket as _stdlib_socket
from collections.abc import Awaitable, Callable
from typing import Any, Optional

import outcome
import trio
from trio.lowlevel import Abort, current_task, reschedule, wait_task_rescheduled

from .codes import RPC_ONEWAY, RPC_RESPONSE
from .command import RemotingCommand, next_opaque
from .errors import ProtocolError, RemotingClosed, RemotingTimeout
from .framing import FrameDecoder

__all__ = ["Connection", "Processor", "RECV_SIZE"]

log = logging.getLogger("pyrmq.remoting")

Processor = Callable[["Connection", RemotingCommand], Awaitable[Optional[RemotingCommand]]]

RECV_SIZE = 256 * 1024  # read big chunks: a receive per frame costs ~10x in trio (PERFORMANCE.md)
HIGH_WATER = 4 * 1024 * 1024  # queued output beyond which senders wait for the writer to drain
MID_BATCH_FLUSH = 256 * 1024  # responses queued within one batch beyond which we flush before continuing
try:
    IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024)
except (AttributeError, ValueError, OSError):  # pragma: no cover - non-POSIX
    IOV_MAX = 16
_HAS_SENDMSG = hasattr(_stdlib_socket.socket, "sendmsg")

_OVERLOAD_REMARK = "[OVERLOAD]system busy, start flow control for a while"
_conn_ids = itertools.count(1)


def _nbytes(buf: Any) -> int:
    return buf.nbytes if type(buf) is memoryview else len(buf)


def _exception_text(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Waiter:
    """A pending invoke: the reader hands it the response (or an error) and reschedules the parked task.

    Cheaper than a trio.Event on the hot path; the response may arrive before the invoker parks.
    """

    __slots__ = ("task", "result")

    def __init__(self) -> None:
        self.task: Any = None
        self.result: outcome.Outcome | None = None

    def deliver(self, result: outcome.Outcome) -> None:
        task = self.task
        if task is not None:
            self.task = None
            reschedule(task, result)
        elif self.result is None:
            self.result = result

    async def wait(self) -> RemotingCommand:
        if self.result is not None:
            return self.result.unwrap()
        self.task = current_task()

        def abort(raise_cancel: Any) -> Abort:
            self.task = None
            return Abort.SUCCEEDED

        return await wait_task_rescheduled(abort)


class Connection:
    """One accepted or opened socket. Also the "channel" broker features keep for a client.

    Public: ``id``, ``remote_address``, ``local_address``, ``address`` (``"host:port"`` of the peer),
    ``attributes`` (a dict for features: client id, group ...), ``closed``, ``last_activity`` (trio clock),
    ``in_flight``; ``send_response``, ``invoke``, ``invoke_oneway``, ``start_soon``, ``close``, ``aclose``.
    """

    def __init__(
        self,
        sock: trio.socket.SocketType,
        owner: Any,
        nursery: trio.Nursery,
        *,
        server_side: bool,
        max_in_flight: int = 4096,
        respond_unknown_code: bool = True,
        max_frame_size: int | None = None,
        on_close: Callable[[Connection], None] | None = None,
    ) -> None:
        self.id = next(_conn_ids)
        self._sock = sock
        self._owner = owner
        self._nursery = nursery
        self.server_side = server_side
        self.max_in_flight = max_in_flight
        self.respond_unknown_code = respond_unknown_code
        self._on_close = on_close
        self._decoder = FrameDecoder() if max_frame_size is None else FrameDecoder(max_frame_size)
        try:
            self.remote_address: tuple[str, int] = tuple(sock.getpeername()[:2])  # type: ignore[assignment]
        except OSError:
            self.remote_address = ("?", 0)
        self.local_address: tuple[str, int] = tuple(sock.getsockname()[:2])  # type: ignore[assignment]
        self.address = f"{self.remote_address[0]}:{self.remote_address[1]}"
        self.attributes: dict[str, Any] = {}
        self.closed = False
        self.close_reason: str | None = None
        self.last_activity = trio.current_time()
        self._pending: dict[int, _Waiter] = {}
        self._deferred: set[int] = set()
        self._out: list = []
        self._out_bytes = 0
        self._writing = False
        self._room: trio.Event | None = None  # set when in_flight drops below max_in_flight
        self._drained: trio.Event | None = None  # set when the output queue empties

    def __repr__(self) -> str:
        side = "server" if self.server_side else "client"
        state = " closed" if self.closed else ""
        return f"<Connection #{self.id} {side} {self.address}{state}>"

    @property
    def in_flight(self) -> int:
        """Requests received on this connection whose processor returned None and that are not answered yet."""
        return len(self._deferred)

    @property
    def pending_invokes(self) -> int:
        return len(self._pending)

    # ---- reader -----------------------------------------------------------------------------------------------

    async def serve(self) -> None:
        """The reader loop; returns when the connection closes. Never raises (except trio.Cancelled)."""
        reason = "closed by peer"
        recv = self._sock.recv
        feed = self._decoder.feed
        pending = self._pending
        deferred = self._deferred
        try:
            while True:
                if len(deferred) >= self.max_in_flight:
                    await self._wait_for_room()
                    if self.closed:
                        break
                data = await recv(RECV_SIZE)
                if not data:
                    break
                self.last_activity = trio.current_time()
                cmds = feed(data)
                if not cmds:
                    continue
                processors = self._owner.processors
                for cmd in cmds:
                    flag = cmd.flag
                    if flag & RPC_RESPONSE:
                        waiter = pending.pop(cmd.opaque, None)
                        if waiter is not None:
                            waiter.deliver(outcome.Value(cmd))
                        continue
                    proc = processors.get(cmd.code)
                    if proc is None:
                        if flag & RPC_ONEWAY or not self.respond_unknown_code:
                            continue
                        resp = cmd.make_response(3, f" request type {cmd.code} not supported")
                    elif len(deferred) >= self.max_in_flight and not flag & RPC_ONEWAY:
                        resp = cmd.make_response(2, _OVERLOAD_REMARK)
                    else:
                        try:
                            resp = await proc(self, cmd)
                        except Exception as exc:
                            log.warning("processor for code %s from %s failed", cmd.code, self.address,
                                        exc_info=True)
                            resp = None if flag & RPC_ONEWAY else cmd.make_response(1, _exception_text(exc))
                        if flag & RPC_ONEWAY:
                            continue
                        if resp is None:
                            deferred.add(cmd.opaque)
                            continue
                    if self.closed:
                        break
                    self._queue_response(resp, cmd)
                    if self._out_bytes > MID_BATCH_FLUSH and not self._writing:
                        await self._flush()
                if self._out and not self._writing:
                    await self._flush()
                if self.closed:
                    break
        except ProtocolError as exc:
            reason = f"protocol error: {exc}"
            log.warning("closing connection from %s: %s", self.address, exc)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            reason = f"socket error: {exc!r}"
        finally:
            self._teardown(reason)

    def _queue_response(self, resp: RemotingCommand, request: RemotingCommand) -> None:
        # A processor may hand back a shared, precomputed response: it is encoded right here, so fixing up
        # its opaque/flag/serialize type in place is safe.
        resp.opaque = request.opaque
        resp.flag |= RPC_RESPONSE
        resp.serialize_type = request.serialize_type
        try:
            self._out_bytes += resp.encode_into(self._out)
        except Exception as exc:
            log.warning("cannot encode response to code %s for %s: %s", request.code, self.address, exc)
            err = request.make_response(1, f"cannot encode response: {exc}")
            self._out_bytes += err.encode_into(self._out)

    async def _wait_for_room(self) -> None:
        self._room = trio.Event()
        await self._room.wait()

    # ---- writer -----------------------------------------------------------------------------------------------

    async def _flush(self) -> None:
        """Send everything queued; the caller must have checked ``not self._writing``."""
        self._writing = True
        sock = self._sock
        try:
            while self._out:
                bufs = self._out
                self._out = []
                self._out_bytes = 0
                while bufs:
                    try:
                        if len(bufs) == 1:
                            sent = await sock.send(bufs[0])
                        elif _HAS_SENDMSG:
                            sent = await sock.sendmsg(bufs[:IOV_MAX])
                        else:  # pragma: no cover
                            sent = await sock.send(b"".join(bufs))
                    except trio.Cancelled:
                        # Nothing of this call went out; keep the rest in order and let a background task send
                        # it, so no frame is left half-written.
                        self._out[:0] = bufs
                        self._out_bytes += sum(map(_nbytes, bufs))
                        self._writing = False
                        if not self.closed:
                            self._nursery.start_soon(self._background_flush)
                        raise
                    i = 0
                    while sent:
                        n = _nbytes(bufs[i])
                        if sent >= n:
                            sent -= n
                            i += 1
                        else:
                            bufs[i] = memoryview(bufs[i])[sent:]
                            sent = 0
                    if i:
                        del bufs[:i]
            self.last_activity = trio.current_time()
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._teardown(f"send failed: {exc!r}")
        finally:
            self._writing = False
            if self._drained is not None and (not self._out or self.closed):
                self._drained.set()
                self._drained = None

    async def _background_flush(self) -> None:
        if not self._writing and self._out and not self.closed:
            await self._flush()

    async def _send_queued(self) -> None:
        if not self._writing:
            await self._flush()
        elif self._out_bytes > HIGH_WATER:
            if self._drained is None:
                self._drained = trio.Event()
            await self._drained.wait()

    # ---- public API -------------------------------------------------------------------------------------------

    async def send_response(self, response: RemotingCommand) -> bool:
        """Send a response decided later (the processor returned None). False if the connection is closed.

        ``response.opaque`` must be the request's (``request.make_response`` does that).
        """
        deferred = self._deferred
        deferred.discard(response.opaque)
        room = self._room
        if room is not None and len(deferred) < self.max_in_flight:
            self._room = None
            room.set()
        if self.closed:
            return False
        response.flag |= RPC_RESPONSE
        self._out_bytes += response.encode_into(self._out)
        await self._send_queued()
        return not self.closed

    def forget(self, request: RemotingCommand) -> None:
        """Give up answering a request whose processor returned None (frees its in-flight slot)."""
        self._deferred.discard(request.opaque)
        room = self._room
        if room is not None and len(self._deferred) < self.max_in_flight:
            self._room = None
            room.set()

    async def invoke(self, request: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        """Send a request over this connection and await its response (any response code).

        Raises RemotingTimeout after ``timeout`` seconds, RemotingClosed if the connection closes first.
        Requests the server initiates are always JSON-serialised (cpp and ali-ons parse nothing else, spec 1.5).
        """
        if self.closed:
            raise RemotingClosed(self.address)
        if self.server_side:
            request.serialize_type = 0
        request.flag &= ~RPC_RESPONSE
        pending = self._pending
        opaque = request.opaque
        while opaque in pending:
            request.opaque = opaque = next_opaque()
        waiter = _Waiter()
        pending[opaque] = waiter
        try:
            if timeout is None:
                self._out_bytes += request.encode_into(self._out)
                await self._send_queued()
                return await waiter.wait()
            with trio.move_on_after(timeout):
                self._out_bytes += request.encode_into(self._out)
                await self._send_queued()
                return await waiter.wait()
            raise RemotingTimeout(self.address, timeout, request.code)
        finally:
            if pending.get(opaque) is waiter:
                del pending[opaque]

    async def invoke_oneway(self, request: RemotingCommand) -> None:
        """Send a request flagged oneway; no response is expected. Returns once the frame is queued/sent."""
        if self.closed:
            raise RemotingClosed(self.address)
        if self.server_side:
            request.serialize_type = 0
        request.flag = (request.flag | RPC_ONEWAY) & ~RPC_RESPONSE
        self._out_bytes += request.encode_into(self._out)
        await self._send_queued()
        if self.closed:
            raise RemotingClosed(self.address)

    def invoke_callback(
        self, request: RemotingCommand, callback: Callable[[outcome.Outcome], None]
    ) -> None:
        """Queue a request whose response is handed to ``callback(outcome)`` in the reader task.

        The low-level, task-free way to keep many requests in flight from one task (Java's invokeAsync);
        ``callback`` gets ``outcome.Value(response)`` or ``outcome.Error(RemotingClosed)`` and must not block.
        The frame is sent by the next ``flush()`` (or any other send on this connection). No timeout here:
        callers that need one keep their own deadline and call ``cancel_callback``.
        """
        if self.closed:
            callback(outcome.Error(RemotingClosed(self.address)))
            return
        if self.server_side:
            request.serialize_type = 0
        request.flag &= ~RPC_RESPONSE
        pending = self._pending
        opaque = request.opaque
        while opaque in pending:
            request.opaque = opaque = next_opaque()
        pending[opaque] = _CallbackWaiter(callback)  # type: ignore[assignment]
        self._out_bytes += request.encode_into(self._out)

    def cancel_callback(self, opaque: int) -> bool:
        return self._pending.pop(opaque, None) is not None

    async def flush(self) -> None:
        """Send whatever is queued (used after ``invoke_callback``)."""
        if self._out and not self._writing:
            await self._flush()

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run ``fn(*args)`` in the owner's nursery (for processors that answer later). ``fn`` must not raise."""
        self._nursery.start_soon(fn, *args)

    def close(self, reason: str = "closed locally") -> None:
        """Close now: pending invokes fail with RemotingClosed, queued output is dropped, on_close runs."""
        self._teardown(reason)

    async def aclose(self, timeout: float = 1.0) -> None:
        """Send what is queued (for at most ``timeout`` seconds), then close."""
        if not self.closed and self._out:
            with trio.move_on_after(timeout):
                while self._writing:
                    await trio.sleep(0)
                if self._out and not self.closed:
                    await self._flush()
        self._teardown("closed locally")
        await trio.lowlevel.checkpoint()

    def _teardown(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason
        self._sock.close()
        pending = list(self._pending.values())
        self._pending.clear()
        for waiter in pending:
            waiter.deliver(outcome.Error(RemotingClosed(self.address, f"connection closed ({reason})")))
        self._deferred.clear()
        self._out = []
        self._out_bytes = 0
        for ev in (self._room, self._drained):
            if ev is not None:
                ev.set()
        self._room = self._drained = None
        if self._on_close is not None:
            try:
                self._on_close(self)
            except Exception:
                log.exception("on_close callback failed for %s", self)


class _CallbackWaiter:
    __slots__ = ("callback",)

    def __init__(self, callback: Callable[[outcome.Outcome], None]) -> None:
        self.callback = callback

    def deliver(self, result: outcome.Outcome) -> None:
        try:
            self.callback(result)
        except Exception:
            log.exception("invoke callback failed")
