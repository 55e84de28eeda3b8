"""Broker <-> name servers (spec 7.2): register at start, every registerNameServerPeriod, at once when a topic is
created, and unregister on shutdown. Each name server is independent; a failure with one does not stop the others.
"""

from __future__ import annotations

import json
import logging
import zlib
from typing import Any

import trio

from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.errors import RemotingError
from pyrmq.remoting.headers import RegisterBrokerRequestHeader, UnRegisterBrokerRequestHeader

log = logging.getLogger("pyrmq.broker.registration")


class NameServerRegistration:
    """Keeps this broker registered with every configured name server."""

    def __init__(self, settings: Any, client: Any, topic_wrapper: Any, broker_addr: str) -> None:
        self.settings = settings
        self.client = client
        self.topic_wrapper = topic_wrapper  # () -> TopicConfigSerializeWrapper dict
        #: ``brokerIP1:port`` registered (the real port once the listener is up)
        self.broker_addr = broker_addr
        #: name servers to register with (namesrvAddr; the embedded one in `pyrmq dev`)
        self.namesrv_addresses = settings.namesrv_addresses
        self._wakeup = trio.Event()
        #: HA address of the master learned from registration (slaves)
        self.master_addr = ""
        self.master_ha_addr = ""
        #: the HA address the replicator really listens on (None: listenPort + 1, RocketMQ's haListenPort)
        self.ha_addr: str | None = None
        #: the id registered: brokerId, or what automatic failover says (0 while this replica is the elected master)
        self.broker_id = settings.brokerId
        #: the master's epoch under automatic failover, sent as dataVersion.stateVersion (None: not sent, as 4.x)
        self.state_version: int | None = None

    @property
    def ha_server_addr(self) -> str:
        if self.ha_addr:
            return self.ha_addr
        port = int(self.broker_addr.rpartition(":")[2] or 0)
        return f"{self.settings.brokerIP2 or self.settings.brokerIP1}:{port + 1}"

    def _register_request(self) -> RemotingCommand:
        wrapper = self.topic_wrapper()
        if self.state_version is not None:
            wrapper["dataVersion"] = {**wrapper["dataVersion"], "stateVersion": self.state_version}
        body = json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": wrapper}, separators=(",", ":")).encode()
        header = RegisterBrokerRequestHeader(
            broker_name=self.settings.brokerName,
            broker_addr=self.broker_addr,
            cluster_name=self.settings.brokerClusterName,
            ha_server_addr=self.ha_server_addr,
            broker_id=self.broker_id,
            compressed=False,
            body_crc32=zlib.crc32(body) & 0x7FFFFFFF,
        )
        return RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body)

    async def register_all(self, *, oneway: bool = False) -> int:
        """REGISTER_BROKER to every name server concurrently; returns how many accepted."""
        accepted = 0

        async def one(addr: str) -> None:
            nonlocal accepted
            request = self._register_request()
            try:
                if oneway:
                    await self.client.invoke_oneway(addr, request.mark_oneway())
                    accepted += 1
                    return
                response = await self.client.invoke(addr, request, timeout=self.settings.registerBrokerTimeoutMills / 1000)
            except RemotingError as exc:
                log.warning("register broker %s with name server %s failed: %s", self.settings.brokerName, addr, exc)
                return
            if response.code != ResponseCode.SUCCESS:
                log.warning("name server %s refused registration: %s %s", addr, response.code, response.remark)
                return
            accepted += 1
            self.master_addr = response.ext_fields.get("masterAddr", "") or self.master_addr
            self.master_ha_addr = response.ext_fields.get("haServerAddr", "") or self.master_ha_addr

        async with trio.open_nursery() as nursery:
            for addr in self.namesrv_addresses:
                nursery.start_soon(one, addr)
        return accepted

    def trigger(self) -> None:
        """Register again soon (a topic was created)."""
        self._wakeup.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        if not self.namesrv_addresses:
            log.warning("broker %s has no namesrvAddr: clients cannot find it", self.settings.brokerName)
            task_status.started()
            return
        await self.register_all()
        task_status.started()
        period = self.settings.registerNameServerPeriod / 1000
        deadline = trio.current_time() + 10  # first periodic run after 10 s (spec 7.2)
        while True:
            with trio.move_on_at(deadline):
                await self._wakeup.wait()
            woken = self._wakeup.is_set()
            self._wakeup = trio.Event()
            await self.register_all(oneway=woken)
            if not woken:
                deadline = trio.current_time() + period

    async def unregister_all(self) -> None:
        """UNREGISTER_BROKER to every name server; at shutdown, so through a client of its own (the service
        nursery is gone by then), at most 3 s per name server."""
        from pyrmq.remoting.client import RemotingClient

        header = UnRegisterBrokerRequestHeader(
            broker_name=self.settings.brokerName,
            broker_addr=self.broker_addr,
            cluster_name=self.settings.brokerClusterName,
            broker_id=self.broker_id,
        )
        async with RemotingClient() as client:
            for addr in self.namesrv_addresses:
                try:
                    with trio.move_on_after(3):
                        request = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, header.to_ext_fields())
                        await client.invoke(addr, request)
                except RemotingError as exc:
                    log.info("unregister from %s failed: %s", addr, exc)
