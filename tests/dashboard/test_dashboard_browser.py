"""The web dashboard in a real browser (Debian's chromium-headless-shell driven by Playwright) against a live
``pyrmq dev`` subprocess with real traffic (tests/dashboard/traffic.py): every page loads, a message query, a DLQ
resend and an offset reset are clicked through, and what the pages show is checked against what the broker holds
(asked through the client library's Admin). Screenshots land in the test's tmp dir (dashboard-*.png)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from pyrmq.client import Admin
from pyrmq.kernel.bundles import packaged_bundle_path

CHROMIUM = shutil.which("chromium-headless-shell")
TRAFFIC = Path(__file__).with_name("traffic.py")
PYRMQ = [sys.executable, "-m", "pyrmq"]


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
        b = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"], timeout=30_000)
        yield b
        b.close()


@pytest.fixture
def page(browser, tmp_path):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(20_000)
    pg = context.new_page()
    shots = iter(range(100))

    def shot(name: str) -> None:
        pg.screenshot(path=str(tmp_path / f"dashboard-{next(shots):02d}-{name}.png"), full_page=True)

    pg.shot = shot
    yield pg
    context.close()


def test_every_page_loads_and_shows_what_the_broker_holds(cluster, page):
    namesrv, url, sent, _ = cluster
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
    assert page.locator("table.messages tr").count() == 1 + 10
    # by key: exactly the message sent with it; then its detail page, as text, JSON and hex
    order7 = next(s for s in sent if s["key"] == "order-7")
    page.fill("#query-key input[name=topic]", "DashOrders")
    page.fill("#query-key input[name=key]", "order-7")
    page.click("#query-key button")
    assert page.locator("#result-count").inner_text() == "1 messages with key order-7"
    page.click(f"table.messages a:text('{order7['msg_id']}')")
    facts = dict(tuple(r.locator("td").all_inner_texts()) for r in page.locator("table.facts tr").all())
    assert facts["message id (UNIQ_KEY)"] == order7["msg_id"] and facts["offset message id"] == order7["offset_msg_id"]
    held = admin_call(namesrv, "query_message_by_id", order7["offset_msg_id"])
    assert json.loads(page.locator("#body").inner_text()) == json.loads(held.body) == {"order": 7, "item": "book"}
    assert facts["queue"] == str(held.queue_id) and facts["queue offset"] == str(held.queue_offset)
    consumed = dict(tuple(r.locator("td").all_inner_texts()) for r in page.locator("table.consumed tr").all()[1:])
    assert consumed.get("dash_batch") == "consumed"
    page.shot("message-detail")
    page.click("#view-hex")
    assert page.locator("#body").inner_text().startswith("00000000  " + held.body[:16].hex(" "))
    page.shot("message-hex")
    # resend to a group member (CONSUME_MESSAGE_DIRECTLY): the page says what the broker answered
    page.select_option("#consume-directly select", index=0)
    page.click("#consume-directly button")
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
        assert page.locator("h1").inner_text() == f"Message {order7['msg_id']}"


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
    assert page.locator("#flash-ok").inner_text() == "re-sent 1 message"
    page.click("#resend-all button")
    assert page.locator("#flash-ok").inner_text() == "re-sent 5 messages"
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
    page.click("#reset-offset button[value=time]")
    assert "dash_batch on DashOrders reset to" in page.locator("#flash-ok").inner_text()
    assert page.locator("#group-lag").inner_text() == "total lag 30"
    progress = admin_call(namesrv, "group_progress", "dash_batch", "DashOrders")
    shown = [r.locator("td").all_inner_texts() for r in page.locator("table.progress tr").all()[1:]]
    assert [(int(r[2]), int(r[4]), int(r[5])) for r in shown] == [(p.queue_id, p.consumer_offset, p.lag) for p in progress]
    assert sum(p.lag for p in progress) == 30 and all(p.consumer_offset == 0 for p in progress)
    page.shot("group-reset")
    page.click("#skip-backlog")
    assert page.locator("#group-lag").inner_text() == "total lag 0"
    assert sum(p.lag for p in admin_call(namesrv, "group_progress", "dash_batch", "DashOrders")) == 0


def test_topic_create_send_and_delete(cluster, page):
    namesrv, url, _, _ = cluster
    page.goto(url + "topics")
    page.fill("#create-topic input[name=topic]", "DashScratch")
    page.fill("#create-topic input[name=queues]", "2")
    page.click("#create-topic button")
    assert "created DashScratch with 2 queues" in page.locator("#flash-ok").inner_text()
    page.fill("#send-test input[name=keys]", "scratch-1")
    page.click("#send-test button")
    assert page.locator("#flash-ok, #flash-err").inner_text().startswith("sent: msgId ")
    assert page.locator("#topic-total").inner_text().startswith("1 messages")
    found = admin_call(namesrv, "query_message_by_key", "DashScratch", "scratch-1")
    assert [m.body for m in found] == [b"hello from the pyrmq dashboard"]
    page.click("#delete-topic button")
    assert "deleted DashScratch" in page.locator("#flash-ok").inner_text()
    assert "DashScratch" not in admin_call(namesrv, "list_topics")
    page.goto(url + "topic?name=NoSuchTopic")
    assert "no route for topic 'NoSuchTopic'" in page.locator(".error").inner_text()


def test_login_with_a_user_file(cluster, browser, tmp_path):
    namesrv, _, _, _ = cluster
    line = subprocess.run([*PYRMQ, "dashboard", "hash-password", "--user", "ops"], input="s3cret\n", text=True,
                          capture_output=True, timeout=30, check=True).stdout.strip()
    assert line.startswith("ops:pbkdf2_sha256$") and "s3cret" not in line
    (tmp_path / "users").write_text(f"# dashboard users\n{line}\n")
    proc = subprocess.Popen([*PYRMQ, "dashboard", "--namesrv", namesrv, "--port", "0", "--users", str(tmp_path / "users")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        url = read_until(proc, r"pyrmq dashboard: (http://\S+/)", 30).group(1)
        context = browser.new_context()
        context.set_default_timeout(20_000)
        page = context.new_page()
        page.goto(url + "groups")
        assert page.locator("h1").inner_text() == "Log in"
        page.fill("#user", "ops")
        page.fill("#password", "wrong")
        page.click("#login")
        assert page.locator("#login-error").inner_text() == "wrong user name or password"
        page.fill("#user", "ops")
        page.fill("#password", "s3cret")
        page.click("#login")
        assert page.locator("h1").inner_text() == "Consumer groups"
        assert "ops" in page.locator("header .who").inner_text()
        page.screenshot(path=str(tmp_path / "dashboard-login.png"))
        page.click("header .who a")
        page.goto(url + "cluster")
        assert page.locator("h1").inner_text() == "Log in"
        context.close()
    finally:
        stop(proc)
