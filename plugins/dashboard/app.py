"""The dashboard's pages: plain HTML rendered on the server, forms that POST and redirect, inline SVG charts.

No script and nothing from the internet: the one stylesheet ships in the wheel (``static/dashboard.css``). Every
request passes :mod:`pyrmq.plugins.dashboard.security` first (Host, Origin, session cookie, headers); every POST form
carries its session's token (:meth:`Dashboard.token_field`), checked by :meth:`Dashboard.writes` before the handler
runs. GET requests change nothing on the brokers.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from typing import Any

import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from pyrmq.client import BrokerError, dlq
from pyrmq.client.message import MessageExt
from pyrmq.plugins.dashboard.auth import TOKEN_FIELD, LoginLimiter, Sessions
from pyrmq.plugins.dashboard.backend import FAILURES, Backend, Sample, Unsupported
from pyrmq.plugins.dashboard.security import Facts, Security, SecurityMiddleware
from pyrmq.remoting.codes import ResponseCode

PAGE_SIZE = 20
NAV = [("cluster", "Cluster"), ("topics", "Topics"), ("groups", "Groups"), ("messages", "Messages"),
       ("dlq", "Dead letters"), ("connections", "Producers & consumers")]
Handler = Callable[[Request], Awaitable[Response]]


def e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def q(value: Any) -> str:
    return urllib.parse.quote(str(value), safe="")


def fmt_ms(ms: int) -> str:
    if ms <= 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def parse_local(text: str) -> int:
    """A ``datetime-local`` input (server's time zone) or epoch milliseconds -> epoch milliseconds."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    return int(dt.datetime.fromisoformat(text).timestamp() * 1000)


def local_input(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%dT%H:%M:%S")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, raw: Sequence[int] = (), num: Sequence[int] = (),
          cls: str = "") -> str:
    """Rows as an HTML table; columns in ``raw`` are HTML already, the rest is escaped."""
    out = [f'<table class="{e(cls)}">' + ("<tr>" + "".join(f"<th>{e(h)}</th>" for h in headers) + "</tr>" if any(headers) else "")]
    for row in rows:
        cells = []
        for i, value in enumerate(row):
            text = str(value) if i in raw else e(value)
            cells.append(f'<td class="num">{text}</td>' if i in num else f"<td>{text}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    if not rows:
        out.append(f'<tr><td colspan="{len(headers)}">none</td></tr>')
    return "".join(out) + "</table>"


def chart(samples: Sequence[Sample], *, width: int = 720, height: int = 160, chart_id: str = "tps-chart",
          get: bool = True) -> str:
    """Put (and get) messages per second as polylines (inline SVG)."""
    if len(samples) < 2:
        return '<p class="note">The TPS chart fills in as the dashboard samples the brokers.</p>'
    top = max(1.0, *(s.put_tps for s in samples), *(s.get_tps for s in samples if get))
    t0, t1 = samples[0].at_ms, max(samples[-1].at_ms, samples[0].at_ms + 1)
    pad = 30

    def points(attr: str) -> str:
        return " ".join(
            f"{pad + (s.at_ms - t0) * (width - pad - 5) / (t1 - t0):.1f},"
            f"{height - 15 - getattr(s, attr) * (height - 25) / top:.1f}" for s in samples
        )

    last = samples[-1]
    return (
        f'<svg class="chart" id="{chart_id}" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
        f'<text x="2" y="12">{top:.0f}/s</text><text x="2" y="{height - 15}">0</text>'
        f'<text x="{pad}" y="{height - 2}">{e(fmt_ms(t0)[11:19])}</text>'
        f'<text x="{width - 60}" y="{height - 2}">{e(fmt_ms(t1)[11:19])}</text>'
        f'<polyline fill="none" stroke="#2a7" stroke-width="2" points="{points("put_tps")}"/>'
        + (f'<polyline fill="none" stroke="#27c" stroke-width="2" points="{points("get_tps")}"/>' if get else "")
        + f'</svg><p>put <b class="put">{last.put_tps:.1f}</b> msg/s'
        + (f', get <b class="get">{last.get_tps:.1f}</b> msg/s' if get else "") + " (last sample)</p>"
    )


def body_preview(body: bytes, view: str) -> str:
    if view == "hex":
        lines = [f"{i:08x}  {body[i:i + 16].hex(' '):<47}  " + "".join(chr(b) if 32 <= b < 127 else "." for b in body[i:i + 16])
                 for i in range(0, min(len(body), 4096), 16)]
        return "\n".join(lines)
    text = body.decode("utf-8", "replace")
    if view == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError as exc:
            return f"(not JSON: {exc})\n{text}"
    return text


def facts(request: Request) -> Facts:
    return request.scope["dashboard"]


class Dashboard:
    def __init__(self, backend: Backend, sessions: Sessions, security: Security,
                 limiter: LoginLimiter | None = None) -> None:
        self.backend = backend
        self.sessions = sessions
        self.security = security
        self.limiter = limiter or LoginLimiter()
        self.hashing = trio.CapacityLimiter(2)  # password checks in flight (each takes ~32 MiB for ~0.1 s)

    # -- frame -----------------------------------------------------------------------------------------------

    def token_field(self, request: Request) -> str:
        """The hidden input every POST form carries: its session's token."""
        return f'<input type="hidden" name="{TOKEN_FIELD}" value="{e(self.sessions.token(facts(request).session))}">'

    def page(self, request: Request, active: str, title: str, body: str, *, status: int = 200) -> HTMLResponse:
        user = facts(request).session.user
        nav = "".join(f'<a href="/{k}" class="{"on" if k == active else ""}">{e(v)}</a>' for k, v in NAV)
        who = (f'<span class="who">{e(user)} <form method="post" action="/logout" class="inline" id="logout-form">'
               f'{self.token_field(request)}<button id="logout">log out</button></form></span>' if user else "")
        flash = ""
        if self.security.exposed:
            flash += (f'<div class="error" id="insecure">No login (--insecure-no-login): anyone who can reach '
                      f'{e(self.security.exposed)} can read and change this cluster here.</div>')
        if request.query_params.get("ok"):
            flash += f'<div class="ok" id="flash-ok">{e(request.query_params["ok"])}</div>'
        if request.query_params.get("err"):
            flash += f'<div class="error" id="flash-err">{e(request.query_params["err"])}</div>'
        return HTMLResponse(
            f'<!doctype html><html><head><meta charset="utf-8"><title>{e(title)} - pyrmq</title>'
            f'<link rel="stylesheet" href="/static/dashboard.css"></head><body>'
            f"<header><b>pyrmq</b>{nav}{who}</header><main><h1>{e(title)}</h1>{flash}{body}</main></body></html>",
            status_code=status,
        )

    def refused_token(self, request: Request) -> HTMLResponse:
        return self.page(request, "", "Refused: stale or foreign form", (
            '<div class="error" id="refused">The form did not carry this session\'s token: it was not sent from the '
            "dashboard's own page, or the page is older than your session (a log-in, a log-out or a dashboard "
            "restart starts a new one).</div><p>Reload the page and send the form again.</p>"), status=403)

    def guarded(self, handler: Handler) -> Handler:
        async def run(request: Request) -> Response:
            if self.sessions.login_required and not facts(request).session.user:
                path = request.url.path if request.method == "GET" else "/cluster"
                return RedirectResponse("/login?next=" + q(path), 303)
            try:
                return await handler(request)
            except Unsupported as exc:
                return self.page(request, "", "Not supported", f'<div class="note">{e(exc)}</div>')
            except BrokerError as exc:
                if exc.code != ResponseCode.NO_PERMISSION:
                    return self.page(request, "", "Error", f'<div class="error">{e(type(exc).__name__)}: {e(exc)}</div>')
                page = self.page(request, "", "Refused by the broker", (
                    f'<div class="error" id="refused">The broker refused the dashboard\'s request: {e(exc.remark)} '
                    "(with ACL on, give the dashboard an account: --access-key/--secret-key or "
                    "ROCKETMQ_ACCESS_KEY/ROCKETMQ_SECRET_KEY)</div>"))
                page.status_code = 403
                return page
            except FAILURES as exc:
                return self.page(request, "", "Error", f'<div class="error">{e(type(exc).__name__)}: {e(exc)}</div>')
        return run

    def writes(self, handler: Handler) -> Handler:
        """A POST route: logged in (with a user file) and the form carries the session's token."""
        async def checked(request: Request) -> Response:
            if not self.sessions.token_ok(facts(request).session, (await self.form(request)).get(TOKEN_FIELD)):
                return self.refused_token(request)
            return await handler(request)
        return self.guarded(checked)

    @staticmethod
    async def form(request: Request) -> dict[str, str]:
        return {k: v[-1] for k, v in urllib.parse.parse_qs((await request.body()).decode(), keep_blank_values=True).items()}

    @staticmethod
    def back(path: str, *, ok: str = "", err: str = "") -> RedirectResponse:
        sep = "&" if "?" in path else "?"
        return RedirectResponse(path + sep + ("ok=" + q(ok) if ok else "err=" + q(err)), 303)

    # -- login -----------------------------------------------------------------------------------------------

    async def login(self, request: Request) -> Response:
        nxt = request.query_params.get("next", "/cluster")
        if not nxt.startswith("/") or nxt.startswith("//") or "\\" in nxt:
            nxt = "/cluster"
        f = await self.form(request) if request.method == "POST" else {}
        if request.method == "POST" and not self.sessions.token_ok(facts(request).session, f.get(TOKEN_FIELD)):
            return self.refused_token(request)
        if not self.sessions.login_required:
            return RedirectResponse(nxt, 303)
        error = ""
        if request.method == "POST":
            user, client = f.get("user", ""), facts(request).client
            wait = self.limiter.wait(client, user)
            if wait > 0:
                page = self.page(request, "", "Log in", (
                    f'<div class="error" id="login-error">too many failed log-ins: try again in {wait:.0f} s</div>'),
                    status=429)
                page.headers["retry-after"] = str(int(wait) + 1)
                return page
            async with self.hashing:
                ok = await trio.to_thread.run_sync(self.sessions.check, user, f.get("password", ""))
            if ok:
                self.limiter.succeeded(client, user)
                _session, cookie = self.sessions.new(user)  # a new session: new id, new form token
                request.scope["dashboard_cookie"] = cookie
                return RedirectResponse(nxt, 303)
            self.limiter.failed(client, user)
            error = '<div class="error" id="login-error">wrong user name or password</div>'
        body = (f'{error}<form method="post" action="/login?next={q(nxt)}">{self.token_field(request)}'
                '<p><label>user <input name="user" id="user" autocomplete="username"></label></p>'
                '<p><label>password <input name="password" id="password" type="password" '
                'autocomplete="current-password"></label></p>'
                '<button id="login">log in</button></form>')
        return self.page(request, "", "Log in", body)

    async def logout(self, request: Request) -> Response:
        if not self.sessions.token_ok(facts(request).session, (await self.form(request)).get(TOKEN_FIELD)):
            return self.refused_token(request)
        _session, cookie = self.sessions.new()
        request.scope["dashboard_cookie"] = cookie
        return RedirectResponse("/login" if self.sessions.login_required else "/cluster", 303)

    # -- cluster ---------------------------------------------------------------------------------------------

    async def cluster(self, request: Request) -> Response:
        rows = await self.backend.brokers()
        body = table(
            ["cluster", "broker", "role", "address", "version", "messages put today", "messages got today",
             "commit log bytes", "replication lag", "disk used", "up since", "error"],
            [(r.cluster, r.name, r.role, r.addr, r.version, r.put_total, r.get_total, r.commit_log_max,
              "-" if r.ha_behind_bytes is None else f"{r.ha_behind_bytes} B",
              f"{r.disk_ratio * 100:.1f} %" if r.disk_ratio >= 0 else "-", fmt_ms(r.boot_ms), r.error) for r in rows],
            num=(5, 6, 7), cls="brokers",
        )
        body += ("<p>Replication lag: on a master, the bytes its slowest slave still lacks; on a slave, the bytes it is "
                 "behind its master (GET_BROKER_RUNTIME_INFO's haBehindBytes).</p>")
        body += f"<h2>Messages per second, last hour (sampled every {self.backend.interval:g} s)</h2>"
        body += chart(list(self.backend.samples))
        return self.page(request, "cluster", "Cluster", body)

    # -- topics ----------------------------------------------------------------------------------------------

    async def topics(self, request: Request) -> Response:
        show_system = request.query_params.get("system") == "1"
        rows = [(f'<a href="/topic?name={q(t)}">{e(t)}</a>', "system" if system else "")
                for t, system in await self.backend.topics() if show_system or not system]
        body = (
            f'<form method="post" action="/topics/create" id="create-topic">{self.token_field(request)}create topic '
            '<input name="topic" placeholder="name" required> queues <input name="queues" type="number" value="8" min="1" max="1024"> '
            "<button>create</button></form>"
            + ('<p><a href="/topics">hide system topics</a></p>' if show_system else '<p><a href="/topics?system=1">show system topics</a></p>')
            + table(["topic", ""], rows, raw=(0,), cls="topics")
        )
        return self.page(request, "topics", "Topics", body)

    async def topic_create(self, request: Request) -> Response:
        f = await self.form(request)
        topic = f.get("topic", "").strip()
        try:
            queues = int(f.get("queues") or 8)
            done = await self.backend.admin.create_topic(topic, queues)
        except (*FAILURES, Unsupported) as exc:
            return self.back("/topics", err=f"creating {topic!r} failed: {exc}")
        return self.back(f"/topic?name={q(topic)}", ok=f"created {topic} with {queues} queues on {', '.join(done)}")

    async def topic_delete(self, request: Request) -> Response:
        f = await self.form(request)
        topic = f.get("topic", "")
        if not topic or f.get("confirm", "").strip() != topic:
            return self.back(f"/topic?name={q(topic)}", err=f"not deleted: type the topic's name ({topic}) to confirm")
        try:
            done = await self.backend.admin.delete_topic(topic)
        except (*FAILURES, Unsupported) as exc:
            return self.back(f"/topic?name={q(topic)}", err=f"deleting {topic} failed: {exc}")
        return self.back("/topics", ok=f"deleted {topic} on {', '.join(done)}")

    async def topic(self, request: Request) -> Response:
        topic = request.query_params.get("name", "")
        queues = await self.backend.topic_queues(topic)
        total = sum(hi - lo for _mq, lo, hi, _t in queues)
        body = table(["broker", "queue", "min offset", "max offset", "messages", "last update"],
                     [(mq.broker_name, mq.queue_id, lo, hi, hi - lo, fmt_ms(t)) for mq, lo, hi, t in queues],
                     num=(1, 2, 3, 4), cls="queues")
        body += f'<p id="topic-total">{total} messages stored in {len(queues)} queues</p>'
        body += (f"<h2>Messages stored per second (sampled every {self.backend.interval:g} s since this page was "
                 "first opened)</h2>" + chart(self.backend.watch_topic(topic), chart_id="topic-tps-chart", get=False))
        now = int(time.time() * 1000)
        body += (f'<p><a href="/messages?topic={q(topic)}&begin={now - 3600_000}&end={now + 60_000}">browse the last hour</a></p>'
                 f'<h2>Send a test message</h2><form method="post" action="/topic/send" id="send-test">'
                 f'{self.token_field(request)}<input type="hidden" name="topic" value="{e(topic)}">'
                 'body <input name="body" value="hello from the pyrmq dashboard" size="40"> tags <input name="tags" size="8"> '
                 'keys <input name="keys" size="12"> <button>send</button></form>'
                 f'<h2>Delete</h2><form method="post" action="/topics/delete" id="delete-topic">'
                 f'{self.token_field(request)}<input type="hidden" name="topic" value="{e(topic)}">'
                 f'type the name to confirm <input name="confirm" placeholder="{e(topic)}" autocomplete="off" required> '
                 f'<button>delete topic {e(topic)}</button></form>')
        return self.page(request, "topics", f"Topic {topic}", body)

    async def topic_send(self, request: Request) -> Response:
        f = await self.form(request)
        topic = f.get("topic", "")
        try:
            result = await self.backend.send_test(topic, f.get("body", ""), f.get("tags", ""), f.get("keys", ""))
        except (*FAILURES, Unsupported) as exc:
            return self.back(f"/topic?name={q(topic)}", err=f"send failed: {exc}")
        return self.back(f"/topic?name={q(topic)}", ok=f"sent: msgId {result.msg_id}, offsetMsgId {result.offset_msg_id}, "
                                                         f"queue {result.message_queue.queue_id} offset {result.queue_offset}")

    # -- groups ----------------------------------------------------------------------------------------------

    async def groups(self, request: Request) -> Response:
        rows = []
        system = request.query_params.get("system") == "1"
        for group in await self.backend.groups(system=system):
            conns = await self.backend.consumer_connections(group)
            members = len(conns.get("connectionSet") or []) if conns else 0
            try:
                lag = sum(p.lag for p in await self.backend.admin.group_progress(group))
            except FAILURES:
                lag = "-"
            rows.append((f'<a href="/group?name={q(group)}">{e(group)}</a>', members, lag))
        toggle = ('<p><a href="/groups">hide system groups</a></p>' if system else
                  '<p><a href="/groups?system=1">show system groups</a></p>')
        return self.page(request, "groups", "Consumer groups",
                         toggle + table(["group", "members online", "lag"], rows, raw=(0,), num=(1, 2), cls="groups"))

    async def group(self, request: Request) -> Response:
        group = request.query_params.get("name", "")
        conns = await self.backend.consumer_connections(group)
        progress = await self.backend.admin.group_progress(group)
        body = "<h2>Members</h2>"
        if conns:
            body += (f"<p>{e(conns.get('consumeType', ''))}, {e(conns.get('messageModel', ''))}, "
                     f"from {e(conns.get('consumeFromWhere', ''))}; subscriptions: "
                     + e(", ".join(f"{t} ({s.get('subString')})" for t, s in (conns.get("subscriptionTable") or {}).items())) + "</p>")
            body += table(["client id", "address", "language", "version"],
                          [(c.get("clientId"), c.get("clientAddr"), c.get("language"), c.get("version")) for c in conns["connectionSet"]],
                          cls="members")
        else:
            body += "<p>No member online.</p>"
        body += "<h2>Progress</h2>" + table(
            ["topic", "broker", "queue", "broker offset", "consumer offset", "lag", "in flight",
             "last consumed message stored"],
            [(p.topic, p.broker_name, p.queue_id, p.broker_offset, p.consumer_offset, p.lag, p.inflight,
              fmt_ms(p.last_timestamp)) for p in progress],
            num=(2, 3, 4, 5, 6), cls="progress")
        total = sum(p.lag for p in progress)
        width = 600
        top = max([p.lag for p in progress] + [1])
        bars = "".join(
            f'<rect x="{i * (width // max(len(progress), 1))}" y="{100 - p.lag * 90 // top}" width="{max(width // max(len(progress), 1) - 2, 1)}" '
            f'height="{p.lag * 90 // top}" fill="#c73"><title>{e(p.topic)} {e(p.broker_name)}/{p.queue_id}: {p.lag}</title></rect>'
            for i, p in enumerate(progress))
        body += f'<p id="group-lag">total lag {total}</p><svg class="chart" width="{width}" height="100">{bars}</svg>'
        inflight = sum(p.inflight for p in progress)
        if inflight:
            body += (f'<p id="group-inflight">{inflight} popped and not acked yet (POP consumers: they come back after '
                     'their invisible time unless acked)</p>')
        topics = sorted({p.topic for p in progress if not p.topic.startswith("%RETRY%")})
        options = "".join(f'<option value="{e(t)}">{e(t)}</option>' for t in topics)
        now = local_input(int(time.time() * 1000))
        body += (f'<h2>Reset offset</h2><form method="post" action="/group/reset" id="reset-offset">'
                 f'{self.token_field(request)}<input type="hidden" name="group" value="{e(group)}"> '
                 f'topic <select name="topic">{options}</select> '
                 f'to the messages stored at <input type="datetime-local" step="1" name="time" value="{now}"> '
                 f'group name to confirm <input name="confirm" placeholder="{e(group)}" autocomplete="off" required> '
                 '<button name="how" value="time">reset by time</button> '
                 '<button name="how" value="skip" id="skip-backlog">skip backlog</button></form>')
        return self.page(request, "groups", f"Group {group}", body)

    async def group_reset(self, request: Request) -> Response:
        f = await self.form(request)
        group, topic = f.get("group", ""), f.get("topic", "")
        path = f"/group?name={q(group)}"
        if not group or f.get("confirm", "").strip() != group:
            return self.back(path, err=f"offsets not reset: type the group's name ({group}) to confirm")
        try:
            ts = -1 if f.get("how") == "skip" else parse_local(f.get("time", ""))
            offsets = await self.backend.admin.reset_offset(group, topic, ts)
        except (*FAILURES, Unsupported) as exc:
            return self.back(path, err=f"reset failed: {exc}")
        where = "the end (backlog skipped)" if ts < 0 else fmt_ms(ts)
        return self.back(path, ok=f"{group} on {topic} reset to {where}: " +
                         ", ".join(f"{mq.broker_name}/{mq.queue_id}={o}" for mq, o in offsets.items()))

    # -- messages --------------------------------------------------------------------------------------------

    async def messages(self, request: Request) -> Response:
        p = request.query_params
        mode = p.get("mode", "time")
        topic = p.get("topic", "").strip()
        now = int(time.time() * 1000)
        try:
            begin = parse_local(p["begin"]) if p.get("begin") else now - 3600_000
            end = parse_local(p["end"]) if p.get("end") else now + 60_000
        except ValueError as exc:
            return self.page(request, "messages", "Messages", f'<div class="error">bad time: {e(exc)}</div>')
        forms = (
            '<form method="get" action="/messages" id="query-time"><input type="hidden" name="mode" value="time">'
            f'topic <input name="topic" value="{e(topic)}" required> from <input type="datetime-local" step="1" name="begin" value="{local_input(begin)}"> '
            f'to <input type="datetime-local" step="1" name="end" value="{local_input(end)}"> <button>query by time</button></form>'
            '<form method="get" action="/messages" id="query-key"><input type="hidden" name="mode" value="key">'
            f'topic <input name="topic" value="{e(topic)}" required> key <input name="key" value="{e(p.get("key", ""))}" required> '
            '<button>query by key</button></form>'
            '<form method="get" action="/messages" id="query-id"><input type="hidden" name="mode" value="id">'
            f'message id or UNIQ_KEY <input name="id" value="{e(p.get("id", ""))}" size="34" required> topic (for a UNIQ_KEY) '
            f'<input name="topic" value="{e(topic)}"> <button>query by id</button></form>'
        )
        result = ""
        if mode == "id" and p.get("id"):
            m = await self.backend.by_id(p["id"].strip(), topic)
            return RedirectResponse(f"/message?id={q(m.offset_msg_id)}&topic={q(m.topic)}", 303)
        if mode == "key" and topic and p.get("key"):
            found = await self.backend.by_key(topic, p["key"].strip())
            result = f'<p id="result-count">{len(found)} messages with key {e(p["key"])}</p>' + self.message_table(found)
        elif mode == "time" and topic:
            found, cut = await self.backend.messages_in_range(topic, begin, end)
            page_no = max(int(p.get("page", "1") or 1), 1)
            pages = max((len(found) + PAGE_SIZE - 1) // PAGE_SIZE, 1)
            shown = found[(page_no - 1) * PAGE_SIZE: page_no * PAGE_SIZE]
            base = f"/messages?mode=time&topic={q(topic)}&begin={begin}&end={end}"
            links = " ".join(f'<a href="{base}&page={n}" class="page{" on" if n == page_no else ""}">{n}</a>' if n != page_no
                             else f"<b>{n}</b>" for n in range(1, pages + 1))
            result = (f'<p id="result-count">{len(found)} messages stored {e(fmt_ms(begin))} .. {e(fmt_ms(end))}'
                      + (f" (cut at the first {len(found)})" if cut else "") + f"; page {page_no} of {pages}</p>"
                      + self.message_table(shown) + f'<p class="pager">{links}</p>')
        return self.page(request, "messages", "Messages", forms + result)

    @staticmethod
    def message_table(found: Sequence[MessageExt]) -> str:
        return table(
            ["message id (UNIQ_KEY)", "stored", "broker", "queue", "offset", "tags", "keys", "body"],
            [(f'<a href="/message?id={q(m.offset_msg_id)}&topic={q(m.topic)}">{e(m.msg_id)}</a>', fmt_ms(m.store_timestamp),
              m.broker_name, m.queue_id, m.queue_offset, m.tags or "", " ".join(m.keys),
              m.body[:60].decode("utf-8", "replace")) for m in found],
            raw=(0,), num=(3, 4), cls="messages")

    async def message(self, request: Request) -> Response:
        p = request.query_params
        msg_id, topic = p.get("id", ""), p.get("topic", "")
        m = await self.backend.by_id(msg_id, topic)
        view = p.get("view", "text")
        views = " ".join(f'<a href="/message?id={q(msg_id)}&topic={q(topic)}&view={v}" id="view-{v}">{v}</a>'
                         for v in ("text", "json", "hex"))
        facts = [("topic", m.topic), ("message id (UNIQ_KEY)", m.msg_id), ("offset message id", m.offset_msg_id),
                 ("broker", m.broker_name), ("queue", m.queue_id), ("queue offset", m.queue_offset),
                 ("commit log offset", m.commit_log_offset), ("tags", m.tags or ""), ("keys", " ".join(m.keys)),
                 ("born", f"{fmt_ms(m.born_timestamp)} at {m.born_host[0]}:{m.born_host[1]}"),
                 ("stored", f"{fmt_ms(m.store_timestamp)} at {m.store_host[0]}:{m.store_host[1]}"),
                 ("reconsume times", m.reconsume_times), ("body bytes", len(m.body))]
        body = table(["", ""], facts, cls="facts")
        body += "<h2>Properties</h2>" + table(["name", "value"], sorted(m.properties.items()), cls="properties")
        body += f"<h2>Body ({views})</h2><pre id=\"body\">{e(body_preview(m.body, view))}</pre>"
        consumed = await self.backend.consumed_by(m)
        body += "<h2>Consumer groups</h2>" + table(["group", "state"], consumed, cls="consumed")
        options = ""
        for group, _state in consumed:
            conns = await self.backend.consumer_connections(group)
            for c in (conns or {}).get("connectionSet") or []:
                value = e(f"{group}|{c.get('clientId')}")
                options += f'<option value="{value}">{e(group)} / {e(c.get("clientId"))}</option>'
        if options:
            body += (f'<form method="post" action="/message/resend" id="consume-directly">{self.token_field(request)}'
                     f'<input type="hidden" name="id" value="{e(m.offset_msg_id)}"><input type="hidden" name="topic" value="{e(m.topic)}">'
                     f'resend to <select name="target">{options}</select> <button>consume directly</button></form>')
        else:
            body += "<p>No consumer online to resend to (CONSUME_MESSAGE_DIRECTLY needs a running consumer).</p>"
        return self.page(request, "messages", f"Message {m.msg_id}", body)

    async def message_resend(self, request: Request) -> Response:
        f = await self.form(request)
        path = f"/message?id={q(f.get('id', ''))}&topic={q(f.get('topic', ''))}"
        group, _, client_id = f.get("target", "").partition("|")
        try:
            m = await self.backend.by_id(f.get("id", ""), f.get("topic"))
            answer = await self.backend.consume_directly(group, client_id, m)
        except (*FAILURES, Unsupported) as exc:
            return self.back(path, err=f"CONSUME_MESSAGE_DIRECTLY to {group} / {client_id}: {exc}")
        return self.back(path, ok=f"consumed directly by {client_id}: {answer.get('consumeResult', answer)}")

    # -- dead letters ----------------------------------------------------------------------------------------

    async def dlq_index(self, request: Request) -> Response:
        groups = await self.backend.dlq_groups()
        rows = [(f'<a href="/dlq/group?name={q(g)}">{e(g)}</a>',) for g in groups]
        return self.page(request, "dlq", "Dead-letter queues", table(["group"], rows, raw=(0,), cls="dlq-groups"))

    async def dlq_group(self, request: Request) -> Response:
        group = request.query_params.get("name", "")
        letters = await dlq.list_dlq(self.backend.namesrv, group, limit=500)
        rows = []
        token = self.token_field(request)
        for d in letters:
            form = (f'<form method="post" action="/dlq/resend" class="inline">{token}'
                    f'<input type="hidden" name="group" value="{e(group)}">'
                    f'<input type="hidden" name="id" value="{e(d.msg_id)}"><button class="resend-one">resend</button></form>')
            rows.append((f'<a href="/message?id={q(d.msg_id)}&topic={q("%DLQ%" + group)}">{e(d.uniq_key or d.msg_id)}</a>',
                         d.original_topic or "", fmt_ms(d.store_timestamp), d.queue_offset, d.reconsume_times,
                         d.body[:60].decode("utf-8", "replace"), form))
        body = (f'<p id="dlq-count">{len(letters)} messages in %DLQ%{e(group)}</p>'
                f'<form method="post" action="/dlq/resend" id="resend-all">{token}'
                f'<input type="hidden" name="group" value="{e(group)}"><input type="hidden" name="all" value="1">'
                f'group name to confirm <input name="confirm" placeholder="{e(group)}" autocomplete="off" required> '
                f'<button>resend all to their topics</button></form> <a href="/dlq/export?name={q(group)}">export as JSON</a>'
                + table(["message", "original topic", "stored", "offset", "reconsumed", "body", ""], rows, raw=(0, 6), num=(3, 4), cls="letters"))
        return self.page(request, "dlq", f"Dead letters of {group}", body)

    async def dlq_resend(self, request: Request) -> Response:
        f = await self.form(request)
        group = f.get("group", "")
        ids = [f["id"]] if f.get("id") else None
        if ids is None and (f.get("all") != "1" or f.get("confirm", "").strip() != group or not group):
            return self.back(f"/dlq/group?name={q(group)}",
                             err=f"nothing re-sent: type the group's name ({group}) to resend all its dead letters")
        try:
            sent = await dlq.resend_dlq(self.backend.namesrv, group, ids)
        except dlq.DlqError as exc:
            return self.back(f"/dlq/group?name={q(group)}", err=f"resend failed: {exc}")
        return self.back(f"/dlq/group?name={q(group)}", ok=f"re-sent {sent} message{'s' if sent != 1 else ''}")

    async def dlq_export(self, request: Request) -> Response:
        group = request.query_params.get("name", "")
        letters = await dlq.list_dlq(self.backend.namesrv, group, limit=100_000)
        return JSONResponse([d.as_dict() for d in letters],
                            headers={"content-disposition": f'attachment; filename="dlq-{group}.json"'})

    # -- connections -----------------------------------------------------------------------------------------

    async def connections(self, request: Request) -> Response:
        body = "<h2>Consumers</h2>"
        rows = []
        for group in await self.backend.groups():
            conns = await self.backend.consumer_connections(group)
            for c in (conns or {}).get("connectionSet") or []:
                rows.append((group, c.get("clientId"), c.get("clientAddr"), c.get("language"), c.get("version")))
        body += table(["group", "client id", "address", "language", "version"], rows, cls="consumers")
        body += "<h2>Producers</h2>"
        group = request.query_params.get("producer", "").strip()
        try:
            producers = await self.backend.producer_groups()
        except Unsupported as exc:
            body += (f'<div class="note" id="producers-unsupported">{e(exc)}: the broker cannot list its producer groups; '
                     "give a producer group to see its connections.</div>")
            producers = {group: await self.backend.producer_connections(group)} if group else {}
        body += ('<form method="get" action="/connections" id="producer-group">producer group '
                 f'<input name="producer" value="{e(group)}"> <button>show</button></form>')
        prows = [(g, c.get("clientId"), c.get("clientAddr"), c.get("language"), c.get("version"))
                 for g, conns in producers.items() for c in conns]
        body += table(["group", "client id", "address", "language", "version"], prows, cls="producers")
        return self.page(request, "connections", "Producers and consumers", body)


async def home(request: Request) -> Response:
    return RedirectResponse("/cluster")


def build_app(backend: Backend, sessions: Sessions, security: Security, *,
              limiter: LoginLimiter | None = None) -> SecurityMiddleware:
    """The dashboard's ASGI app: its routes behind :class:`SecurityMiddleware` (which answers first and adds its
    headers to every response, error pages included)."""
    d = Dashboard(backend, sessions, security, limiter)
    g, w = d.guarded, d.writes
    # read once from the package (in the wheel; the editable install links it, which StaticFiles refuses to follow)
    css = resources.files("pyrmq.plugins.dashboard").joinpath("static", "dashboard.css").read_bytes()

    async def stylesheet(request: Request) -> Response:
        return Response(css, media_type="text/css", headers={"cache-control": "max-age=3600"})

    routes = [
        Route("/", home),
        Route("/login", d.login, methods=["GET", "POST"]),
        Route("/logout", d.logout, methods=["POST"]),
        Route("/cluster", g(d.cluster)),
        Route("/topics", g(d.topics)),
        Route("/topics/create", w(d.topic_create), methods=["POST"]),
        Route("/topics/delete", w(d.topic_delete), methods=["POST"]),
        Route("/topic", g(d.topic)),
        Route("/topic/send", w(d.topic_send), methods=["POST"]),
        Route("/groups", g(d.groups)),
        Route("/group", g(d.group)),
        Route("/group/reset", w(d.group_reset), methods=["POST"]),
        Route("/messages", g(d.messages)),
        Route("/message", g(d.message)),
        Route("/message/resend", w(d.message_resend), methods=["POST"]),
        Route("/dlq", g(d.dlq_index)),
        Route("/dlq/group", g(d.dlq_group)),
        Route("/dlq/resend", w(d.dlq_resend), methods=["POST"]),
        Route("/dlq/export", g(d.dlq_export)),
        Route("/connections", g(d.connections)),
        Route("/static/dashboard.css", stylesheet),
    ]
    return SecurityMiddleware(Starlette(routes=routes), sessions, security)
