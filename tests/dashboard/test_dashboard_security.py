"""The dashboard's request checks (docs/dashboard.md, *Security*): the Host, Origin and form-token rules on their own,
then through the dashboard's own HTTP server on real sockets against an in-process ``pyrmq dev`` whose broker is asked
(through the client library's Admin) whether anything changed. A client that sends no Origin / Sec-Fetch-Site (curl,
a script) with a valid session and token still works; one with a wrong token, a foreign origin or a foreign Host
changes nothing."""

from __future__ import annotations

import logging
import re
import shutil
import ssl
import subprocess
import sys
import urllib.parse
from pathlib import Path

import attrs
import pytest
import trio

from pyrmq.client import Admin, Message, MessageQueue, Producer, PullConsumer
from pyrmq.kernel.bundles import load_bundle, packaged_bundle_path
from pyrmq.kernel.errors import ConfigError
from pyrmq.kernel.service import build_kernel
from pyrmq.plugins.builtin.hosts import HostRule, is_loopback
from pyrmq.plugins.dashboard.auth import (
    LoginLimiter, Sessions, UserFileError, check_password, hash_password, hash_password_pbkdf2, legacy_users,
    load_users,
)
from pyrmq.plugins.dashboard.plugin import DashboardRefused, bind, serve_dashboard
from pyrmq.plugins.dashboard.security import cross_origin

PYRMQ = [sys.executable, "-m", "pyrmq"]
POST_ROUTES = ["/topics/create", "/topics/delete", "/topic/send", "/group/reset", "/message/resend", "/dlq/resend",
               "/login", "/logout"]


# -- the rules on their own ----------------------------------------------------------------------------------------


def test_host_rule_answers_the_bound_address_and_loopback_names_only():
    rule = HostRule("127.0.0.1")
    for ok in ("127.0.0.1", "127.0.0.1:8082", "localhost:8082", "LocalHost", "localhost.:1", "[::1]:8082",
               "[0:0:0:0:0:0:0:1]"):
        assert rule.problem(ok) is None, ok
    for foreign in ("evil.example:8082", "evil.example", "127.0.0.1.evil.example", "10.0.0.1:8082", "localhost.evil"):
        status, reason = rule.problem(foreign)
        assert status == 421 and "does not answer for host" in reason, foreign
    for bad in (None, "", "  ", "::1", "[::1", "127.0.0.1:abc", "a b", "evil.example/x", "[zz::1]:80"):
        assert rule.problem(bad)[0] == 400, bad
    # names added by the operator (a proxy's public name); '*' gives the check up
    named = HostRule("127.0.0.1", "dash.example, Ops.Example.")
    assert named.problem("dash.example:443") is None and named.problem("ops.example") is None
    assert named.problem("other.example")[0] == 421
    assert HostRule("127.0.0.1", ["*"]).problem("anything.example") is None
    with pytest.raises(ValueError, match="not a host"):
        HostRule("127.0.0.1", "bad host")
    # a specific address answers for itself; a wildcard bind for any address literal (an address cannot be re-pointed)
    assert HostRule("10.1.2.3").problem("10.1.2.3:8082") is None
    assert HostRule("10.1.2.3").problem("10.9.9.9")[0] == 421
    for wildcard in ("0.0.0.0", "::"):
        assert HostRule(wildcard).problem("192.0.2.7:8082") is None and HostRule(wildcard).problem("[fe80::1]") is None
        assert HostRule(wildcard).problem("evil.example")[0] == 421
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.1.2.3")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("10.0.0.1")


@pytest.mark.parametrize(("method", "headers", "refused"), [
    ("GET", {"origin": "http://evil.example", "sec-fetch-site": "cross-site"}, False),  # reads are not refused here
    ("HEAD", {"sec-fetch-site": "cross-site"}, False),
    ("POST", {}, False),  # no browser headers (curl): the form token decides
    ("POST", {"sec-fetch-site": "same-origin", "origin": "http://127.0.0.1:8082"}, False),
    ("POST", {"sec-fetch-site": "none"}, False),  # typed by the user
    ("POST", {"sec-fetch-site": "same-site", "origin": "http://127.0.0.1:9999"}, True),  # another port, same host
    ("POST", {"sec-fetch-site": "cross-site", "origin": "http://localhost:8082"}, True),
    ("POST", {"sec-fetch-site": "cross-site"}, True),
    # browsers without Sec-Fetch-Site: the Origin decides
    ("POST", {"origin": "http://127.0.0.1:8082"}, False),
    ("POST", {"origin": "HTTP://127.0.0.1:8082"}, False),
    ("POST", {"origin": "http://127.0.0.1:9999"}, True),
    ("POST", {"origin": "http://localhost:8082"}, True),
    ("POST", {"origin": "http://evil.example"}, True),
    ("POST", {"origin": "null"}, True),
    ("PUT", {"origin": "http://evil.example"}, True),
    ("DELETE", {"sec-fetch-site": "cross-site"}, True),
])
def test_origin_rule(method, headers, refused):
    reason = cross_origin(method, headers, "127.0.0.1:8082")
    assert (reason is not None) == refused, reason


def test_form_token_belongs_to_its_session_and_its_dashboard():
    now = [1_000_000.0]
    sessions = Sessions(clock=lambda: now[0])
    session, cookie = sessions.new()
    assert sessions.read(cookie) == session and session.user == ""
    token = sessions.token(session)
    assert sessions.token_ok(sessions.read(cookie), token)
    other, other_cookie = sessions.new()
    assert not sessions.token_ok(other, token)  # another browser's token
    assert not sessions.token_ok(session, None) and not sessions.token_ok(session, "")
    assert not sessions.token_ok(None, token)  # no session cookie at all
    assert not sessions.token_ok(session, token[:-1] + ("0" if token[-1] != "0" else "1"))
    # another dashboard (or this one restarted): its key signs neither the cookie nor the token
    restarted = Sessions(clock=lambda: now[0])
    assert restarted.read(cookie) is None and not restarted.token_ok(session, token)
    # forged or altered cookies
    sid, user, expires, mac = cookie.split("|")
    assert sessions.read(f"{sid}|admin|{expires}|{mac}") is None
    assert sessions.read(f"{sid}||{int(expires) + 10**6}|{mac}") is None
    assert sessions.read(None) is None and sessions.read("") is None and sessions.read("a|b") is None
    # expiry
    now[0] += 13 * 3600
    assert sessions.read(cookie) is None
    # a user's session ends when the user leaves the file; a session with a user means nothing without a file
    users = {"ops": hash_password("pw", n=2 ** 10)}
    with_file = Sessions(users)
    user_session, user_cookie = with_file.new("ops")
    assert with_file.read(user_cookie) == user_session
    del users["ops"]
    assert with_file.read(user_cookie) is None


def test_passwords_are_scrypt_and_pbkdf2_lines_still_check(tmp_path):
    line = hash_password("s3cret")
    scheme, n, r, p, salt, digest = line.split("$")
    assert (scheme, n, r, p) == ("scrypt", str(2 ** 15), "8", "1") and len(bytes.fromhex(salt)) == 16
    assert check_password("s3cret", line) and not check_password("s3cret ", line)
    assert hash_password("s3cret") != line  # salted
    old = hash_password_pbkdf2("0ld")
    assert old.startswith("pbkdf2_sha256$200000$") and check_password("0ld", old) and not check_password("new", old)
    assert not check_password("x", "md5$abc") and not check_password("x", "scrypt$3$8$1$00$00")
    users = tmp_path / "users"
    users.write_text(f"# comment\nops:{line}\nlegacy:{old}\n")
    loaded = load_users(users)
    assert set(loaded) == {"ops", "legacy"} and legacy_users(loaded) == ["legacy"]
    users.write_text("ops:plaintext\n")
    with pytest.raises(UserFileError, match=r"users:1: expected name:scrypt\$n\$r\$p\$salt\$hash"):
        load_users(users)


def test_login_limiter_counts_failures_per_address_and_per_user():
    now = [0.0]
    limiter = LoginLimiter(attempts=3, window=60, user_attempts=5, clock=lambda: now[0])
    for _ in range(3):
        assert limiter.wait("10.0.0.1", "ops") == 0
        limiter.failed("10.0.0.1", "ops")
        now[0] += 1
    assert limiter.wait("10.0.0.1", "ops") == pytest.approx(57)  # the first failure ages out at 60
    assert limiter.wait("10.0.0.1", "other") == pytest.approx(57)  # the address is blocked for every name
    assert limiter.wait("10.0.0.2", "ops") == 0  # the name is not blocked yet (3 of 5)
    limiter.failed("10.0.0.2", "ops")
    limiter.failed("10.0.0.3", "ops")
    assert limiter.wait("10.0.0.4", "ops") > 0  # five failures for the name, from anywhere
    now[0] += 61
    assert limiter.wait("10.0.0.1", "ops") == 0
    limiter.failed("10.0.0.1", "ops")
    limiter.failed("10.0.0.1", "ops")
    limiter.succeeded("10.0.0.1", "ops")  # a good log-in forgets the address's and the name's failures
    for _ in range(4):
        limiter.failed("10.0.0.1", "ops")
    assert limiter.wait("10.0.0.1", "ops") > 0 and limiter.wait("10.0.0.9", "ops") == 0


# -- through the dashboard's HTTP server ---------------------------------------------------------------------------


@attrs.frozen
class Reply:
    status: int
    headers: list[tuple[str, str]]
    body: str

    def header(self, name: str) -> str | None:
        found = [v for k, v in self.headers if k == name]
        return found[-1] if found else None

    def cookie(self) -> str | None:
        """The ``name=value`` of the session cookie this reply sets."""
        found = self.header("set-cookie")
        return found.split(";")[0] if found else None

    def token(self) -> str:
        return re.search(r'name="csrf_token" value="([0-9a-f]+)"', self.body).group(1)


async def http(url: str, method: str = "GET", path: str = "/", *, headers: dict[str, str] | None = None,
               form: dict[str, str] | None = None, host: str | None = None, version: str = "1.1",
               ssl_context: ssl.SSLContext | None = None) -> Reply:
    """One request over a new connection, as written (no header added but Host, Content-*, Connection)."""
    addr, port = re.match(r"https?://([^/]+):(\d+)/", url).groups()
    addr = addr.strip("[]")
    lines = [f"{method} {path} HTTP/{version}"]
    if host is not False:
        lines.append(f"Host: {host if host is not None else f'{addr}:{port}'}")
    body = urllib.parse.urlencode(form).encode() if form is not None else b""
    if form is not None:
        lines += ["Content-Type: application/x-www-form-urlencoded", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()] + ["Connection: close"]
    with trio.fail_after(30):
        if ssl_context is not None:
            stream = await trio.open_ssl_over_tcp_stream(addr, int(port), ssl_context=ssl_context)
        else:
            stream = await trio.open_tcp_stream(addr, int(port))
        async with stream:
            await stream.send_all("\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + body)
            data = b""
            try:
                while chunk := await stream.receive_some(65536):
                    data += chunk
            except trio.BrokenResourceError:
                pass
    head, _, content = data.partition(b"\r\n\r\n")
    head_lines = head.decode("latin-1").split("\r\n")
    parsed = [(k.strip().lower(), v.strip()) for k, _, v in (h.partition(":") for h in head_lines[1:])]
    return Reply(int(head_lines[0].split()[1]), parsed, content.decode(errors="replace"))


class Browserless:
    """A client that keeps the dashboard's session cookie and sends no Origin / Sec-Fetch-* headers (curl)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.cookie: str | None = None

    async def get(self, path: str, **kw) -> Reply:
        reply = await http(self.url, "GET", path, headers=self._headers(kw.pop("headers", {})), **kw)
        self.cookie = reply.cookie() or self.cookie
        return reply

    async def post(self, path: str, form: dict[str, str], **kw) -> Reply:
        reply = await http(self.url, "POST", path, headers=self._headers(kw.pop("headers", {})), form=form, **kw)
        self.cookie = reply.cookie() or self.cookie
        return reply

    def _headers(self, extra: dict[str, str]) -> dict[str, str]:
        return {**({"Cookie": self.cookie} if self.cookie else {}), **extra}


@pytest.fixture
async def dev(start_role):
    kernel = await start_role("dev")
    namesrv = kernel.listening["namesrv"]
    async with Admin(namesrv) as admin:
        with trio.fail_after(20):
            while not (await admin.cluster_info()).brokers:
                await trio.sleep(0.02)
    return namesrv


@pytest.fixture
def dashboard(dev, nursery):
    """``url = await dashboard(**serve_dashboard keywords)``: a dashboard on 127.0.0.1 (default) for ``dev``."""
    async def start(host: str = "127.0.0.1", **kwargs) -> str:
        return await nursery.start(lambda task_status: serve_dashboard(
            dev, bind(host, 0), interval=60, task_status=task_status, **kwargs))
    return start


async def broker_state(namesrv: str, topic: str, group: str) -> tuple:
    """What the writes could change: the topic list, the topic's queue offsets, the group's consumer offsets."""
    async with Admin(namesrv) as admin:
        topics = sorted(t for t in await admin.list_topics() if not t.startswith(("%", "rmq_sys", "SCHEDULE")))
        stats = [(mq.queue_id, lo, hi) for mq, lo, hi, _ in await admin.topic_stats(topic)]
        progress = [(p.queue_id, p.consumer_offset) for p in await admin.group_progress(group, topic)]
    return topics, stats, progress


async def seed(namesrv: str, topic: str = "Victim", group: str = "victim_group") -> None:
    """A topic with 4 messages and a group that has committed offset 4 on queue 0."""
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, 1)
    async with Producer(namesrv, "victim_producer") as producer:
        for i in range(4):
            await producer.send(Message(topic, f"m{i}", keys=[f"k{i}"]), queue=MessageQueue(topic, "broker-a", 0))
    async with PullConsumer(namesrv, group) as consumer:
        await consumer.commit_offset(MessageQueue(topic, "broker-a", 0), 4)


async def test_a_client_without_browser_headers_works_with_its_session_and_token(dev, dashboard):
    url = await dashboard()
    curl = Browserless(url)
    page = await curl.get("/topics")
    assert page.status == 200 and curl.cookie
    token = page.token()
    created = await curl.post("/topics/create", {"topic": "ByCurl", "queues": "2", "csrf_token": token})
    assert created.status == 303 and "ok=created" in created.header("location")
    async with Admin(dev) as admin:
        assert "ByCurl" in await admin.list_topics()
    # the token stays the session's: the next form of the same session goes through too
    sent = await curl.post("/topic/send", {"topic": "ByCurl", "body": "hi", "keys": "curl-1", "csrf_token": token})
    assert sent.status == 303 and "ok=sent" in sent.header("location")
    deleted = await curl.post("/topics/delete", {"topic": "ByCurl", "confirm": "ByCurl", "csrf_token": token})
    assert deleted.status == 303 and "ok=deleted" in deleted.header("location")
    async with Admin(dev) as admin:
        assert "ByCurl" not in await admin.list_topics()


async def test_writes_without_the_token_or_from_another_origin_change_nothing(dev, dashboard):
    await seed(dev)
    url = await dashboard()
    port = int(url.rsplit(":", 1)[1].strip("/"))
    before = await broker_state(dev, "Victim", "victim_group")
    victim = Browserless(url)
    token = (await victim.get("/topic?name=Victim")).token()
    writes = {
        "/topics/create": {"topic": "Planted", "queues": "1"},
        "/topics/delete": {"topic": "Victim", "confirm": "Victim"},
        "/topic/send": {"topic": "Victim", "body": "planted"},
        "/group/reset": {"group": "victim_group", "topic": "Victim", "how": "time", "time": "0",
                         "confirm": "victim_group"},
        "/message/resend": {"id": "x", "topic": "Victim", "target": "victim_group|client"},
        "/dlq/resend": {"group": "victim_group", "all": "1", "confirm": "victim_group"},
        "/login": {"user": "ops", "password": "x"},
        "/logout": {},
    }
    assert sorted(writes) == sorted(POST_ROUTES)
    other_session = Browserless(url)
    other_token = (await other_session.get("/topics")).token()
    for path, form in writes.items():
        # no session cookie, no token (a plain cross-site form without browser headers)
        assert (await http(url, "POST", path, form=form)).status == 403, path
        # the victim's cookie (a same-site page gets it sent) but no token, or another session's
        assert (await victim.post(path, form)).status == 403, path
        assert (await victim.post(path, {**form, "csrf_token": other_token})).status == 403, path
        # the right cookie and token, but a browser says it came from elsewhere
        with_token = {**form, "csrf_token": token}
        for headers in ({"Origin": f"http://localhost:{port}"}, {"Origin": f"http://127.0.0.1:{port + 1}"},
                        {"Origin": "null"}, {"Sec-Fetch-Site": "same-site", "Origin": f"http://127.0.0.1:{port + 1}"},
                        {"Sec-Fetch-Site": "cross-site"}):
            refused = await victim.post(path, with_token, headers=headers)
            assert refused.status == 403, (path, headers)
            assert 'id="refused"' in refused.body and "not sent by the dashboard" in refused.body
        # a rebinding page: right token, but the Host names the attacker's domain
        assert (await victim.post(path, with_token, host=f"evil.example:{port}")).status == 421, path
        # and no GET changes anything: the write routes answer GET with 405 (GET /login is the log-in page)
        if path != "/login":
            assert (await victim.get(path + "?" + urllib.parse.urlencode(with_token))).status == 405, path
    assert await broker_state(dev, "Victim", "victim_group") == before
    refused = await victim.post("/topics/delete", {"topic": "Victim", "confirm": "Victim"})
    assert "this session" in refused.body and "Reload the page" in refused.body


async def test_destructive_writes_need_the_name_typed(dev, dashboard):
    await seed(dev)
    url = await dashboard()
    before = await broker_state(dev, "Victim", "victim_group")
    curl = Browserless(url)
    token = (await curl.get("/topic?name=Victim")).token()
    for confirm in (None, "", "victim", "Victim2"):
        form = {"topic": "Victim", "csrf_token": token, **({"confirm": confirm} if confirm is not None else {})}
        reply = await curl.post("/topics/delete", form)
        assert reply.status == 303 and "not deleted: type the topic's name" in urllib.parse.unquote(reply.header("location"))
        reply = await curl.post("/group/reset", {"group": "victim_group", "topic": "Victim", "how": "skip",
                                                 "csrf_token": token, **({"confirm": confirm} if confirm else {})})
        assert "offsets not reset: type the group's name" in urllib.parse.unquote(reply.header("location"))
        reply = await curl.post("/dlq/resend", {"group": "victim_group", "all": "1", "csrf_token": token,
                                                **({"confirm": confirm} if confirm else {})})
        assert "nothing re-sent: type the group's name" in urllib.parse.unquote(reply.header("location"))
    assert await broker_state(dev, "Victim", "victim_group") == before
    page = await curl.get("/topic?name=Victim")
    assert re.search(r'<form method="post" action="/topics/delete".*?name="confirm"', page.body)
    # typed: reset by time to the start, then delete
    reply = await curl.post("/group/reset", {"group": "victim_group", "topic": "Victim", "how": "time",
                                             "time": "2000-01-01T00:00:00", "confirm": "victim_group",
                                             "csrf_token": token})
    assert "ok=victim_group" in reply.header("location")
    async with Admin(dev) as admin:
        assert [p.consumer_offset for p in await admin.group_progress("victim_group", "Victim")] == [0]
    reply = await curl.post("/topics/delete", {"topic": "Victim", "confirm": "Victim", "csrf_token": token})
    assert "ok=deleted" in reply.header("location")


async def test_foreign_or_missing_host_is_refused_on_every_path(dashboard):
    url = await dashboard()
    port = url.rsplit(":", 1)[1].strip("/")
    for path in ("/cluster", "/topics", "/static/dashboard.css", "/login", "/nope", "/"):
        reply = await http(url, "GET", path, host=f"evil.example:{port}")
        assert reply.status == 421, path
        assert "does not answer for host &#x27;evil.example&#x27;" in reply.body and "broker-a" not in reply.body
        assert reply.header("set-cookie") is None and reply.header("x-frame-options") == "DENY"
    assert (await http(url, "GET", "/cluster", host=f"localhost:{port}")).status == 200
    assert (await http(url, "GET", "/cluster", host=f"[::1]:{port}")).status == 200
    reply = await http(url, "GET", "/cluster", host=False, version="1.0")  # HTTP/1.0 needs no Host: we do
    assert reply.status == 400 and "no Host header" in reply.body
    # names the operator adds (a proxy's public name)
    named = await dashboard(allowed_hosts=["dash.example"])
    assert (await http(named, "GET", "/cluster", host="dash.example")).status == 200
    assert (await http(named, "GET", "/cluster", host="evil.example")).status == 421


async def test_every_response_carries_the_security_headers_and_a_strict_session_cookie(dashboard):
    url = await dashboard()
    replies = {path: await http(url, "GET", path) for path in ("/cluster", "/topics", "/nope", "/static/dashboard.css")}
    replies["POST /topics/create"] = await http(url, "POST", "/topics/create", form={"topic": "x"})
    replies["GET /topics/create"] = await http(url, "GET", "/topics/create")
    assert [r.status for r in replies.values()] == [200, 200, 404, 200, 403, 405]
    for what, reply in replies.items():
        csp = reply.header("content-security-policy")
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "script-src" not in csp, what
        assert "form-action 'self'" in csp and "style-src 'self'" in csp
        assert reply.header("x-frame-options") == "DENY" and reply.header("x-content-type-options") == "nosniff"
        assert reply.header("referrer-policy") == "same-origin"
    assert replies["/cluster"].header("cache-control") == "no-store"
    assert replies["/static/dashboard.css"].header("cache-control") == "max-age=3600"
    cookie = replies["/cluster"].header("set-cookie")
    port = url.rsplit(":", 1)[1].strip("/")
    assert cookie.startswith(f"pyrmq_dashboard_{port}=")  # one cookie per port: browsers share them across ports
    attributes = {a.strip().split("=")[0].lower() for a in cookie.split(";")[1:]}
    assert {"httponly", "samesite", "path", "max-age"} <= attributes and "secure" not in attributes
    assert "SameSite=Strict" in cookie
    # no inline script or style anywhere in the pages: the CSP would block them
    assert "<script" not in replies["/cluster"].body and "style=" not in replies["/topics"].body
    # a browser that keeps its cookie gets no new one
    curl = Browserless(url)
    await curl.get("/topics")
    assert (await curl.get("/cluster")).header("set-cookie") is None


async def test_log_in_is_a_checked_form_rate_limited_and_starts_a_new_session(dashboard, tmp_path, caplog):
    users = tmp_path / "users"
    users.write_text(f"ops:{hash_password('s3cret', n=2 ** 12)}\nold:{hash_password_pbkdf2('0ld', iterations=1000)}\n")
    with caplog.at_level(logging.WARNING, "pyrmq.dashboard"):
        url = await dashboard(users=str(users))
    assert any("user 'old' has a PBKDF2 line" in r.getMessage() and "hash-password --user old" in r.getMessage()
               for r in caplog.records)
    browser = Browserless(url)
    assert (await browser.get("/topics")).header("location") == "/login?next=%2Ftopics"
    login = await browser.get("/login?next=/topics")
    anonymous_token = login.token()
    # no token: refused before the password is looked at
    assert (await browser.post("/login", {"user": "ops", "password": "s3cret"})).status == 403
    # the old PBKDF2 line logs in
    ok = await browser.post("/login?next=/topics", {"user": "old", "password": "0ld", "csrf_token": anonymous_token})
    assert ok.status == 303 and ok.header("location") == "/topics"
    page = await browser.get("/topics")
    assert page.status == 200 and 'id="logout"' in page.body
    user_token = page.token()
    assert user_token != anonymous_token  # a new session at log-in: the token from before does not work
    assert (await browser.post("/topics/create", {"topic": "Nope", "csrf_token": anonymous_token})).status == 403
    # log out: a checked POST too (GET /logout changes nothing)
    assert (await browser.get("/logout")).status == 405
    assert (await browser.post("/logout", {})).status == 403
    out = await browser.post("/logout", {"csrf_token": user_token})
    assert out.status == 303 and (await browser.get("/topics")).status == 303
    # rate limit: five wrong passwords from this address, then even the right one waits
    token = (await browser.get("/login")).token()
    for _ in range(5):
        wrong = await browser.post("/login", {"user": "ops", "password": "guess", "csrf_token": token})
        assert wrong.status == 200 and "wrong user name or password" in wrong.body
    limited = await browser.post("/login", {"user": "ops", "password": "s3cret", "csrf_token": token})
    assert limited.status == 429 and "too many failed log-ins" in limited.body
    assert 0 < int(limited.header("retry-after")) <= 301


async def test_off_loopback_without_a_user_file_it_refuses_to_start_unless_told_loudly(dashboard, start_role, tmp_path,
                                                                                      caplog):
    with pytest.raises(DashboardRefused, match="refusing to serve the dashboard on 0.0.0.0 without a user file"):
        await dashboard("0.0.0.0")
    # the bundle's settings: the start fails naming the key
    bundle = packaged_bundle_path("dev").read_text().replace("port = 8082", 'port = 0\nenabled = true\nhost = "0.0.0.0"')
    (tmp_path / "exposed.toml").write_text(bundle)
    with pytest.raises(ConfigError, match=r"key 'host'.*refusing to serve the dashboard on 0.0.0.0.*insecure_no_login"):
        await start_role(str(tmp_path / "exposed.toml"))
    # users given, or the risk accepted: the settings pass
    for extra in ('users = "/etc/pyrmq/users"', "insecure_no_login = true"):
        (tmp_path / "ok.toml").write_text(bundle + extra + "\n")
        build_kernel(load_bundle(str(tmp_path / "ok.toml")), entry_points=False)
    # --insecure-no-login: it starts, says so in the log and on every page; the Host check still holds
    with caplog.at_level(logging.WARNING, "pyrmq.dashboard"):
        url = await dashboard("0.0.0.0", insecure_no_login=True)
    assert any("NO LOGIN" in r.getMessage() for r in caplog.records)
    port = url.rsplit(":", 1)[1].strip("/")
    page = await http(f"http://127.0.0.1:{port}/", "GET", "/cluster")
    assert page.status == 200 and 'id="insecure"' in page.body and "--insecure-no-login" in page.body
    assert (await http(f"http://127.0.0.1:{port}/", "GET", "/cluster", host=f"192.0.2.10:{port}")).status == 200
    assert (await http(f"http://127.0.0.1:{port}/", "GET", "/cluster", host=f"evil.example:{port}")).status == 421


def test_the_commands_refuse_to_serve_the_dashboard_off_loopback_without_users(tmp_path):
    proc = subprocess.run([*PYRMQ, "dashboard", "--host", "0.0.0.0", "--port", "0"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert "refusing to serve the dashboard on 0.0.0.0 without a user file" in proc.stderr
    assert "--users FILE" in proc.stderr and "--insecure-no-login" in proc.stderr
    # pyrmq dev with a bundle that moves the dashboard to 0.0.0.0: refused before anything listens
    bundle = packaged_bundle_path("dev").read_text().replace("port = 8082", 'port = 0\nhost = "0.0.0.0"')
    (tmp_path / "exposed.toml").write_text(bundle)
    proc = subprocess.run([*PYRMQ, "dev", "-c", str(tmp_path / "exposed.toml"), "--namesrv-port", "0", "--port", "0",
                           "--store-dir", str(tmp_path / "store")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("pyrmq: error: key 'host'") and "insecure_no_login = true" in proc.stderr
    proc = subprocess.run([*PYRMQ, "dashboard", "--port", "0", "--allowed-host", "bad host"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "'bad host'" in proc.stderr


async def test_forwarded_headers_count_only_from_trusted_proxies(dev, dashboard):
    public = {"X-Forwarded-Host": "dash.example", "X-Forwarded-Proto": "https", "X-Forwarded-For": "198.51.100.7"}
    # not trusted: the headers are ignored (Host decides; no Secure cookie; an https://dash.example Origin is foreign)
    plain = await dashboard(allowed_hosts=["dash.example"])
    curl = Browserless(plain)
    page = await curl.get("/topics", headers=public)
    assert page.status == 200 and "Secure" not in page.header("set-cookie")
    refused = await curl.post("/topics/create", {"topic": "ViaProxy", "csrf_token": page.token()},
                              headers={**public, "Origin": "https://dash.example"})
    assert refused.status == 403
    assert (await http(plain, "GET", "/cluster", headers={"X-Forwarded-Host": "evil.example"})).status == 200
    # trusted (the proxy is 127.0.0.1 here): the public name and scheme are the request's
    proxied = await dashboard(allowed_hosts=["dash.example"], trusted_proxies=["127.0.0.1"])
    curl = Browserless(proxied)
    page = await curl.get("/topics", headers=public)
    assert page.status == 200 and "; Secure" in page.header("set-cookie")
    done = await curl.post("/topics/create", {"topic": "ViaProxy", "queues": "1", "csrf_token": page.token()},
                           headers={**public, "Origin": "https://dash.example", "Sec-Fetch-Site": "same-origin"})
    assert done.status == 303 and "ok=created" in done.header("location")
    async with Admin(dev) as admin:
        assert "ViaProxy" in await admin.list_topics()
    assert (await http(proxied, "GET", "/cluster", headers={**public, "X-Forwarded-Host": "evil.example"})).status == 421


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    assert openssl, "the TLS test makes its certificate with openssl: apt-get install openssl"
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


async def test_over_tls_the_session_cookie_is_secure(dashboard, tmp_path):
    cert, key = self_signed(tmp_path)
    url = await dashboard(certfile=str(cert), keyfile=str(key))
    assert url.startswith("https://127.0.0.1:")
    context = ssl.create_default_context(cafile=str(cert))
    page = await http(url, "GET", "/topics", ssl_context=context)
    assert page.status == 200
    cookie = page.header("set-cookie")
    assert "; Secure" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
