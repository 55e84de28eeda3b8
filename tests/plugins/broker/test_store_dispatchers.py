"""pyrmq_register_store_dispatchers: a plugin's dispatcher joins the broker store's one dispatcher list and is
called once per appended record, in order, by put_message and put_messages."""

from __future__ import annotations

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.plugins.broker.core import BROKER
from pyrmq.store import MessageRecord


class Audit:
    """A feature plugin with one store dispatcher that records what it sees."""

    def __init__(self, name: str, order: int, seen: list) -> None:
        self.name, self.order, self.seen = name, order, seen
        self.store = None

    @hookimpl
    def pyrmq_register_store_dispatchers(self, kernel):
        self.store = kernel.state.get(BROKER).store
        return [self]

    def dispatch(self, request):
        # what a consumer could read at that moment: the consume queue has run before every plugin dispatcher
        readable = self.store.get_max_offset_in_queue(request.topic, request.queue_id) > request.queue_offset
        self.seen.append((self.name, request.topic, request.queue_offset, request.commit_log_offset, readable))


def msg(body: bytes, queue_id: int = 0) -> MessageRecord:
    return MessageRecord("AuditTopic", queue_id, body, properties={"TAGS": "t"}, born_host=("127.0.0.1", 1),
                         store_host=("127.0.0.1", 2))


async def test_a_plugins_dispatcher_sees_every_appended_record_once_in_order(start_role):
    seen: list = []
    kernel = await start_role("broker", extra_plugins=[Audit("late", 30, seen), Audit("early", 5, seen)])
    store = kernel.state.get(BROKER).store
    # the store's own dispatchers first, then the plugins' and the long-polling wake-up by order
    assert [(d.name, d.order) for d in store.dispatchers] == [
        ("consume_queue", 0), ("early", 5), ("index", 10), ("long-polling", 20), ("pop-long-polling", 21),
        ("ha-transfer-wakeup", 30), ("late", 30)
    ]

    single = store.put_message(msg(b"one"))
    batch = store.put_messages([msg(b"two"), msg(b"three"), msg(b"four")])
    assert single.is_ok and batch.is_ok
    offsets = [single.append.wrote_offset, *batch.append.offsets]
    # a batch goes to each dispatcher whole (Dispatchers.dispatch_batch): "early" sees all three, then "late"
    assert seen == [
        (name, "AuditTopic", queue_offset, offset, True)
        for records in ([0], [1, 2, 3])
        for name in ("early", "late")
        for queue_offset, offset in ((q, offsets[q]) for q in records)
    ]
