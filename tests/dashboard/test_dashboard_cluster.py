"""The dashboard's cluster page for a master/slave group (real sockets, in-process roles, the dashboard's own HTTP
server): both brokers listed with their role and replication lag, read from GET_BROKER_RUNTIME_INFO."""

from __future__ import annotations

import re
from pathlib import Path

import trio

from pyrmq.client import Admin
from pyrmq.kernel.bundles import packaged_bundle_path
from pyrmq.plugins.dashboard.plugin import bind, serve_dashboard


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


def fast_sync_bundle(tmp_path: Path) -> str:
    path = tmp_path / "slave.toml"
    path.write_text(packaged_bundle_path("broker").read_text()
                    + '\n[plugins."pyrmq.plugins.broker.ha.plugin"]\nslaveSyncInterval = 300\nslaveSyncFirstDelay = 100\n')
    return str(path)


async def test_the_cluster_page_shows_each_brokers_replication_lag(start_role, tmp_path, nursery, until):
    master = await start_role("dev", {"broker.brokerRole": "SYNC_MASTER", "broker.haSendHeartbeatInterval": 200})
    namesrv = master.listening["namesrv"]
    await start_role(fast_sync_bundle(tmp_path), {"broker.brokerRole": "SLAVE", "broker.brokerId": 1,
                                                  "broker.namesrvAddr": namesrv, "broker.haSendHeartbeatInterval": 200})
    async with Admin(namesrv) as admin:
        async def both_registered():
            info = await admin.cluster_info()
            return len(info.brokers.get("broker-a").broker_addrs) == 2 if "broker-a" in info.brokers else False

        await until(both_registered, "master and slave registered")
    url = await nursery.start(lambda task_status: serve_dashboard(namesrv, bind("127.0.0.1", 0), task_status=task_status))

    async def lag_rows():
        status, page = await http_get(url + "cluster")
        assert status == 200
        rows = re.findall(r"<tr>(.*?)</tr>", page, re.S)
        cells = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in rows]
        found = {c[2]: c[8] for c in cells if len(c) > 8}
        return found if found.get("MASTER") == "0 B" and found.get("SLAVE (1)") == "0 B" else None

    found = await until(lag_rows, "the cluster page showing master and slave caught up", timeout=30)
    assert found == {"MASTER": "0 B", "SLAVE (1)": "0 B"}
    _, page = await http_get(url + "cluster")
    assert "no slaves" not in page and "Replication lag: on a master" in page
