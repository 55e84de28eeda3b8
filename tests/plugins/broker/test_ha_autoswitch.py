"""RocketMQ 5.x's AutoSwitch HA frames (plugins/broker/ha/autoswitch.py), sans-IO: the byte layouts of
AutoSwitchHAClient / AutoSwitchHAConnection (5.1.1 - 5.3.3), frames split anywhere, malformed frames refused, and the
epoch history a master sends and a returning replica reads its truncation point from."""

from __future__ import annotations

import struct

import pytest

from pyrmq.plugins.broker.ha import autoswitch as wire
from pyrmq.plugins.broker.ha.autoswitch import (
    EpochEntry,
    EpochHistory,
    MasterFrameReader,
    MasterHandshake,
    SlaveAck,
    SlaveFrameReader,
    SlaveHandshake,
    TransferHeader,
    history,
    truncation_point,
)
from pyrmq.remoting.errors import ProtocolError


def test_the_frames_have_5x_byte_layouts():
    # slave handshake: state HANDSHAKE(1) i32, isSyncFromLastFile i16, isAsyncLearner i16, slaveBrokerId i64
    assert wire.pack_slave_handshake(3, sync_from_last_file=True) == bytes.fromhex(
        "00000001" "0001" "0000" "0000000000000003")
    # slave ACK: state TRANSFER(2) i32, max offset i64
    assert wire.pack_ack(0x1234) == bytes.fromhex("00000002" "0000000000001234")
    # master handshake: state, body size, max offset, epoch; then (epoch i32, start offset i64) per entry
    assert wire.pack_master_handshake(500, 2, [EpochEntry(1, 0), EpochEntry(2, 300)]) == bytes.fromhex(
        "00000001" "00000018" "00000000000001f4" "00000002"
        "00000001" "0000000000000000" "00000002" "000000000000012c")
    # transfer header: state, body size, offset, epoch, epoch start offset, confirm offset
    assert wire.pack_transfer(400, 16, EpochEntry(2, 300), 350) == bytes.fromhex(
        "00000002" "00000010" "0000000000000190" "00000002" "000000000000012c" "000000000000015e")


def test_the_master_reads_the_slaves_frames_split_at_every_byte():
    stream = wire.pack_slave_handshake(7, sync_from_last_file=False, async_learner=True) + wire.pack_ack(0) + wire.pack_ack(99)
    reader = SlaveFrameReader()
    frames = [frame for i in range(len(stream)) for frame in reader.feed(stream[i : i + 1])]
    assert frames == [SlaveHandshake(7, False, True), SlaveAck(0), SlaveAck(99)]
    assert not reader.buffer


@pytest.mark.parametrize(("frames", "why"), [
    (struct.pack(">iq", 7, 0), "state 7"),
    (wire.pack_ack(5), "before the slave's HANDSHAKE"),
    (wire.pack_slave_handshake(1, sync_from_last_file=True) * 2, "second HANDSHAKE"),
    (struct.pack(">ihhq", 1, 0, 0, -2), "slaveBrokerId -2"),
    (struct.pack(">ihhq", 1, 2, 0, 1), "flags 2/0"),
    (wire.pack_slave_handshake(1, sync_from_last_file=True) + struct.pack(">iq", 2, -1), "negative offset"),
])
def test_the_master_refuses_malformed_slave_frames(frames, why):
    with pytest.raises(ProtocolError, match=why):
        SlaveFrameReader().feed(frames)


def _drain(reader: MasterFrameReader) -> list:
    out = []
    while (got := reader.next_frame()) is not None:
        frame, body = got
        out.append((frame, bytes(body)))
    return out


def test_the_slave_reads_the_masters_frames_split_at_every_byte():
    entries = [EpochEntry(1, 0), EpochEntry(4, 120)]
    stream = (wire.pack_master_handshake(200, 4, entries)
              + wire.pack_transfer(120, 5, entries[1], 100) + b"abcde"
              + wire.pack_transfer(125, 0, entries[1], 125))
    reader = MasterFrameReader()
    frames = []
    for i in range(len(stream)):
        reader.feed(stream[i : i + 1])
        frames += _drain(reader)
    assert frames == [
        (MasterHandshake(200, 4, tuple(entries)), b""),
        (TransferHeader(5, 120, 4, 120, 100), b"abcde"),
        (TransferHeader(0, 125, 4, 120, 125), b""),
    ]


@pytest.mark.parametrize(("frames", "why"), [
    (struct.pack(">iiqi", 3, 0, 0, 0), "state 3"),
    (wire.pack_transfer(0, 0, EpochEntry(1, 0), 0), "before the master's HANDSHAKE"),
    (struct.pack(">iiqi", 1, 13, 0, 0) + bytes(13), "not a list of epoch entries"),
    (struct.pack(">iiqi", 1, -12, 0, 0), "negative body size"),
    (wire.pack_master_handshake(0, 1, []) + struct.pack(">iiqiqq", 2, 8 << 20, 0, 1, 0, 0), "at most"),
    (wire.pack_master_handshake(0, 1, []) * 2, "second HANDSHAKE"),
])
def test_the_slave_refuses_malformed_master_frames(frames, why):
    reader = MasterFrameReader()
    reader.feed(frames)
    with pytest.raises(ProtocolError, match=why):
        _drain(reader)


def test_a_history_leaves_out_the_epochs_an_unclean_election_cut_away():
    # epoch 3 began at 900 but epoch 4's master (elected unclean) had only 700 bytes: epoch 3 is not its history
    entries = [EpochEntry(1, 0), EpochEntry(2, 500), EpochEntry(3, 900), EpochEntry(4, 700)]
    assert history(entries) == (EpochEntry(1, 0), EpochEntry(2, 500), EpochEntry(4, 700))
    # a replica whose last epoch was 2 or 3 leaves this history where epoch 4 began; one of epoch 4 has nothing to cut
    assert truncation_point(history(entries), 2) == 700
    assert truncation_point(history(entries), 3) == 700
    assert truncation_point(history(entries), 4) is None


def test_an_epoch_history_names_the_epoch_of_each_offset_and_where_it_ends():
    epochs = EpochHistory([EpochEntry(2, 500), EpochEntry(1, 0), EpochEntry(3, 500), EpochEntry(4, 800)])
    assert epochs.at(0) == (EpochEntry(1, 0), 500)
    assert epochs.at(499) == (EpochEntry(1, 0), 500)
    # epoch 2 began and ended at 500 (no byte of it): offset 500 is epoch 3's
    assert epochs.at(500) == (EpochEntry(3, 500), 800)
    assert epochs.at(800) == (EpochEntry(4, 800), -1)
    assert epochs.last == EpochEntry(4, 800)
