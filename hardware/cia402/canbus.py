"""The python-can bus under the CiA 402 driver and its emulator: opened by interface name, with
``udp_multicast`` (the emulator in another process) kept on the loopback interface and its channel
``GROUP:PORT`` checked before python-can builds anything; and canopen's SDO log held back while the
driver reports SDO failures itself."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
import struct
from collections.abc import Iterator

import can

from mbctl.hardware.interface import CommunicationError

__all__ = ["UDP_DEFAULT_CHANNEL", "open_can_bus", "sdo_log_held", "udp_multicast_channel"]

UDP_DEFAULT_CHANNEL = "239.74.163.2:43113"


def open_can_bus(interface: str, channel: str | None, bitrate: int) -> can.BusABC:
    """A python-can bus. ``udp_multicast`` (an emulator in another process) is kept on the
    loopback interface: its channel is ``GROUP:PORT`` with an IPv4 multicast group.

    Raises:
        CommunicationError: ``port``, when the interface cannot be opened.
    """
    try:
        if interface == "virtual":
            return can.Bus(interface="virtual", channel=channel or "mbctl")
        if interface == "udp_multicast":
            # checked before python-can builds a bus: one it fails to build warns at exit that it was not shut down
            group, port = udp_multicast_channel(channel or UDP_DEFAULT_CHANNEL)
            bus = can.Bus(interface="udp_multicast", channel=group, port=port)
            try:
                _loopback_only(bus, group)
            except BaseException:
                bus.shutdown()
                raise
            return bus
        return can.Bus(interface=interface, channel=channel, bitrate=bitrate)
    except (can.CanError, OSError, ValueError, ImportError) as exc:
        raise CommunicationError("port", f"cannot open CAN interface {interface} channel {channel}: {exc}") from None


def udp_multicast_channel(channel: str) -> tuple[str, int]:
    """``"239.74.163.2:43113"`` -> ``("239.74.163.2", 43113)``: an IPv4 multicast group and a UDP port
    (default 43113).

    Raises:
        ValueError: Naming what is wrong, for anything else (a host name, ``can0``, a bad port).
    """
    group, _, port = channel.partition(":")
    try:
        multicast = ipaddress.ip_address(group).version == 4 and ipaddress.ip_address(group).is_multicast
    except ValueError:
        multicast = False
    if not multicast:
        raise ValueError(f"udp_multicast needs GROUP:PORT with an IPv4 multicast group (224.0.0.0 to 239.255.255.255), e.g. {UDP_DEFAULT_CHANNEL}; got {channel!r}")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"udp_multicast port must be 1 to 65535, got {port!r} in {channel!r}")
    return group, int(port or 43113)


def _loopback_only(bus: can.BusABC, group: str) -> None:
    """Send and receive the multicast group on 127.0.0.1 only (python-can joins it on the
    default interface, which would put emulated frames on the machine's network)."""
    sock = bus._multicast._socket  # python-can exposes no option for the interface
    g = socket.inet_aton(group)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_DROP_MEMBERSHIP, g + struct.pack("@I", socket.INADDR_ANY))
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, g + socket.inet_aton("127.0.0.1"))


class _Drop(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return False


@contextlib.contextmanager
def sdo_log_held() -> Iterator[None]:
    """canopen's SDO client logs an aborted transfer (``Transfer aborted by client``) as an error
    before it raises; the driver reports the failure itself, in one line, so that logger's records
    are dropped during the SDO phase (other loggers' warnings pass)."""
    logger, drop = logging.getLogger("canopen.sdo.client"), _Drop()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)
