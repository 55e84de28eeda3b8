"""The dashboard against a `pyrmq dev` with ACL on (real sockets, the dashboard's own HTTP server): signed with an
account's credentials its pages load; without them the page says the broker refused it and why (HTTP 403)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import trio

from pyrmq.client import Admin
from pyrmq.plugins.dashboard.plugin import bind, serve_dashboard

ADMIN = ("DashAdmin01", "DashSecret01")

PLAIN_ACL = f"""\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
"""


async def http_get(url: str) -> tuple[int, str]:
    host, port, path = re.match(r"http://([^:/]+):(\d+)(/.*)", url).groups()
    with trio.fail_after(15):
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


@pytest.fixture
async def acl_dev(start_role, tmp_path, monkeypatch):
    home = tmp_path / "rocketmq"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    monkeypatch.setenv("ROCKETMQ_HOME", str(home))
    kernel = await start_role("dev", {"broker.aclEnable": True})
    namesrv = kernel.listening["namesrv"]
    async with Admin(namesrv, credentials=ADMIN) as admin:
        with trio.fail_after(10):
            while not (await admin.cluster_info()).brokers:
                await trio.sleep(0.02)
        await admin.create_topic("AclShown", 3)
    return namesrv


async def test_dashboard_signs_with_its_credentials_and_shows_a_refusal_without(acl_dev, nursery):
    namesrv = acl_dev
    signed = await nursery.start(lambda task_status: serve_dashboard(
        namesrv, bind("127.0.0.1", 0), interval=60, credentials=ADMIN, task_status=task_status))
    unsigned = await nursery.start(lambda task_status: serve_dashboard(
        namesrv, bind("127.0.0.1", 0), interval=60, task_status=task_status))

    status, page = await http_get(signed + "topic?name=AclShown")
    assert status == 200, page
    assert "AclShown" in page and "refused" not in page.lower()
    assert len(re.findall(r"<tr", page)) >= 1 + 3  # header and the topic's three queues

    status, page = await http_get(unsigned + "topic?name=AclShown")
    assert status == 403
    assert "Refused by the broker" in page and 'id="refused"' in page
    assert "ACL refused request" in page  # the broker's own remark, naming the request
    assert "--access-key" in page


def test_dashboard_command_wants_both_keys():
    proc = subprocess.run([sys.executable, "-m", "pyrmq", "dashboard", "--port", "0", "--access-key", "OnlyKey"],
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode != 0
    assert "give both --access-key and --secret-key" in proc.stderr
