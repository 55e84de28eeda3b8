"""One TCP connection speaking the remoting protocol, shared by the server and the client (spec 1.5).

Both ends of a RocketMQ connection can be requester: the broker sends CHECK_TRANSACTION_STATE and
NOTIFY_CONSUMER_IDS_CHANGED to a client over the client's own socket. So one class does both jobs: a reader task
that parses many frames per receive, runs the processor of each request inline and matches responses to pending
invokes by opaque; and a writer that batches whatever was queued.

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
* Raising answers SYSTEM_ERROR (1) with the exception text (a ``HeaderError``: its text alone, which names the
  field and what was expected).
* When the owner has a ``request_timer`` (the server's, set by the metrics plugin at start), it is called after each
  processor with ``(request, response or None, elapsed ns)``: one ``monotonic_ns`` pair per request, nothing else.

Responses produced for one received chunk go out together (a send per ``FLUSH_EVERY`` responses, so that the
peer can start on the first ones while we work on the rest). A request answered later counts as "in flight"
until ``send_response``; at ``max_in_flight`` the reader stops reading (TCP backpressure) and requests already
received beyond the bound are answered SYSTEM_BUSY ``[OVERLOAD]``.

IO: the socket is a plain non-blocking socket driven with ``trio.lowlevel.wait_readable/wait_writable``; a send
that the kernel accepts at once costs no trip through the scheduler. A lone invoke writes its frame at once;
while other invokes are outstanding, frames are queued and one flusher task per connection sends them in one
``sendmsg`` after the currently runnable tasks have queued theirs. Timeouts of pending invokes are enforced by
one timer task per connection (the earliest deadline), not by a cancel scope per call.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import socket as _stdlib_socket
from collections.abc import Awaitable, Callable, Mapping
from time import monotonic_ns as _monotonic_ns
from typing import Optional, Protocol, TypeVarTuple, Unpack, cast

import outcome
import trio
from trio.lowlevel import (
    Abort,
    RaiseCancelT,
    Task,
    checkpoint_if_cancelled,
    current_task,
    notify_closing,
    reschedule,
    wait_readable,
    wait_task_rescheduled,
    wait_writable,
)

from .codes import RPC_ONEWAY, RPC_RESPONSE
from .command import Buffer, RemotingCommand, next_opaque
from .errors import HeaderError, ProtocolError, RemotingClosed, RemotingTimeout
from .framing import FrameDecoder

__all__ = ["Connection", "ConnectionOwner", "Processor", "RECV_SIZE"]

log = logging.getLogger("pyrmq.remoting")

Processor = Callable[["Connection", RemotingCommand], Awaitable[Optional[RemotingCommand]]]
#: what an invoke's waiter is handed: the response, or the error (timeout, connection closed) the invoke raises
InvokeOutcome = outcome.Outcome[RemotingCommand]

_Ts = TypeVarTuple("_Ts")


class ConnectionOwner(Protocol):
    """The server or client a connection belongs to: its processor table, read per received chunk (the owner may
    swap it for a new mapping at any time). An optional ``request_timer`` attribute (the server's) is looked up
    per chunk too."""

    @property
    def processors(self) -> Mapping[int, Processor]: ...


RECV_SIZE = 256 * 1024  # read big chunks: a receive per frame costs ~10x in trio (docs/performance.md, The machine)
HIGH_WATER = 4 * 1024 * 1024  # queued output beyond which senders wait for the writer to drain
FLUSH_EVERY = 8  # responses queued within one received chunk before we send them (overlap with the peer)
FLUSH_BYTES = 256 * 1024
try:
    IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024)
except (AttributeError, ValueError, OSError):  # pragma: no cover - non-POSIX
    IOV_MAX = 16

#: how often a reader that lent its socket to invoking tasks looks whether they still use it (see ``_lend_socket``)
LEND_CHECK = 0.05
#: a lent socket quiet for longer is read before it is used again (``poll_closed``)
LEND_PEEK = 0.001
_OVERLOAD_REMARK = "[OVERLOAD]system busy, start flow control for a while"
_SOCKET_ERRORS = (OSError, trio.BrokenResourceError, trio.ClosedResourceError)
_conn_ids = itertools.count(1)
_INF = math.inf


def _nbytes(buf: Buffer) -> int:
    return buf.nbytes if type(buf) is memoryview else len(buf)


def _exception_text(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, HeaderError):  # "the custom field <queueId> is null": names the field, as Java's remark
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Waiter:
    """A pending invoke: the reader (or the timer) hands it an outcome and reschedules the parked task.

    Cheaper than a trio.Event on the hot path; the outcome may arrive before the invoker parks.
    """

    __slots__ = ("task", "result", "deadline", "timeout", "code")

    def __init__(self, deadline: float, timeout: float | None, code: int) -> None:
        self.task: Task | None = None
        self.result: InvokeOutcome | None = None
        self.deadline = deadline
        self.timeout = timeout
        self.code = code

    def deliver(self, result: InvokeOutcome) -> None:
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

        def abort(raise_cancel: RaiseCancelT) -> Abort:
            self.task = None
            return Abort.SUCCEEDED

        response: RemotingCommand = await wait_task_rescheduled(abort)  # deliver() reschedules with an InvokeOutcome
        return response


class _CallbackWaiter:
    __slots__ = ("callback",)
    deadline = _INF

    def __init__(self, callback: Callable[[InvokeOutcome], None]) -> None:
        self.callback = callback

    def deliver(self, result: InvokeOutcome) -> None:
        try:
            self.callback(result)
        except Exception:
            log.exception("invoke callback failed")


class Connection:
    """One accepted or opened socket. Also the "channel" broker features keep for a client.

    Public: ``id``, ``remote_address``, ``local_address``, ``address`` (``"host:port"`` of the peer),
    ``attributes`` (a dict for features: client id, group ...), ``closed``, ``close_reason``, ``last_activity``
    (trio clock), ``in_flight``; ``send_response``, ``invoke``, ``invoke_oneway``, ``start_soon``, ``close``,
    ``aclose``. ``sock`` is a connected plain socket in non-blocking mode; the connection owns it.
    """

    def __init__(
        self,
        sock: _stdlib_socket.socket,
        owner: ConnectionOwner,
        nursery: trio.Nursery,
        *,
        server_side: bool,
        max_in_flight: int = 4096,
        respond_unknown_code: bool = True,
        max_frame_size: int | None = None,
        on_close: Callable[[Connection], None] | None = None,
    ) -> None:
        sock.setblocking(False)
        self.id = next(_conn_ids)
        self._sock = sock
        self._owner = owner
        self._nursery = nursery
        self.server_side = server_side
        self.max_in_flight = max_in_flight
        self.respond_unknown_code = respond_unknown_code
        self._on_close = on_close
        #: ``signer(request)`` adds credentials to every request this end sends (ACL; set by RemotingClient)
        self.signer: Callable[[RemotingCommand], None] | None = None
        self._decoder = FrameDecoder() if max_frame_size is None else FrameDecoder(max_frame_size)
        self.remote_address: tuple[str, int] = tuple(sock.getpeername()[:2])
        self.local_address: tuple[str, int] = tuple(sock.getsockname()[:2])
        self.address = f"{self.remote_address[0]}:{self.remote_address[1]}"
        self.attributes: dict[str, object] = {}
        self.closed = False
        self.close_reason: str | None = None
        self.last_activity = trio.current_time()
        self._pending: dict[int, _Waiter | _CallbackWaiter] = {}
        self._deferred: set[int] = set()
        self._out: list[Buffer] = []
        self._out_bytes = 0
        self._writing = False
        self._flusher: Task | None = None  # the parked flusher task, if any
        self._flusher_started = False
        self._timer_scope: trio.CancelScope | None = None
        self._timer_started = False
        self._room: trio.Event | None = None  # set when in_flight drops below max_in_flight
        self._drained: trio.Event | None = None  # set when the output queue empties
        # Who reads the socket (client side): the reader task, or a lone invoke reading its own answer while the
        # reader is parked (``_lend_socket``). _lent: the reader may lend it; _parked: the parked reader.
        self._lent = False
        self._lend_next = False  # a lone sync invoke was seen: lend the socket once the reader is idle again
        self._lend_count = 0  # invokes that read their own answer (the parked reader's sign of use)
        self._parked: Task | None = None
        self._reading: Task | None = None  # the invoking task reading, while lent
        self._reading_waiter: _Waiter | None = None  # its waiter
        self._backlog: list[RemotingCommand] = []  # requests read by an invoking task, for the reader
        self._backlog_done: trio.Event | None = None  # set once the reader has processed the backlog
        self._peeked = 0.0  # when poll_closed last found nothing to read
        self._now = trio.lowlevel.current_clock().current_time  # trio.current_time without its two wrappers

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
        sock = self._sock
        recv = sock.recv
        feed = self._decoder.feed
        pending = self._pending
        deferred = self._deferred
        waited = True
        resp: RemotingCommand | None  # None: answered later (send_response), or a oneway request
        try:
            while True:
                if len(deferred) >= self.max_in_flight:
                    await self._wait_for_room()
                    if self.closed:
                        break
                if self._backlog:  # requests an invoking task read while the socket was lent (client side)
                    cmds, self._backlog = self._backlog, []
                else:
                    try:
                        data = recv(RECV_SIZE)
                    except BlockingIOError:
                        if self._lend_next and not pending:
                            await self._lend_socket()
                            if self.closed:
                                break
                        else:
                            await wait_readable(sock)
                        waited = True
                        continue
                    if not data:
                        break
                    cmds = feed(data)
                self.last_activity = trio.current_time()
                queued = 0
                processors = self._owner.processors
                timing = getattr(self._owner, "request_timer", None)  # None unless metrics time requests
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
                        began = _monotonic_ns() if timing is not None else 0
                        try:
                            resp = await proc(self, cmd)
                        except Exception as exc:
                            log.warning("processor for code %s from %s failed", cmd.code, self.address,
                                        exc_info=True)
                            resp = None if flag & RPC_ONEWAY else cmd.make_response(1, _exception_text(exc))
                        if timing is not None:
                            timing(cmd, resp, _monotonic_ns() - began)
                        if flag & RPC_ONEWAY:
                            continue
                        if resp is None:
                            deferred.add(cmd.opaque)
                            continue
                        if self.closed:
                            break
                    self._queue_response(resp, cmd)
                    queued += 1
                    if (queued >= FLUSH_EVERY or self._out_bytes > FLUSH_BYTES) and not self._writing:
                        queued = 0
                        await self._flush()
                if self._out and not self._writing:
                    await self._flush()
                done = self._backlog_done
                if done is not None and not self._backlog:  # an invoker waits until the peer's requests are handled
                    self._backlog_done = None
                    done.set()
                if self.closed:
                    break
                if not waited:
                    # Data kept arriving without a wait: give other tasks their turn (and a chance to cancel us).
                    await trio.lowlevel.checkpoint()
                waited = False
        except ProtocolError as exc:
            reason = f"protocol error: {exc}"
            log.warning("closing connection from %s: %s", self.address, exc)
        except _SOCKET_ERRORS as exc:
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
            err.serialize_type = 0
            self._out_bytes += err.encode_into(self._out)

    def _encode_request(self, request: RemotingCommand) -> None:
        # the one place an outgoing request is signed (invoke, invoke_oneway, invoke_callback)
        if self.signer is not None:
            request.ext_json = None  # the signer adds members: the header is written from ext_fields
            self.signer(request)
        self._out_bytes += request.encode_into(self._out)

    async def _wait_for_room(self) -> None:
        self._room = trio.Event()
        await self._room.wait()

    # ---- the socket lent to a lone invoke (client side) -------------------------------------------------------
    #
    # A sync invoke with nothing else pending reads its own answer: it waits for readability and parses the frame
    # itself, instead of parking while the reader task wakes, parses and reschedules it (two task switches and two
    # scheduler passes a round trip). trio lets one task at a time wait for a socket's readability, so the reader
    # lends the socket: once it saw a lone invoke and finds nothing pending and nothing to read, it parks on a plain
    # wait_task_rescheduled (``_lend_socket``). While lent, an invoke alone on the connection takes the socket
    # (``_invoke_reading``) and gives it back by a flag when answered: nothing per call. The reader takes the socket
    # back when woken (``_wake_reader``: a callback invoke, a second invoke, requests the invoker read, close) or
    # when its LEND_CHECK timer finds that no invoke used the socket since the last check, so requests the peer
    # sends (CHECK_TRANSACTION_STATE ...) are read within 2 * LEND_CHECK when no invoke runs; while one runs, the
    # invoker hands them to the reader at once.

    async def _lend_socket(self) -> None:
        """The reader's side: park while invokes read their own answers; return when the reader must read again."""
        self._lend_next = False
        self._lent = True
        task = current_task()
        while self._lent:
            seen = self._lend_count
            self._parked = task
            with trio.CancelScope(deadline=trio.current_time() + LEND_CHECK):
                await wait_task_rescheduled(self._abort_park)
            # woken (_lent is False), or the check: take the socket back unless an invoke used it since the last one
            if self._lent and self._reading is None and self._lend_count == seen:
                self._lent = False
        self._parked = None

    def _abort_park(self, _raise_cancel: RaiseCancelT) -> Abort:
        self._parked = None
        return Abort.SUCCEEDED

    def _wake_reader(self) -> None:
        """The reader reads again (the socket must not be in an invoking task's hands)."""
        self._lent = False
        task = self._parked
        if task is not None:
            self._parked = None
            reschedule(task)

    def poll_closed(self) -> bool:
        """``closed``, once what arrived while nobody read the socket is read: while it is lent (``_lend_socket``)
        and quiet for LEND_PEEK, a receive notices a peer that closed the connection (or sent a request) meanwhile, as
        the reader task would have, before a request is written to it. The remoting client calls this before it
        uses a connection."""
        if not self._lent or self._reading is not None or self.closed:
            return self.closed
        now = self._now()
        if now - self.last_activity < LEND_PEEK or now - self._peeked < LEND_PEEK:
            return False
        try:
            data = self._sock.recv(RECV_SIZE)
        except BlockingIOError:
            self._peeked = now
            return False
        except OSError as exc:
            self._teardown(f"socket error: {exc!r}")
            return True
        if not data:
            self._teardown("closed by peer")
            return True
        self.last_activity = now
        try:
            self._take_frames(data)
        except ProtocolError as exc:
            log.warning("closing connection from %s: %s", self.address, exc)
            self._teardown(f"protocol error: {exc}")
            return True
        if self._backlog:
            self._wake_reader()
        return False

    def _take_frames(self, data: bytes) -> None:
        """Frames read while the socket is lent: answers to their waiters, the peer's requests to the backlog."""
        pending = self._pending
        for cmd in self._decoder.feed(data):
            if cmd.flag & RPC_RESPONSE:
                waiter = pending.pop(cmd.opaque, None)
                if waiter is not None:
                    waiter.deliver(outcome.Value(cmd))
            else:
                self._backlog.append(cmd)

    def _return_socket(self) -> None:
        """An invoking task is done reading: the socket stays lent, unless someone else waits for an answer."""
        self._reading = None
        self._reading_waiter = None
        if self._pending or self._backlog or self.closed:
            self._wake_reader()

    async def _invoke_reading(self, request: RemotingCommand, timeout: float | None) -> RemotingCommand:
        """``invoke`` while the socket is lent and nothing else is pending: send, then read the answer here."""
        await checkpoint_if_cancelled()  # yields only if cancelled (then raises): nothing is sent
        if self.signer is not None:
            request.ext_json = None  # the signer adds members: the header is written from ext_fields
            self.signer(request)
        out: list[Buffer] = []
        size = request.encode_into(out)
        opaque = request.opaque
        if timeout is None:
            deadline = _INF
        else:
            deadline = self._now() + timeout
            self._arm_timer(deadline)
        waiter = self._reading_waiter = _Waiter(deadline, timeout, request.code)
        pending = self._pending
        pending[opaque] = waiter
        self._reading = current_task()
        self._lend_count += 1
        sock = self._sock
        try:
            # the usual frame goes out in one send (the queue is empty: nothing is writing); the rest, if the kernel
            # took only part, through the writer
            sent = 0
            if len(out) == 1 and not self._out:
                try:
                    sent = sock.send(out[0])
                except BlockingIOError:
                    pass
                except _SOCKET_ERRORS as exc:
                    self._teardown(f"send failed: {exc!r}")
            if sent < size and not self.closed:
                self._out += out
                if sent:
                    self._out[0] = memoryview(out[0])[sent:]
                self._out_bytes += size - sent
                if not await self._flush(deadline) and not self.closed:
                    raise RemotingTimeout(self.address, timeout or 0.0, request.code)
            try:
                while waiter.result is None and not self.closed:
                    # Wait first: the answer cannot be there yet (the peer has work to do), so a receive now would
                    # only fail. No cancel scope (it would cost a third of this whole path): past the deadline the
                    # timer task closes the connection, which ends this wait (see _timer_loop).
                    await wait_readable(sock)
                    try:
                        data = sock.recv(RECV_SIZE)
                    except BlockingIOError:
                        continue
                    if not data:
                        self._teardown("closed by peer")
                        break
                    self.last_activity = self._now()
                    self._take_frames(data)
                    if self._backlog:
                        # a request of the peer's: the reader processes it (it may be what our answer waits
                        # for) and reads on; we wait for our answer like any invoke (the timer's timeout). If our
                        # answer came in the same read, we still return only once the reader has handled the
                        # requests read with it, as when the reader reads: a request that came before an answer
                        # is processed before its invoker resumes
                        answered = waiter.result is not None
                        done = self._backlog_done
                        if answered and done is None:
                            done = self._backlog_done = trio.Event()
                        self._return_socket()
                        if answered and done is not None:
                            await done.wait()
                        return await waiter.wait()
            except ProtocolError as exc:
                log.warning("closing connection from %s: %s", self.address, exc)
                self._teardown(f"protocol error: {exc}")
            except _SOCKET_ERRORS as exc:
                self._teardown(f"socket error: {exc!r}")
            result = waiter.result
            if result is None:
                raise RemotingClosed(self.address, f"connection closed ({self.close_reason})")
            return result.unwrap()
        finally:
            if pending.get(opaque) is waiter:
                del pending[opaque]
            if self._reading is not None:
                self._return_socket()

    # ---- writer -----------------------------------------------------------------------------------------------

    async def _flush(self, deadline: float = _INF) -> bool:
        """Send everything queued; the caller must have checked ``not self._writing``.

        Only waits (for the socket to become writable) when the kernel buffer is full; gives up at ``deadline``
        and returns False, leaving the rest to the flusher task, so a frame is never cut in half.
        """
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
                            sent = sock.send(bufs[0])
                        else:
                            sent = sock.sendmsg(bufs[:IOV_MAX])
                    except BlockingIOError:
                        sent = 0
                    if sent:
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
                        continue
                    # Kernel buffer full: wait until writable, keeping the unsent rest at the queue's head.
                    writable = False
                    try:
                        with trio.move_on_at(deadline):
                            await wait_writable(sock)
                            writable = True
                    finally:
                        if not writable:  # deadline passed or cancelled: nothing of bufs went out
                            self._out[:0] = bufs
                            self._out_bytes += sum(map(_nbytes, bufs))
                            self._writing = False
                            self._kick_flusher()
                    if not writable:
                        return False
            self.last_activity = trio.current_time()
            return True
        except _SOCKET_ERRORS as exc:
            self._teardown(f"send failed: {exc!r}")
            return False
        finally:
            self._writing = False
            if self._drained is not None and (not self._out or self.closed):
                self._drained.set()
                self._drained = None

    def _kick_flusher(self) -> None:
        """Have the flusher task send the queue after the currently runnable tasks had their turn."""
        task = self._flusher
        if task is not None:
            self._flusher = None
            reschedule(task)
        elif not self._flusher_started and not self.closed:
            self._flusher_started = True
            self._nursery.start_soon(self._flusher_loop)

    async def _flusher_loop(self) -> None:
        try:
            while not self.closed:
                if self._out and not self._writing:
                    await self._flush()
                    continue
                self._flusher = current_task()
                await wait_task_rescheduled(self._abort_flusher_wait)
        finally:
            self._flusher = None

    def _abort_flusher_wait(self, _raise_cancel: RaiseCancelT) -> Abort:
        self._flusher = None  # trio reschedules the cancelled task itself
        return Abort.SUCCEEDED

    async def _send_queued(self, deadline: float = _INF) -> bool:
        """After queueing: send now if nothing else is outstanding, else leave it to the flusher (batching)."""
        if not self._writing:
            if len(self._pending) > 1:
                self._kick_flusher()
                return True
            return await self._flush(deadline)
        if self._out_bytes > HIGH_WATER:
            if self._drained is None:
                self._drained = trio.Event()
            with trio.move_on_at(deadline):
                await self._drained.wait()
                return True
            return False
        return True

    # ---- timeouts ---------------------------------------------------------------------------------------------

    def _arm_timer(self, deadline: float) -> None:
        scope = self._timer_scope
        if scope is not None:
            if deadline < scope.deadline:
                scope.deadline = deadline
        elif not self._timer_started and not self.closed:
            self._timer_started = True
            self._nursery.start_soon(self._timer_loop)

    async def _timer_loop(self) -> None:
        pending = self._pending
        while not self.closed:
            now = trio.current_time()
            earliest = _INF
            expired = []
            for opaque, waiter in pending.items():
                d = waiter.deadline
                if d <= now:
                    expired.append(opaque)
                elif d < earliest:
                    earliest = d
            reading = None
            for opaque in expired:
                # only an invoke with a timeout has a deadline (a callback waiter's is infinite)
                waiter = cast(_Waiter, pending.pop(opaque))
                waiter.deliver(outcome.Error(RemotingTimeout(self.address, cast(float, waiter.timeout), waiter.code)))
                if waiter is self._reading_waiter:
                    reading = waiter
            if reading is not None:
                # An invoke reading its own answer waits for readability with no cancel scope: end it by closing the
                # connection, as Java's client closes its channel when a sync invoke times out
                # (NettyRemotingClient.invokeSync, clientCloseSocketIfTimeout: true by default)
                self._teardown(f"no answer to code {reading.code} in {reading.timeout:g} s")
                break
            with trio.CancelScope(deadline=earliest) as self._timer_scope:
                await trio.sleep_forever()
            self._timer_scope = None

    # ---- public API -------------------------------------------------------------------------------------------

    async def send_response(self, response: RemotingCommand) -> bool:
        """Send a response decided later (the processor returned None). False if the connection is closed.

        ``response.opaque`` must be the request's (``request.make_response`` does that). Returns once the frame
        is handed to the kernel or queued behind a send in progress.
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
        if not self._writing:
            self._kick_flusher()  # batch with other tasks answering in the same scheduler tick
        elif self._out_bytes > HIGH_WATER:
            await self._send_queued()
        await trio.lowlevel.checkpoint()
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
        if not pending and self._lent and not self._writing:  # alone: read our own answer (client side only)
            return await self._invoke_reading(request, timeout)
        if self._lent and self._reading is None:
            self._wake_reader()
        elif not pending and not self.server_side:
            self._lend_next = True  # a lone invoke: the reader lends the socket once it has delivered the answer
        opaque = request.opaque
        while opaque in pending:
            request.opaque = opaque = next_opaque()
        if timeout is None:
            deadline = _INF
        else:
            deadline = trio.current_time() + timeout
            self._arm_timer(deadline)
        waiter = _Waiter(deadline, timeout, request.code)
        self._encode_request(request)
        pending[opaque] = waiter
        try:
            if not await self._send_queued(deadline) and not self.closed:
                raise RemotingTimeout(self.address, timeout or 0.0, request.code)
            return await waiter.wait()
        finally:
            if pending.get(opaque) is waiter:
                del pending[opaque]

    async def invoke_oneway(self, request: RemotingCommand, timeout: float | None = None) -> None:
        """Send a request flagged oneway; no response is expected. Returns once the frame is handed over."""
        if self.closed:
            raise RemotingClosed(self.address)
        if self.server_side:
            request.serialize_type = 0
        request.flag = (request.flag | RPC_ONEWAY) & ~RPC_RESPONSE
        self._encode_request(request)
        deadline = _INF if timeout is None else trio.current_time() + timeout
        if not self._writing:
            ok = await self._flush(deadline)
        else:
            ok = await self._send_queued(deadline)
            await trio.lowlevel.checkpoint()
        if self.closed:
            raise RemotingClosed(self.address)
        if not ok:
            raise RemotingTimeout(self.address, timeout or 0.0, request.code)

    def invoke_callback(self, request: RemotingCommand, callback: Callable[[InvokeOutcome], None]) -> None:
        """Queue a request whose response is handed to ``callback(outcome)`` in the reader task.

        The task-free way to keep many requests in flight from one task (Java's invokeAsync): ``callback`` gets
        ``outcome.Value(response)`` or ``outcome.Error(RemotingClosed)`` and must not block; it may queue more
        requests. Frames queued here are sent by the reader after the current batch of responses, or by
        ``flush()``. No timeout: keep your own deadline and ``cancel_callback(opaque)``.
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
        if self._lent and self._reading is None:
            self._wake_reader()
        self._lend_next = False  # answers come in here one after another (pulls, async sends): keep the reader reading
        pending[opaque] = _CallbackWaiter(callback)
        self._encode_request(request)

    def cancel_callback(self, opaque: int) -> bool:
        return self._pending.pop(opaque, None) is not None

    async def flush(self) -> None:
        """Send whatever is queued (used after ``invoke_callback``)."""
        if self._out and not self._writing:
            await self._flush()
        await trio.lowlevel.checkpoint()

    def start_soon(self, fn: Callable[[Unpack[_Ts]], Awaitable[object]], *args: Unpack[_Ts]) -> None:
        """Run ``fn(*args)`` in the owner's nursery (for processors that answer later). ``fn`` must not raise."""
        self._nursery.start_soon(fn, *args)

    def close(self, reason: str = "closed locally") -> None:
        """Close now: pending invokes fail with RemotingClosed, queued output is dropped, on_close runs."""
        self._teardown(reason)

    async def aclose(self, timeout: float = 1.0) -> None:
        """Send what is queued (for at most ``timeout`` seconds), then close."""
        deadline = trio.current_time() + timeout
        while self._out and not self.closed and trio.current_time() < deadline:
            if self._writing:
                await trio.sleep(0.001)
            else:
                await self._flush(deadline)
        self._teardown("closed locally")
        await trio.lowlevel.checkpoint()

    def _teardown(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason
        try:
            notify_closing(self._sock)
        except (OSError, ValueError):  # pragma: no cover - already closed
            pass
        self._sock.close()
        pending = list(self._pending.values())
        self._pending.clear()
        for waiter in pending:
            waiter.deliver(outcome.Error(RemotingClosed(self.address, f"connection closed ({reason})")))
        self._deferred.clear()
        self._out = []
        self._out_bytes = 0
        for ev in (self._room, self._drained, self._backlog_done):
            if ev is not None:
                ev.set()
        self._room = self._drained = self._backlog_done = None
        if self._timer_scope is not None:
            self._timer_scope.cancel()
        if self._flusher is not None:
            task, self._flusher = self._flusher, None
            reschedule(task)
        if self._parked is not None:
            self._wake_reader()
        if self._on_close is not None:
            try:
                self._on_close(self)
            except Exception:
                log.exception("on_close callback failed for %s", self)
