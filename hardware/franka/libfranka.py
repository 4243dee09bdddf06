"""pylibfranka for mbctl: imported on demand, its exceptions in mbctl's terms, and what its Python
bindings leave out (the state timeout, the real-time kernel check).

pylibfranka comes from the ``franka`` extra (``pip install "mbctl[franka]"``); without it the first
use raises one line saying how to get it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from mbctl.errors import MbctlError
from mbctl.hardware.interface import CommunicationError, DriveFault, HardwareError

__all__ = [
    "INSTALL_HINT", "FrankaUnavailable", "FrankaFault", "require_pylibfranka", "libfranka_errors", "in_mbctl_terms",
    "socket_inodes", "set_state_timeout", "kept_scheduling", "realtime_kernel",
]  # fmt: skip

INSTALL_HINT = 'pip install "mbctl[franka]" (pylibfranka, libfranka\'s own Python bindings)'


class FrankaUnavailable(MbctlError):
    """pylibfranka cannot be imported."""


class FrankaFault(DriveFault):
    """The robot stopped the motion (a reflex: a collision, a limit, a missed deadline), with
    libfranka's reason and the error flags it names."""

    def __init__(self, message: str):
        self.joint, self.status = "", 0
        HardwareError.__init__(self, message)


def require_pylibfranka() -> ModuleType:
    """Import pylibfranka.

    Raises:
        FrankaUnavailable: One line naming how to get it.
    """
    try:
        return importlib.import_module("pylibfranka")
    except ImportError as exc:
        raise FrankaUnavailable(f"libfranka's Python bindings are not available here ({exc}); {INSTALL_HINT}") from None


def libfranka_errors(errors: object) -> str:
    """The set flags of a ``pylibfranka.Errors`` (``"joint_reflex, communication_constraints_violation"``), or ``""``."""
    if not errors:
        return ""
    return ", ".join(name for name in dir(errors) if not name.startswith("_") and getattr(errors, name) is True)


def in_mbctl_terms(exc: BaseException, doing: str) -> HardwareError:
    """A pylibfranka exception as the loop's error: a lost connection is a :class:`CommunicationError`
    (``"timeout"``: no state within the state timeout; ``"port"``: the connection closed), anything the
    robot refused or aborted a :class:`FrankaFault` with libfranka's message (which names the reflex's
    error flags)."""
    message = " ".join(str(exc).split())  # libfranka's reflex message spans lines
    name = type(exc).__name__
    if name == "NetworkException":
        kind = "timeout" if "Timeout" in message else "port"
        return CommunicationError(kind, f"{doing}: {message}")
    return FrankaFault(f"{doing}: {name}: {message}")


def socket_inodes() -> dict[int, str]:
    """This process's open file descriptors that are sockets: descriptor -> ``socket:[inode]``."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # closed meanwhile (the listing's own descriptor)
            continue
        if target.startswith("socket:"):
            found[int(name)] = target
    return found


def set_state_timeout(before: dict[int, str], timeout_s: float) -> bool:
    """Give libfranka's state socket, the one UDP socket opened since ``before``, a receive timeout of
    ``timeout_s``; False (nothing changed) where not exactly one was opened (another thread's sockets).

    libfranka waits 1 s for a robot state (its network layer's UDP timeout, which the Python bindings
    do not expose) and then raises "UDP receive: Timeout"; that wait is the socket's own
    ``SO_RCVTIMEO``, so setting it shortens the wait."""
    found = []
    for fd, inode in socket_inodes().items():
        if before.get(fd) == inode:
            continue
        sock = socket.socket(fileno=os.dup(fd))  # a duplicate: options belong to the socket, shared by every descriptor
        if sock.type == socket.SOCK_DGRAM:
            found.append(sock)
        else:
            sock.close()
    try:
        if len(found) != 1:
            return False
        found[0].setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", int(timeout_s), int(round((timeout_s % 1.0) * 1e6))))
        return True
    finally:
        for sock in found:
            sock.close()


@contextlib.contextmanager
def kept_scheduling() -> Iterator[None]:
    """The calling thread's scheduling policy and priority as they were before the block.

    libfranka raises the thread that connects to the robot to ``SCHED_FIFO`` 99 (whatever the
    ``RealtimeConfig``, where the OS allows it) and leaves it there: the loop then preempts at a
    priority it did not ask for, and every process started from the thread afterwards inherits it
    (a simulator, a compiler, a test's helper: a busy one at 99 starves the machine). The loop asks
    for its own priority (``SCHED_FIFO`` 80, the summary's ``scheduling``)."""
    if not hasattr(os, "sched_getscheduler"):
        yield
        return
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, policy, param)


def realtime_kernel() -> bool:
    """The kernel schedules in real time (``/sys/kernel/realtime`` reads 1: PREEMPT_RT), as libfranka checks
    before a control loop under ``RealtimeConfig.kEnforce``."""
    try:
        return Path("/sys/kernel/realtime").read_text().strip() == "1"
    except OSError:
        return False
