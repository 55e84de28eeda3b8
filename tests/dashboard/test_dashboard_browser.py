"""The web dashboard in a real browser (Debian's chromium-headless-shell driven by Playwright) against a live
``pyrmq dev`` subprocess with real traffic (tests/dashboard/traffic.py): every page loads, a message query, a DLQ
resend and an offset reset are clicked through, and what the pages show is checked against what the broker holds
(asked through the client library's Admin). Then as a hostile page would: forms on another origin on loopback
posting to every write route, and a DNS-rebinding page reading and writing through a name re-pointed at 127.0.0.1;
the broker must be unchanged. Screenshots land in the test's tmp dir (dashboard-*.png).

Every wait has a deadline: Playwright's auto-waiting locators and ``expect`` (20 s here), read_until's seconds."""

from __future__ import annotations

import html
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import trio
from playwright.sync_api import expect

from pyrmq.client import Admin
from pyrmq.kernel.bundles import packaged_bundle_path

CHROMIUM = shutil.which("chromium-headless-shell")
TRAFFIC = Path(__file__).with_name("traffic.py")
PYRMQ = [sys.executable, "-m", "pyrmq"]
WAIT_MS = 20_000  # every Playwright wait and expect: generous, the machine may be busy
#: a name the browser resolves to 127.0.0.1 (as a rebinding attacker's DNS would, on its second answer)
REBIND_NAME = "rebind.pyrmq.test"


def chromium() -> str:
    assert CHROMIUM, ("the dashboard's browser tests need Chromium's headless shell: "
                      "apt-get install --no-install-recommends chromium-headless-shell")
    return CHROMIUM


def read_until(proc: subprocess.Popen, pattern: str, seconds: float, seen: list[str] | None = None) -> re.Match:
    """Lines of ``proc``'s stdout (kept in ``seen``) until one matches, within ``seconds`` and while it runs."""
    deadline = time.monotonic() + seconds
    seen = [] if seen is None else seen
    os.set_blocking(proc.stdout.fileno(), False)
    buffer = b""
    while time.monotonic() < deadline:
        chunk = proc.stdout.read()
        if chunk:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                text = line.decode(errors="replace")
                seen.append(text)
                m = re.search(pattern, text)
                if m:
                    os.set_blocking(proc.stdout.fileno(), True)
                    return m
        elif proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"no line matching {pattern!r} within {seconds} s (exit {proc.poll()}): " + "\n".join(seen[-20:]))


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def admin_call(namesrv: str, method: str, *args):
    async def run():
        with trio.fail_after(20):
            async with Admin(namesrv) as admin:
                return await getattr(admin, method)(*args)
    return trio.run(run)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A ``pyrmq dev`` (dashboard on a free port, sampling every 0.5 s) with traffic; yields (namesrv, url, sent)."""
    tmp = tmp_path_factory.mktemp("dashboard")
    bundle = packaged_bundle_path("dev").read_text().replace("port = 8082", "port = 0\ninterval = 0.5")
    (tmp / "dev.toml").write_text(bundle)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    dev = subprocess.Popen([*PYRMQ, "dev", "-c", str(tmp / "dev.toml"), "--namesrv-port", "0", "--port", "0",
                            "--store-dir", str(tmp / "store")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    traffic = None
    try:
        ready = read_until(dev, r"namesrv on (\S+),.*dashboard on (http://\S+/)", 30)
        namesrv, url = ready.group(1), ready.group(2)
        traffic = subprocess.Popen([sys.executable, str(TRAFFIC), namesrv], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        seen: list[str] = []
        read_until(traffic, r"^READY$", 60, seen)
        sent = json.loads(next(line for line in seen if line.startswith("[")))
        yield namesrv, url, sent, tmp
        assert dev.poll() is None, "pyrmq dev (and its dashboard) died during the tests"
    finally:
        if traffic is not None:
            stop(traffic)
        stop(dev)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # Debian's headless shell; Playwright never downloads a browser here
        from playwright.sync_api import expect

        expect.set_options(timeout=WAIT_MS)
        # Chromium's own Private Network Access checks are off: a page the attacker served (a "public" document)
        # could not even reach loopback with them, and Firefox and Safari have none; the dashboard's checks alone hold
        b = p.chromium.launch(executable_path=chromium(), timeout=30_000, args=[
            "--no-sandbox", f"--host-resolver-rules=MAP {REBIND_NAME} 127.0.0.1",
            "--disable-features=BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights,"
            "LocalNetworkAccessChecks"])
        yield b
        b.close()


@pytest.fixture
def page(browser, tmp_path):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    pg = context.new_page()
    shots = iter(range(100))

    def shot(name: str) -> None:
        pg.screenshot(path=str(tmp_path / f"dashboard-{next(shots):02d}-{name}.png"), full_page=True)

    pg.shot = shot
    yield pg
    context.close()


def test_every_page_loads_and_shows_what_the_broker_holds(cluster, page):
    namesrv, url, sent, _ = cluster
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text))
    for path, title in [("cluster", "Cluster"), ("topics", "Topics"), ("groups", "Consumer groups"),
                        ("messages", "Messages"), ("dlq", "Dead-letter queues"), ("connections", "Producers and consumers"),
                        ("topic?name=DashOrders", "Topic DashOrders"), ("group?name=dash_live", "Group dash_live")]:
        response = page.goto(url + path)
        assert response.status == 200, path
        assert page.locator("h1").inner_text() == title
        assert page.locator(".error").count() == 0, page.locator(".error").all_inner_texts()
        page.shot(path.split("?")[0])
    # cluster: the broker the name server knows, as a master, with the puts the traffic made
    page.goto(url + "cluster")
    row = page.locator("table.brokers tr").nth(1).locator("td").all_inner_texts()
    info = admin_call(namesrv, "cluster_info")
    assert row[1] == "broker-a" and row[2] == "MASTER" and row[3] == info.brokers["broker-a"].broker_addrs[0]
    assert int(row[5]) >= 35  # 30 orders + 5 poison messages at least (send-backs and DLQ copies count too)
    # the TPS chart appears once the dashboard has two samples (every 0.5 s here)
    deadline = time.monotonic() + 15
    while page.locator("#tps-chart").count() == 0:
        assert time.monotonic() < deadline, "no TPS chart"
        time.sleep(0.5)
        page.reload()
    assert page.locator("#tps-chart polyline").count() == 2
    page.shot("cluster-chart")
    # topic: min/max offsets per queue as the broker reports them
    page.goto(url + "topic?name=DashOrders")
    stats = admin_call(namesrv, "topic_stats", "DashOrders")
    rows = [r.locator("td").all_inner_texts() for r in page.locator("table.queues tr").all()[1:]]
    assert [(int(r[1]), int(r[2]), int(r[3])) for r in rows] == [(mq.queue_id, lo, hi) for mq, lo, hi, _ in stats]
    assert page.locator("#topic-total").inner_text().startswith("30 messages")
    # its TPS chart starts once the page was opened (sampled every 0.5 s here)
    deadline = time.monotonic() + 15
    while page.locator("#topic-tps-chart").count() == 0:
        assert time.monotonic() < deadline, "no topic TPS chart"
        time.sleep(0.5)
        page.reload()
    assert page.locator("#topic-tps-chart polyline").count() == 1
    page.shot("topic-chart")
    # consumers online: dash_live's member, language PYTHON
    page.goto(url + "connections")
    consumers = [r.locator("td").all_inner_texts() for r in page.locator("table.consumers tr").all()[1:]]
    assert [c[0] for c in consumers] == ["dash_live"] and consumers[0][3] == "PYTHON"
    page.goto(url + "connections?producer=dash_producer")
    page.shot("connections-producer")
    # the Content-Security-Policy (no script, styles only from the stylesheet) blocked nothing the pages use
    assert not [m for m in console if "Content Security Policy" in m], console


def test_message_query_by_time_key_and_id(cluster, page):
    namesrv, url, sent, _ = cluster
    page.goto(url + "messages")
    page.fill("#query-time input[name=topic]", "DashOrders")
    page.click("#query-time button")
    assert page.locator("#result-count").inner_text().startswith("30 messages")
    assert "page 1 of 2" in page.locator("#result-count").inner_text()
    assert page.locator("table.messages tr").count() == 1 + 20
    page.shot("messages-by-time")
    page.click(".pager a:text('2')")
    expect(page.locator("table.messages tr")).to_have_count(1 + 10)
    # by key: exactly the message sent with it; then its detail page, as text, JSON and hex
    order7 = next(s for s in sent if s["key"] == "order-7")
    page.fill("#query-key input[name=topic]", "DashOrders")
    page.fill("#query-key input[name=key]", "order-7")
    page.click("#query-key button")
    expect(page.locator("#result-count")).to_have_text("1 messages with key order-7")
    page.click(f"table.messages a:text('{order7['msg_id']}')")
    expect(page.locator("h1")).to_have_text(f"Message {order7['msg_id']}")
    facts = dict(tuple(r.locator("td").all_inner_texts()) for r in page.locator("table.facts tr").all())
    assert facts["message id (UNIQ_KEY)"] == order7["msg_id"] and facts["offset message id"] == order7["offset_msg_id"]
    held = admin_call(namesrv, "query_message_by_id", order7["offset_msg_id"])
    assert json.loads(page.locator("#body").inner_text()) == json.loads(held.body) == {"order": 7, "item": "book"}
    assert facts["queue"] == str(held.queue_id) and facts["queue offset"] == str(held.queue_offset)
    consumed = dict(tuple(r.locator("td").all_inner_texts()) for r in page.locator("table.consumed tr").all()[1:])
    assert consumed.get("dash_batch") == "consumed"
    page.shot("message-detail")
    page.click("#view-hex")
    expect(page.locator("#body")).to_have_text(re.compile("^" + re.escape("00000000  " + held.body[:16].hex(" "))))
    page.shot("message-hex")
    # resend to a group member (CONSUME_MESSAGE_DIRECTLY): the page says what the broker answered
    page.select_option("#consume-directly select", index=0)
    page.click("#consume-directly button")
    expect(page.locator("#flash-ok, #flash-err")).to_be_visible()
    flash = page.locator("#flash-ok, #flash-err").inner_text()
    # the pyrmq client does not answer CONSUME_MESSAGE_DIRECTLY yet: then the page passes on the client's refusal
    assert flash.startswith("consumed directly by ") or ("CONSUME_MESSAGE_DIRECTLY" in flash and "not supported" in flash)
    page.shot("consume-directly")
    # by UNIQ_KEY (with the topic) and by offset message id: both land on the detail of the same message
    for msg_id, topic in [(order7["msg_id"], "DashOrders"), (order7["offset_msg_id"], "")]:
        page.goto(url + "messages")
        page.fill("#query-id input[name=id]", msg_id)
        page.fill("#query-id input[name=topic]", topic)
        page.click("#query-id button")
        expect(page.locator("h1")).to_have_text(f"Message {order7['msg_id']}")


def test_dead_letters_browse_and_resend(cluster, page):
    namesrv, url, _, _ = cluster
    page.goto(url + "dlq")
    page.click("table.dlq-groups a:text('dash_failing')")
    assert page.locator("#dlq-count").inner_text() == "5 messages in %DLQ%dash_failing"
    letters = [r.locator("td").all_inner_texts() for r in page.locator("table.letters tr").all()[1:]]
    assert sorted(r[5] for r in letters) == [f"poison {i}" for i in range(5)] and {r[1] for r in letters} == {"DashFail"}
    page.shot("dlq")
    before = sum(hi for _mq, _lo, hi, _t in admin_call(namesrv, "topic_stats", "DashFail"))
    page.locator("button.resend-one").first.click()
    expect(page.locator("#flash-ok")).to_have_text("re-sent 1 message")
    # resend all asks for the group's name: a wrong one re-sends nothing
    page.fill("#resend-all input[name=confirm]", "dash_failin")
    page.click("#resend-all button")
    expect(page.locator("#flash-err")).to_contain_text("nothing re-sent: type the group's name (dash_failing)")
    assert sum(hi for _mq, _lo, hi, _t in admin_call(namesrv, "topic_stats", "DashFail")) == before + 1
    page.fill("#resend-all input[name=confirm]", "dash_failing")
    page.click("#resend-all button")
    expect(page.locator("#flash-ok")).to_have_text("re-sent 5 messages")
    page.shot("dlq-resent")
    after = sum(hi for _mq, _lo, hi, _t in admin_call(namesrv, "topic_stats", "DashFail"))
    assert after - before == 6  # back on their topic; the DLQ keeps its copies
    assert page.locator("#dlq-count").inner_text() == "5 messages in %DLQ%dash_failing"
    exported = page.request.get(url + "dlq/export?name=dash_failing").json()
    assert sorted(d["body"] for d in exported) == [f"poison {i}" for i in range(5)]


def test_offset_reset_by_time_and_skip_backlog(cluster, page):
    namesrv, url, _, _ = cluster
    page.goto(url + "groups")
    page.click("table.groups a:text('dash_batch')")
    assert page.locator("#group-lag").inner_text() == "total lag 0"
    page.select_option("#reset-offset select", "DashOrders")
    page.fill("#reset-offset input[name=time]", "2000-01-01T00:00:00")
    page.fill("#reset-offset input[name=confirm]", "dash_batch")
    page.click("#reset-offset button[value=time]")
    expect(page.locator("#flash-ok")).to_contain_text("dash_batch on DashOrders reset to")
    assert page.locator("#group-lag").inner_text() == "total lag 30"
    progress = admin_call(namesrv, "group_progress", "dash_batch", "DashOrders")
    shown = [r.locator("td").all_inner_texts() for r in page.locator("table.progress tr").all()[1:]]
    assert [(int(r[2]), int(r[4]), int(r[5])) for r in shown] == [(p.queue_id, p.consumer_offset, p.lag) for p in progress]
    assert sum(p.lag for p in progress) == 30 and all(p.consumer_offset == 0 for p in progress)
    page.shot("group-reset")
    page.fill("#reset-offset input[name=confirm]", "dash_batch")
    page.click("#skip-backlog")
    expect(page.locator("#flash-ok")).to_contain_text("backlog skipped")
    assert page.locator("#group-lag").inner_text() == "total lag 0"
    assert sum(p.lag for p in admin_call(namesrv, "group_progress", "dash_batch", "DashOrders")) == 0


def test_topic_create_send_and_delete(cluster, page):
    namesrv, url, _, _ = cluster
    page.goto(url + "topics")
    page.fill("#create-topic input[name=topic]", "DashScratch")
    page.fill("#create-topic input[name=queues]", "2")
    page.click("#create-topic button")
    expect(page.locator("#flash-ok")).to_contain_text("created DashScratch with 2 queues")
    assert page.locator("#topic-type").inner_text() == "message type (RocketMQ 5.x clients): NORMAL"
    page.fill("#send-test input[name=keys]", "scratch-1")
    page.click("#send-test button")
    expect(page.locator("#flash-ok, #flash-err")).to_contain_text("sent: msgId ")
    assert page.locator("#topic-total").inner_text().startswith("1 messages")
    found = admin_call(namesrv, "query_message_by_key", "DashScratch", "scratch-1")
    assert [m.body for m in found] == [b"hello from the pyrmq dashboard"]
    # deleting asks for the name: the browser will not send the form without it, the server not act on a wrong one
    page.click("#delete-topic button")
    assert page.locator("#delete-topic input[name=confirm]").evaluate("e => e.validity.valueMissing")
    page.fill("#delete-topic input[name=confirm]", "DashScratc")
    page.click("#delete-topic button")
    expect(page.locator("#flash-err")).to_contain_text("not deleted: type the topic's name (DashScratch)")
    assert "DashScratch" in admin_call(namesrv, "list_topics")
    page.fill("#delete-topic input[name=confirm]", "DashScratch")
    page.click("#delete-topic button")
    expect(page.locator("#flash-ok")).to_contain_text("deleted DashScratch")
    assert "DashScratch" not in admin_call(namesrv, "list_topics")
    page.goto(url + "topic?name=NoSuchTopic")
    assert "no route for topic 'NoSuchTopic'" in page.locator(".error").inner_text()
    # a RocketMQ 5.x message type chosen on the form is the topic's message.type attribute
    page.goto(url + "topics")
    page.fill("#create-topic input[name=topic]", "DashFifo")
    page.select_option("#create-topic select[name=type]", "FIFO")
    page.click("#create-topic button")
    expect(page.locator("#flash-ok")).to_contain_text("created DashFifo")
    assert page.locator("#topic-type").inner_text() == "message type (RocketMQ 5.x clients): FIFO"
    assert admin_call(namesrv, "topic_attributes", "DashFifo") == {"message.type": "FIFO"}


def test_login_with_a_user_file(cluster, browser, tmp_path):
    namesrv, _, _, _ = cluster
    line = subprocess.run([*PYRMQ, "dashboard", "hash-password", "--user", "ops"], input="s3cret\n", text=True,
                          capture_output=True, timeout=30, check=True).stdout.strip()
    assert line.startswith("ops:scrypt$32768$8$1$") and "s3cret" not in line
    (tmp_path / "users").write_text(f"# dashboard users\n{line}\n")
    proc = subprocess.Popen([*PYRMQ, "dashboard", "--namesrv", namesrv, "--port", "0", "--users", str(tmp_path / "users")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        url = read_until(proc, r"pyrmq dashboard: (http://\S+/)", 30).group(1)
        context = browser.new_context()
        context.set_default_timeout(WAIT_MS)
        page = context.new_page()
        page.goto(url + "groups")
        expect(page.locator("h1")).to_have_text("Log in")
        page.fill("#user", "ops")
        page.fill("#password", "wrong")
        page.click("#login")
        expect(page.locator("#login-error")).to_have_text("wrong user name or password")
        page.fill("#user", "ops")
        page.fill("#password", "s3cret")
        page.click("#login")
        expect(page.locator("h1")).to_have_text("Consumer groups")
        assert "ops" in page.locator("header .who").inner_text()
        page.screenshot(path=str(tmp_path / "dashboard-login.png"))
        # the forms work logged in: create a topic, delete it (its name typed)
        page.goto(url + "topics")
        page.fill("#create-topic input[name=topic]", "DashLoggedIn")
        page.fill("#create-topic input[name=queues]", "1")
        page.click("#create-topic button")
        expect(page.locator("#flash-ok")).to_contain_text("created DashLoggedIn with 1 queues")
        assert "DashLoggedIn" in admin_call(namesrv, "list_topics")
        page.fill("#delete-topic input[name=confirm]", "DashLoggedIn")
        page.click("#delete-topic button")
        expect(page.locator("#flash-ok")).to_contain_text("deleted DashLoggedIn")
        assert "DashLoggedIn" not in admin_call(namesrv, "list_topics")
        page.click("#logout")
        expect(page.locator("h1")).to_have_text("Log in")
        page.goto(url + "cluster")
        expect(page.locator("h1")).to_have_text("Log in")
        context.close()
    finally:
        stop(proc)


# -- as a hostile page would ---------------------------------------------------------------------------------------


class Attacker:
    """Another web site on loopback: a plain HTTP server on 127.0.0.1 on a port of its own (reached as
    ``http://localhost:PORT2`` or ``http://127.0.0.1:PORT2``), serving the pages a test gives it."""

    def __init__(self) -> None:
        self.pages: dict[str, str] = {}
        pages = self.pages

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                body = pages.get(self.path.split("?")[0])
                data = (body or "not here").encode()
                self.send_response(200 if body else 404)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture
def attacker():
    site = Attacker()
    yield site
    site.close()


def broker_state(namesrv: str) -> dict:
    """What the dashboard's writes could change, as the broker reports it."""
    return {
        "topics": sorted(admin_call(namesrv, "list_topics")),
        "stats": {t: [(mq.broker_name, mq.queue_id, lo, hi) for mq, lo, hi, _ in admin_call(namesrv, "topic_stats", t)]
                  for t in ("DashOrders", "DashFail", "%DLQ%dash_failing")},
        "progress": [(p.broker_name, p.queue_id, p.consumer_offset)
                     for p in admin_call(namesrv, "group_progress", "dash_batch", "DashOrders")],
    }


def hostile_writes(sent: list[dict]) -> dict[str, dict[str, str]]:
    """A form for every POST route, filled to do harm (names typed where the dashboard asks for them)."""
    order7 = next(s for s in sent if s["key"] == "order-7")
    return {
        "topics/create": {"topic": "Planted", "queues": "1"},
        "topics/delete": {"topic": "DashOrders", "confirm": "DashOrders"},
        "topic/send": {"topic": "DashOrders", "body": "planted", "keys": "planted"},
        "group/reset": {"group": "dash_batch", "topic": "DashOrders", "how": "time", "time": "2000-01-01T00:00:00",
                        "confirm": "dash_batch"},
        "message/resend": {"id": order7["offset_msg_id"], "topic": "DashOrders", "target": "dash_live|any"},
        "dlq/resend": {"group": "dash_failing", "all": "1", "confirm": "dash_failing"},
        "login": {"user": "admin", "password": "admin"},
        "logout": {},
    }


def test_forms_on_another_origin_on_loopback_change_nothing(cluster, browser, attacker, tmp_path):
    """The operator has the dashboard open (a session cookie); a page from another origin on loopback submits a form
    to each POST route, carrying even the session's real token (as if it had leaked). Every one is refused with 403;
    the broker, and the operator's session, are unchanged."""
    namesrv, url, sent, _ = cluster
    context = browser.new_context()
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    page.goto(url + "topic?name=DashOrders")
    token = page.locator("#send-test input[name=csrf_token]").get_attribute("value")
    session = [c for c in context.cookies() if c["name"].startswith("pyrmq_dashboard_")]
    assert len(session) == 1 and session[0]["httpOnly"] and session[0]["sameSite"] == "Strict"
    writes = hostile_writes(sent)
    assert sorted("/" + r for r in writes) == sorted(r.path for r in routes_of_the_app() if "POST" in r.methods)
    forms = "".join(
        f'<form method="post" action="{url}{route}" id="f{i}">'
        + "".join(f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
                  for k, v in {**fields, "csrf_token": token}.items())
        + f'<button id="b{i}">{route}</button></form>' for i, (route, fields) in enumerate(writes.items()))
    attacker.pages["/forms"] = f"<!doctype html><title>win a prize</title>{forms}"
    before = broker_state(namesrv)
    for origin in (f"http://localhost:{attacker.port}", f"http://127.0.0.1:{attacker.port}"):  # cross-site, same-site
        for i, route in enumerate(writes):
            page.goto(f"{origin}/forms")
            with page.expect_response(lambda r: r.request.method == "POST" and r.url.startswith(url)) as posted:
                page.click(f"#b{i}")
            assert posted.value.status == 403, (origin, route)
            expect(page.locator("h1")).to_have_text("Refused: not sent by the dashboard's own page")
            assert "another site" in page.locator("#refused").inner_text()
        page.screenshot(path=str(tmp_path / "dashboard-cross-site-refused.png"))
    assert broker_state(namesrv) == before
    assert "Planted" not in before["topics"]
    # the operator's session survived (no log-out from outside) and its forms still work
    assert [c for c in context.cookies() if c["name"].startswith("pyrmq_dashboard_")] == session
    page.goto(url + "topic?name=DashOrders")
    assert page.locator("#send-test input[name=csrf_token]").get_attribute("value") == token
    context.close()


def routes_of_the_app():
    from pyrmq.plugins.dashboard.app import build_app
    from pyrmq.plugins.dashboard.auth import Sessions
    from pyrmq.plugins.dashboard.backend import Backend
    from pyrmq.plugins.dashboard.security import Security

    return build_app(Backend("127.0.0.1:1"), Sessions(), Security.make("127.0.0.1", 1)).app.routes


def test_a_dns_rebinding_page_reads_nothing_and_writes_nothing(cluster, browser):
    """A page the attacker served as rebind.pyrmq.test:PORT, whose name now resolves to 127.0.0.1 (the browser's
    resolver maps it, as the attacker's DNS would): same-origin with itself, so its script may read what that
    address answers, fetch a page for a token and post with it. The dashboard answers 421 to its Host; the broker is
    unchanged."""
    namesrv, url, _, _ = cluster
    port = int(url.rstrip("/").rsplit(":", 1)[1])
    evil = f"http://{REBIND_NAME}:{port}/"
    context = browser.new_context()
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    page.goto(url + "cluster")  # the operator's session on 127.0.0.1 (its cookie is not the rebinding page's)
    before = broker_state(namesrv)
    script = """
      const show = (id, text) => { document.getElementById(id).textContent = text; };
      (async () => {
        try {
          const read = await fetch("/cluster");
          show("read", read.status + " " + await read.text());
          const form = await (await fetch("/topic?name=DashOrders")).text();
          const token = (form.match(/name="csrf_token" value="([0-9a-f]+)"/) || ["", ""])[1];
          const wrote = await fetch("/topics/delete", {method: "POST",
            headers: {"content-type": "application/x-www-form-urlencoded"},
            body: "topic=DashOrders&confirm=DashOrders&csrf_token=" + token});
          show("write", wrote.status + " " + await wrote.text());
        } catch (e) { show("write", "error " + e); }
        document.body.dataset.done = "1";
      })();
    """
    attack = f'<!doctype html><body><pre id="read"></pre><pre id="write"></pre><script>{script}</script></body>'
    # the attacker's own server answered this first request, before the name was re-pointed
    page.route(evil, lambda route: route.fulfill(status=200, content_type="text/html", body=attack))
    page.goto(evil)
    expect(page.locator("body[data-done='1']")).to_have_count(1)
    read, wrote = page.locator("#read").inner_text(), page.locator("#write").inner_text()
    assert read.startswith("421 ") and f"host &#x27;{REBIND_NAME}&#x27;" in read and "broker-a" not in read, read
    assert wrote.startswith("421 "), wrote
    # the browser sent there directly
    page.unroute(evil)
    response = page.goto(evil + "cluster")
    assert response.status == 421 and "broker-a" not in page.content()
    assert broker_state(namesrv) == before
    context.close()
