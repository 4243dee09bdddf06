"""The commissioning's control rate where the command line gives none: the robot's ``[identification]``
``rate_hz``; on CiA 402 drives the highest standard rate their bus carries; else 1 kHz.

A CANopen cycle carries a SYNC and, per drive, one RPDO and two TPDOs
(:func:`mbctl.hardware.cia402.units.bus_load`, the check ``mbctl run`` refuses a rate with). The
default is the first of :data:`~mbctl.hardware.cia402.units.COMMON_RATES` at which one cycle takes at most :data:`BUS_SHARE` of the bus
time: the rest is left for heartbeats, emergency messages, SDO traffic and error frames. Six drives
on a 1 Mbit/s bus (the bundled UR5's ``[drives]``) need 2005 bits a cycle: 100.3 % at 500 Hz,
50 % at 250 Hz, so 250 Hz. An emulated bus (``--emulate``) gets the rate of the bus it stands for.
"""

from __future__ import annotations

from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import InputError
from mbctl.hardware.cia402.units import bus_load, bus_rate, canopen_config

__all__ = ["BUS_SHARE", "default_rate"]

BUS_SHARE = 0.8
"""Largest fraction of the bus time the control cycle may take at the default rate."""


def default_rate(robot: RobotModel, bus: str | None) -> tuple[float, str]:
    """The rate (Hz) and where it comes from, in words (module docstring).

    Args:
        bus: ``"canopen"``, another bus, or None for the simulated plant.

    Raises:
        ConfigError: For a robot without CANopen drives (``bus="canopen"``).
        InputError: Naming ``--rate``, where even the slowest rate overloads the bus.
    """
    ident = robot.spec.identification if robot.spec is not None else None
    if ident is not None and "rate_hz" in ident.general:
        return float(ident.general["rate_hz"]), "[identification] rate_hz"
    if bus != "canopen":
        return 1000.0, "the default"
    config = canopen_config(robot)
    n = len(robot.actuated_names)
    rate = bus_rate(n, config.mode, config.bitrate, BUS_SHARE)
    load = bus_load(n, config.mode, config.bitrate, 1.0 / rate)
    if load > BUS_SHARE:
        raise InputError(f"{n} drives overload the {config.bitrate / 1e6:g} Mbit/s bus even at {rate:g} Hz; give the rate", field="--rate")
    return rate, f"{n} drives on the {config.bitrate / 1e6:g} Mbit/s bus take {100 * load:.0f} % of it per cycle (at most {100 * BUS_SHARE:.0f} %)"
