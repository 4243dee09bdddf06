"""The CiA 301/402 objects mbctl uses, the 402 state machine's words, and the PDO layout.

The object dictionary is built in code (:func:`build_dictionary`) so that no EDS file
is needed; a drive's own EDS can replace it (``[drives] eds``). Only the objects
below are used:

==========  ===============================  ========  =====================================
index       object                           type      unit
==========  ===============================  ========  =====================================
0x1000      device type                      U32       low 16 bits 402 for a drive
0x1005      COB-ID SYNC                      U32       0x80
0x1006      communication cycle period       U32       µs
0x1017      producer heartbeat time          U16       ms
0x1400-03   RPDO communication parameters    record
0x1600-03   RPDO mapping                     record    entries ``index<<16 | sub<<8 | bits``
0x1800-03   TPDO communication parameters    record
0x1A00-03   TPDO mapping                     record
0x603F      error code                       U16
0x6040      controlword                      U16
0x6041      statusword                       U16
0x6060      modes of operation               I8        8 CSP, 10 CST
0x6061      modes of operation display       I8
0x6064      position actual value            I32       increments
0x606C      velocity actual value            I32       increments/s
0x6071      target torque                    I16       per mille of rated torque
0x6072      max torque                       U16       per mille of rated torque
0x6076      motor rated torque               U32       mN·m
0x6077      torque actual value              I16       per mille of rated torque
0x607A      target position                  I32       increments
==========  ===============================  ========  =====================================

PDO layout (one SYNC per control cycle, every PDO synchronous, transmission type 1):

- RPDO1 (0x200 + node): controlword, then target torque (CST) or target position (CSP);
- TPDO1 (0x180 + node): statusword, position actual, torque actual (8 bytes);
- TPDO2 (0x280 + node): velocity actual (4 bytes).
"""

from __future__ import annotations

import enum
import struct

import canopen
from canopen.objectdictionary import ODRecord, ODVariable
from canopen.objectdictionary import datatypes as dt

__all__ = [
    "CONTROLWORD", "STATUSWORD", "MODES", "MODES_DISPLAY", "POSITION_ACTUAL", "VELOCITY_ACTUAL",
    "TARGET_TORQUE", "MAX_TORQUE", "RATED_TORQUE", "TORQUE_ACTUAL", "TARGET_POSITION", "ERROR_CODE",
    "DEVICE_TYPE", "SYNC_COB_ID", "CYCLE_PERIOD", "HEARTBEAT_TIME", "SYNC_ID",
    "Mode", "State", "Command", "state_of", "describe_state", "build_dictionary",
    "RPDO_MAP", "TPDO1_MAP", "TPDO2_MAP", "rpdo_struct", "TPDO1", "TPDO2", "NMT_OPERATIONAL", "NMT_STATES",
    "describe_emcy",
]

DEVICE_TYPE, SYNC_COB_ID, CYCLE_PERIOD, HEARTBEAT_TIME = 0x1000, 0x1005, 0x1006, 0x1017
ERROR_CODE, CONTROLWORD, STATUSWORD, MODES, MODES_DISPLAY = 0x603F, 0x6040, 0x6041, 0x6060, 0x6061
POSITION_ACTUAL, VELOCITY_ACTUAL, TARGET_TORQUE, MAX_TORQUE = 0x6064, 0x606C, 0x6071, 0x6072
RATED_TORQUE, TORQUE_ACTUAL, TARGET_POSITION = 0x6076, 0x6077, 0x607A
SYNC_ID = 0x80
NMT_OPERATIONAL = 0x05
NMT_STATES = {0x00: "boot-up", 0x04: "stopped", 0x05: "operational", 0x7F: "pre-operational"}


class Mode(enum.IntEnum):
    """Modes of operation (0x6060) mbctl drives."""

    CSP = 8
    CST = 10


class State(enum.Enum):
    """States of the CiA 402 drive state machine, with the statusword pattern ``(mask, value)``."""

    NOT_READY = (0x4F, 0x00)
    SWITCH_ON_DISABLED = (0x4F, 0x40)
    READY_TO_SWITCH_ON = (0x6F, 0x21)
    SWITCHED_ON = (0x6F, 0x23)
    OPERATION_ENABLED = (0x6F, 0x27)
    QUICK_STOP_ACTIVE = (0x6F, 0x07)
    FAULT_REACTION_ACTIVE = (0x4F, 0x0F)
    FAULT = (0x4F, 0x08)

    @property
    def label(self) -> str:
        return self.name.replace("_", " ").title()


class Command(enum.IntEnum):
    """Controlword values of the state machine's commands (bit 7: fault reset)."""

    DISABLE_VOLTAGE = 0x0000
    QUICK_STOP = 0x0002
    SHUTDOWN = 0x0006
    SWITCH_ON = 0x0007
    DISABLE_OPERATION = 0x0007  # the same word: from Operation Enabled it leads back to Switched On
    ENABLE_OPERATION = 0x000F
    FAULT_RESET = 0x0080


def state_of(statusword: int) -> State | None:
    """The state a statusword shows (None for a pattern CiA 402 does not define)."""
    for state in State:
        mask, value = state.value
        if statusword & mask == value:
            return state
    return None


def describe_state(statusword: int) -> str:
    """``'Operation Enabled (0x0027)'``: the state's name and the raw statusword."""
    state = state_of(statusword)
    return f"{state.label if state else 'undefined state'} (statusword 0x{statusword:04x})"


_EMCY_CLASSES = {
    0x00: "error reset or no error", 0x10: "generic", 0x20: "current", 0x21: "current, input side",
    0x22: "current, inside the device", 0x23: "current, output side", 0x30: "voltage", 0x31: "mains voltage",
    0x32: "voltage inside the device", 0x40: "temperature", 0x42: "device temperature", 0x50: "device hardware",
    0x60: "device software", 0x70: "additional modules", 0x80: "monitoring", 0x81: "communication",
    0x82: "protocol error", 0x84: "velocity or speed error", 0x86: "following error", 0x90: "external error",
    0xF0: "additional functions", 0xFF: "device specific",
}


def describe_emcy(code: int) -> str:
    """The CiA 301 class of an emergency error code (its high byte)."""
    return _EMCY_CLASSES.get(code >> 8, _EMCY_CLASSES.get((code >> 8) & 0xF0, "unknown class"))


def _var(name: str, index: int, data_type: int, access: str = "rw", default: int = 0, subindex: int = 0, mappable: bool = False) -> ODVariable:
    var = ODVariable(name, index, subindex)
    var.data_type, var.access_type, var.default, var.pdo_mappable = data_type, access, default, mappable
    return var


def _pdo_records(od: canopen.ObjectDictionary, node_id: int) -> None:
    """Communication and mapping records of RPDO1-4 and TPDO1-4 (CiA 301 default COB-IDs)."""
    for base, comm, mapping, name in ((0x200, 0x1400, 0x1600, "RPDO"), (0x180, 0x1800, 0x1A00, "TPDO")):
        for n in range(4):
            rec = ODRecord(f"{name}{n + 1} communication parameter", comm + n)
            rec.add_member(_var("highest sub-index", comm + n, dt.UNSIGNED8, "ro", 6))
            rec.add_member(_var("COB-ID", comm + n, dt.UNSIGNED32, "rw", base + 0x100 * n + node_id, 1))
            rec.add_member(_var("transmission type", comm + n, dt.UNSIGNED8, "rw", 255, 2))
            rec.add_member(_var("inhibit time", comm + n, dt.UNSIGNED16, "rw", 0, 3))
            rec.add_member(_var("event timer", comm + n, dt.UNSIGNED16, "rw", 0, 5))
            rec.add_member(_var("SYNC start value", comm + n, dt.UNSIGNED8, "rw", 0, 6))
            od.add_object(rec)
            rec = ODRecord(f"{name}{n + 1} mapping parameter", mapping + n)
            rec.add_member(_var("number of mapped objects", mapping + n, dt.UNSIGNED8, "rw", 0))
            for sub in range(1, 9):
                rec.add_member(_var(f"mapped object {sub}", mapping + n, dt.UNSIGNED32, "rw", 0, sub))
            od.add_object(rec)


def build_dictionary(node_id: int) -> canopen.ObjectDictionary:
    """The CiA 301/402 objects of one drive (see the module's table), with CiA 301 default COB-IDs."""
    od = canopen.ObjectDictionary()
    od.node_id = node_id
    for name, index, data_type, access, default, mappable in (
        ("Device type", DEVICE_TYPE, dt.UNSIGNED32, "ro", 0x00020192, False),
        ("COB-ID SYNC", SYNC_COB_ID, dt.UNSIGNED32, "rw", SYNC_ID, False),
        ("Communication cycle period", CYCLE_PERIOD, dt.UNSIGNED32, "rw", 0, False),
        ("Producer heartbeat time", HEARTBEAT_TIME, dt.UNSIGNED16, "rw", 0, False),
        ("Error code", ERROR_CODE, dt.UNSIGNED16, "ro", 0, True),
        ("Controlword", CONTROLWORD, dt.UNSIGNED16, "rw", 0, True),
        ("Statusword", STATUSWORD, dt.UNSIGNED16, "ro", 0, True),
        ("Modes of operation", MODES, dt.INTEGER8, "rw", 0, True),
        ("Modes of operation display", MODES_DISPLAY, dt.INTEGER8, "ro", 0, True),
        ("Position actual value", POSITION_ACTUAL, dt.INTEGER32, "ro", 0, True),
        ("Velocity actual value", VELOCITY_ACTUAL, dt.INTEGER32, "ro", 0, True),
        ("Target torque", TARGET_TORQUE, dt.INTEGER16, "rw", 0, True),
        ("Max torque", MAX_TORQUE, dt.UNSIGNED16, "rw", 1000, True),
        ("Motor rated torque", RATED_TORQUE, dt.UNSIGNED32, "rw", 0, False),
        ("Torque actual value", TORQUE_ACTUAL, dt.INTEGER16, "ro", 0, True),
        ("Target position", TARGET_POSITION, dt.INTEGER32, "rw", 0, True),
    ):
        od.add_object(_var(name, index, data_type, access, default, mappable=mappable))
    _pdo_records(od, node_id)
    return od


# The PDO layout: (index, bits) per mapped object, and the struct that packs them (little endian)
TPDO1_MAP = ((STATUSWORD, 16), (POSITION_ACTUAL, 32), (TORQUE_ACTUAL, 16))
TPDO2_MAP = ((VELOCITY_ACTUAL, 32),)
RPDO_MAP = {Mode.CST: ((CONTROLWORD, 16), (TARGET_TORQUE, 16)), Mode.CSP: ((CONTROLWORD, 16), (TARGET_POSITION, 32))}
TPDO1 = struct.Struct("<Hlh")  # statusword, position actual (increments), torque actual (per mille)
TPDO2 = struct.Struct("<l")  # velocity actual (increments/s)


def rpdo_struct(mode: Mode) -> struct.Struct:
    """Controlword and target torque (per mille, I16) or target position (increments, I32)."""
    return struct.Struct("<Hh" if mode is Mode.CST else "<Hl")
