"""ROBOTIS Dynamixel Protocol 2.0 framing: CRC, byte stuffing, packets, a stream decoder.

Packet layout (little-endian)::

    FF FF FD 00 | ID | LEN_L LEN_H | INSTR | [ERR] PARAMS... | CRC_L CRC_H

``LEN`` counts the bytes after itself: instruction, (error byte of a status
packet,) stuffed parameters and the two CRC bytes. The CRC is CRC-16 with
polynomial 0x8005, initial value 0, not reflected, over every byte from the header
up to the last parameter. Byte stuffing: wherever ``FF FF FD`` would appear after
the header, an extra ``FD`` follows it, so a header never occurs inside a packet.

The host side of the protocol is ROBOTIS' ``dynamixel_sdk``; this module serves
the drive emulator (device side) and tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "HEADER",
    "BROADCAST_ID",
    "Instruction",
    "ErrorCode",
    "ALERT_BIT",
    "Packet",
    "crc16",
    "stuff",
    "unstuff",
    "encode_instruction",
    "encode_status",
    "PacketDecoder",
    "DecoderStats",
]

HEADER = b"\xff\xff\xfd\x00"
BROADCAST_ID = 0xFE
ALERT_BIT = 0x80
MAX_LENGTH = 0xFFFF


class Instruction:
    """Instruction codes of Protocol 2.0."""

    PING = 0x01
    READ = 0x02
    WRITE = 0x03
    REG_WRITE = 0x04
    ACTION = 0x05
    FACTORY_RESET = 0x06
    REBOOT = 0x08
    CLEAR = 0x10
    STATUS = 0x55
    SYNC_READ = 0x82
    SYNC_WRITE = 0x83
    BULK_READ = 0x92
    BULK_WRITE = 0x93


class ErrorCode:
    """Error numbers of a status packet's error byte (bits 0-6; bit 7 is the Alert bit)."""

    NONE = 0
    RESULT_FAIL = 1
    INSTRUCTION = 2
    CRC = 3
    DATA_RANGE = 4
    DATA_LENGTH = 5
    DATA_LIMIT = 6
    ACCESS = 7


def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) if crc & 0x8000 else (crc << 1)
        table.append(crc & 0xFFFF)
    return table


_CRC_TABLE = _crc_table()


def crc16(data: bytes) -> int:
    """CRC-16 of Protocol 2.0 (poly 0x8005, init 0, no reflection)."""
    crc = 0
    for b in data:
        crc = ((crc << 8) ^ _CRC_TABLE[((crc >> 8) ^ b) & 0xFF]) & 0xFFFF
    return crc


def stuff(payload: bytes) -> bytes:
    """Insert ``FD`` after every ``FF FF FD`` of the payload (instruction + parameters)."""
    out = bytearray()
    for i, b in enumerate(payload):
        out.append(b)
        if b == 0xFD and i >= 2 and payload[i - 1] == 0xFF and payload[i - 2] == 0xFF:
            out.append(0xFD)
    return bytes(out)


def unstuff(payload: bytes) -> bytes:
    """Remove the ``FD`` that follows every ``FF FF FD`` of a stuffed payload."""
    out = bytearray()
    i = 0
    n = len(payload)
    while i < n:
        out.append(payload[i])
        if payload[i] == 0xFD and i >= 2 and payload[i - 2] == 0xFF and payload[i - 1] == 0xFF:
            if i + 1 < n and payload[i + 1] == 0xFD:
                i += 1  # skip the stuffing byte
        i += 1
    return bytes(out)


def _frame(packet_id: int, body: bytes) -> bytes:
    stuffed = stuff(body)
    length = len(stuffed) + 2
    head = HEADER + bytes([packet_id & 0xFF, length & 0xFF, length >> 8]) + stuffed
    crc = crc16(head)
    return head + bytes([crc & 0xFF, crc >> 8])


def encode_instruction(packet_id: int, instruction: int, params: bytes = b"") -> bytes:
    """A complete instruction packet (host -> device)."""
    return _frame(packet_id, bytes([instruction]) + bytes(params))


def encode_status(packet_id: int, error: int, params: bytes = b"") -> bytes:
    """A complete status packet (device -> host)."""
    return _frame(packet_id, bytes([Instruction.STATUS, error & 0xFF]) + bytes(params))


@dataclass(frozen=True)
class Packet:
    """A decoded packet: ID, instruction and unstuffed parameters.

    For a status packet ``instruction == STATUS`` and ``error`` holds the error byte.
    """

    id: int
    instruction: int
    params: bytes
    error: int | None = None


@dataclass
class DecoderStats:
    """Counts of what the decoder saw."""

    packets: int = 0
    crc_errors: int = 0
    bad_length: int = 0
    garbage_bytes: int = 0

    @property
    def bad_frames(self) -> int:
        return self.crc_errors + self.bad_length


@dataclass
class PacketDecoder:
    """Incremental decoder of a byte stream into packets.

    Bytes before a header are counted as garbage and dropped. A frame whose CRC
    does not match or whose length cannot hold an instruction is counted and
    skipped by one byte, so the search resumes inside it (a real header may hide
    there after line noise). Never raises on input; memory stays bounded by the
    largest frame the length field allows.

    Args:
        max_length: Longest ``LEN`` accepted; longer frames are counted as bad.
    """

    max_length: int = 1024
    stats: DecoderStats = field(default_factory=DecoderStats)
    _buf: bytearray = field(default_factory=bytearray)

    def feed(self, data: bytes) -> list[Packet]:
        """Add bytes; return the packets completed by them."""
        self._buf += data
        out = []
        while True:
            start = self._buf.find(HEADER)
            if start < 0:
                # keep a possible partial header at the end
                keep = 0
                for k in (3, 2, 1):
                    if self._buf.endswith(HEADER[:k]):
                        keep = k
                        break
                self.stats.garbage_bytes += len(self._buf) - keep
                del self._buf[: len(self._buf) - keep]
                return out
            if start:
                self.stats.garbage_bytes += start
                del self._buf[:start]
            if len(self._buf) < 7:
                return out
            length = self._buf[5] | (self._buf[6] << 8)
            if length < 3 or length > self.max_length:
                self.stats.bad_length += 1
                del self._buf[:1]
                continue
            total = 7 + length
            if len(self._buf) < total:
                return out
            frame = bytes(self._buf[:total])
            if crc16(frame[:-2]) != (frame[-2] | (frame[-1] << 8)):
                self.stats.crc_errors += 1
                del self._buf[:1]
                continue
            del self._buf[:total]
            body = unstuff(frame[7:-2])
            instruction = body[0]
            if instruction == Instruction.STATUS:
                if len(body) < 2:
                    self.stats.bad_length += 1
                    continue
                packet = Packet(frame[4], instruction, body[2:], error=body[1])
            else:
                packet = Packet(frame[4], instruction, body[1:])
            self.stats.packets += 1
            out.append(packet)
