"""Dynamixel Protocol 2.0 framing: known packets, stuffing, and a fuzzed decoder."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from mbctl.hardware.protocol2 import (
    HEADER,
    Instruction,
    Packet,
    PacketDecoder,
    crc16,
    encode_instruction,
    encode_status,
    stuff,
    unstuff,
)


def test_ping_packet_and_crc_match_the_manual():
    """Ping to ID 1 is FF FF FD 00 01 03 00 01 with CRC bytes 19 4E; the manual's status reply checks."""
    assert encode_instruction(1, Instruction.PING) == bytes.fromhex("ff ff fd 00 01 03 00 01 19 4e")
    assert encode_status(1, 0, bytes([0x06, 0x04, 0x26])) == bytes.fromhex("ff ff fd 00 01 07 00 55 00 06 04 26 65 5d")
    assert crc16(bytes.fromhex("ff ff fd 00 01 03 00 01")) == 0x4E19


def test_stuffing_inserts_fd_after_every_header_pattern():
    assert stuff(bytes.fromhex("03 ff ff fd 10")) == bytes.fromhex("03 ff ff fd fd 10")
    assert stuff(bytes.fromhex("ff ff fd fd")) == bytes.fromhex("ff ff fd fd fd")
    assert unstuff(bytes.fromhex("ff ff fd fd fd")) == bytes.fromhex("ff ff fd fd")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_stuffing_round_trips_and_hides_headers(payload):
    """unstuff(stuff(x)) == x, and a stuffed payload never contains FF FF FD followed by a non-FD."""
    s = stuff(payload)
    assert unstuff(s) == payload
    for i in range(len(s) - 3):
        if s[i : i + 3] == b"\xff\xff\xfd":
            assert s[i + 3] == 0xFD


@settings(max_examples=300, deadline=None)
@given(packet_id=st.integers(0, 0xFD), params=st.binary(max_size=40), status=st.booleans(), error=st.integers(0, 255))
def test_encoded_packets_decode_back(packet_id, params, status, error):
    frame = encode_status(packet_id, error, params) if status else encode_instruction(packet_id, Instruction.WRITE, params)
    decoder = PacketDecoder()
    expected = Packet(packet_id, Instruction.STATUS, params, error) if status else Packet(packet_id, Instruction.WRITE, params)
    assert decoder.feed(frame) == [expected]
    assert decoder.stats.bad_frames == 0 and decoder.stats.garbage_bytes == 0


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(st.binary(max_size=50), max_size=20))
def test_decoder_survives_random_streams(chunks):
    """Random bytes: no exception, no hang, bounded buffer."""
    decoder = PacketDecoder()
    start = time.perf_counter()
    for chunk in chunks:
        decoder.feed(chunk)
        assert len(decoder._buf) <= 7 + decoder.max_length
    assert time.perf_counter() - start < 5.0


@settings(max_examples=300, deadline=None)
@given(
    frames=st.lists(st.tuples(st.integers(0, 0xFD), st.binary(max_size=20)), min_size=1, max_size=6),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=4),
    split=st.integers(1, 30),
)
def test_mutated_frames_are_counted_not_delivered(frames, flips, split):
    """Each valid frame is decoded; after byte flips, every frame either decodes intact or is counted bad/garbage."""
    stream = bytearray(b"".join(encode_instruction(i, Instruction.WRITE, p) for i, p in frames))
    originals = [Packet(i, Instruction.WRITE, p) for i, p in frames]
    for pos, mask in flips:
        stream[pos % len(stream)] ^= mask
    decoder = PacketDecoder()
    packets = []
    for k in range(0, len(stream), split):
        packets += decoder.feed(bytes(stream[k : k + split]))
    if not flips:
        assert packets == originals
    else:
        assert all(p in originals for p in packets)  # CRC-16 lets no damaged frame through
        lost = len(originals) - len(packets)
        s = decoder.stats
        # a damaged frame shows up as a CRC or length error, or its bytes are skipped as garbage
        assert lost == 0 or s.bad_frames + s.garbage_bytes > 0 or len(decoder._buf) > 0
        assert s.packets == len(packets)


def test_garbage_before_a_frame_is_counted():
    decoder = PacketDecoder()
    frame = encode_instruction(7, Instruction.PING)
    assert decoder.feed(b"\x01\x02\xff\x00" + frame) == [Packet(7, Instruction.PING, b"")]
    assert decoder.stats.garbage_bytes == 4
    bad = bytearray(frame)
    bad[-1] ^= 1
    assert decoder.feed(bytes(bad)) == [] and decoder.stats.crc_errors == 1
    assert HEADER in frame
