"""The emulated Dynamixel bus: the official SDK talks to it; the driver classifies every fault.

The emulator runs in lock-step (its plant moves one period per sync read, on virtual
time), so what the driver reads is exact and the same on a loaded machine. One test
uses the wall clock on purpose (the Bus Watchdog of a silent host), with a margin of
several times its period.
"""

from __future__ import annotations

import numpy as np
import pytest
from dynamixel_sdk import COMM_SUCCESS, PacketHandler, PortHandler

from mbctl.hardware.drive_config import BusConfig, DriveUnits
from mbctl.hardware.dynamixel import DynamixelBus
from mbctl.hardware.emulator import DriveEmulator, Faults
from mbctl.hardware.interface import (
    CommandMode,
    CommunicationError,
    DriveFault,
    JointCommand,
)
from mbctl.hardware.xseries import REGISTERS, HardwareErrorBit, OperatingMode


class Inertia:
    """Two independent joints: inertia J (kg m^2) and viscous damping b (N m s/rad)."""

    def __init__(self, n: int = 2, J: float = 0.01, b: float = 0.05):
        self.q, self.dq, self.J, self.b = np.zeros(n), np.zeros(n), J, b

    def step(self, tau, dt):
        self.dq += dt * (tau - self.b * self.dq) / self.J
        self.q += dt * self.dq

    def state(self):
        return self.q.copy(), self.dq.copy()


def make_bus(watchdog_s: float = 0.1) -> BusConfig:
    n = 2
    units = DriveUnits(
        ids=np.array([1, 2]),
        torque_constant=np.full(n, 1.78),
        gear_ratio=np.array([1.0, 3.0]),
        zero_count=np.full(n, 2048.0),
        direction=np.array([1.0, -1.0]),
        current_unit_A=np.full(n, 2.69e-3),
        current_limit_A=np.full(n, 3.2),
    )
    # a generous latency keeps replies in time on a loaded CI machine (reply timeout ~42 ms)
    return BusConfig(port=None, baudrate=4000000, latency_s=20e-3, return_delay_s=0.0, bus_watchdog_s=watchdog_s, units=units)


def wait_until(condition, timeout_s: float = 5.0) -> bool:
    """Poll ``condition``: a sync write gets no reply, so the emulator applies it a moment later."""
    import time

    end = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(1e-3)
    return True


PERIOD_S = 1e-3  # one lock-step period of the emulated plant


def lockstep_emulator() -> DriveEmulator:
    return DriveEmulator(make_bus(), Inertia(), lockstep_s=PERIOD_S)


@pytest.fixture
def emulator():
    with lockstep_emulator() as emu:
        yield emu


def test_official_sdk_client_pings_reads_and_writes(emulator):
    """ROBOTIS' dynamixel_sdk, unchanged, pings, reads and writes the emulated servos."""
    port, ph = PortHandler(emulator.port_name), PacketHandler(2.0)
    assert port.openPort() and port.setBaudRate(4000000)
    try:
        model, result, error = ph.ping(port, 2)
        assert (result, error, model) == (COMM_SUCCESS, 0, 1020)
        result, error = ph.write1ByteTxRx(port, 2, REGISTERS["operating_mode"].address, OperatingMode.CURRENT)
        assert (result, error) == (COMM_SUCCESS, 0)
        mode, result, error = ph.read1ByteTxRx(port, 2, REGISTERS["operating_mode"].address)
        assert (mode, result, error) == (OperatingMode.CURRENT, COMM_SUCCESS, 0)
        _, result, error = ph.read4ByteTxRx(port, 1, REGISTERS["present_position"].address)
        assert result == COMM_SUCCESS
        # writing a read-only register is refused with an access error (7)
        result, error = ph.write4ByteTxRx(port, 1, REGISTERS["present_position"].address, 5)
        assert (result, error) == (COMM_SUCCESS, 7)
        _, result, _ = ph.ping(port, 9)  # nobody answers for an absent ID
        assert result != COMM_SUCCESS
    finally:
        port.closePort()


def test_driver_round_trip_in_si_units(emulator):
    """Torque commands reach the plant through current units; state comes back in rad, rad/s, N m, exactly."""
    bus = DynamixelBus(("a", "b"), make_bus(), port=emulator.port_name)
    tau = np.array([0.3, -0.2])
    with bus:
        bus.enable()  # its sync read: one period, torque off
        for _ in range(50):
            bus.read()  # the first with a zero goal current, then 49 with tau
            bus.write(JointCommand.torque(tau))
        state = bus.read()  # the 50th period with tau
    # independently: the servos' goal current, and the same plant stepped 50 periods on its own
    u = make_bus().units
    goal = np.rint(u.units_from_effort(tau))
    current_A = goal * u.current_unit_A
    applied = u.direction * current_A * u.torque_constant * u.gear_ratio
    plant = Inertia()
    for _ in range(50 * 2):  # two emulator chunks (step_s = 0.5 ms) per period
        plant.step(applied, PERIOD_S / 2)
    assert np.array_equal(state.q, u.q_from_counts(u.counts_from_q(plant.q)))
    assert np.array_equal(state.dq, u.dq_from_units(u.units_from_dq(plant.dq)))
    assert np.array_equal(state.effort, u.effort_from_units(goal))
    assert np.abs(state.effort - tau).max() < 5e-3  # one current unit is 4.8 mN m
    assert np.sign(state.q).tolist() == [1.0, -1.0] and np.abs(state.q).min() > 0.02  # it moved, each way
    assert np.array_equal(emulator.plant.q, plant.q)  # no plant motion after the last read
    assert wait_until(lambda: not emulator.servo(0).torque_on, timeout_s=5.0)  # the context manager turned torque off
    assert bus.comm_errors == {}


def test_lockstep_runs_repeat_exactly():
    """Two lock-step runs of a PD loop over the emulated bus read identical states."""

    def run():
        with lockstep_emulator() as emu:
            bus = DynamixelBus(("a", "b"), make_bus(), port=emu.port_name)
            states = []
            with bus:
                bus.enable()
                for _ in range(100):
                    s = bus.read()
                    states.append(np.concatenate([s.q, s.dq, s.effort]))
                    bus.write(JointCommand.torque(2.0 * (0.2 - s.q) - 0.1 * s.dq))
        return np.array(states)

    a, b = run(), run()
    assert np.array_equal(a, b) and np.abs(a[-1, :2]).min() > 0.01  # the joints moved


@pytest.mark.parametrize(
    "faults, kind, error",
    [
        (Faults(drop_reply=1.0), "no_reply", CommunicationError),
        (Faults(corrupt_crc=1.0), "crc", CommunicationError),
    ],
)
def test_faulty_replies_are_classified(faults, kind, error):
    with lockstep_emulator() as emu:
        bus = DynamixelBus(("a", "b"), make_bus(), port=emu.port_name)
        bus.open()
        emu.faults = faults
        with pytest.raises(error) as info:
            bus.read()
        assert info.value.kind == kind and bus.comm_errors[kind] == 1
        bus.close()


def test_partial_reply_is_a_timeout():
    with lockstep_emulator() as emu:
        bus = DynamixelBus(("a", "b"), make_bus(), port=emu.port_name)
        bus.open()
        emu.faults = Faults(delay_s=0.1)  # the reply arrives after the ~42 ms timeout
        with pytest.raises(CommunicationError) as info:
            bus.read()
        assert info.value.kind in ("no_reply", "timeout")
        bus.close()


def test_hardware_error_raises_drive_fault_and_torque_is_off(emulator):
    bus = DynamixelBus(("a", "b"), make_bus(), port=emulator.port_name)
    with bus:
        bus.enable()
        bus.read()
        emulator.inject_hardware_error(1, HardwareErrorBit.OVERLOAD)
        with pytest.raises(DriveFault) as info:
            bus.read()
    assert info.value.joint == "b" and "overload" in str(info.value)
    assert bus.comm_errors["alert"] == 1 and wait_until(lambda: not emulator.servo(1).torque_on)


def test_bus_watchdog_stops_a_silent_host():
    """No packets for longer than the Bus Watchdog: the servo stops and refuses goals until cleared.

    Wall clock on purpose (a silent host is a matter of real time): 0.15 s of silence
    against a 0.04 s watchdog.
    """
    import time

    with DriveEmulator(make_bus(), Inertia()) as emulator:
        bus = DynamixelBus(("a", "b"), make_bus(watchdog_s=0.04), port=emulator.port_name)
        bus.open()
        bus.enable()
        bus.write(JointCommand.torque(np.array([0.2, 0.2])))
        time.sleep(0.15)
        emulator.advance()
        servo = emulator.servo(0)
        assert servo.get("bus_watchdog") == -1 and not servo.torque_on and emulator.stats.watchdog_fired == 2
        with pytest.raises(CommunicationError):
            bus._write_each("goal_current", [10, 10])  # refused: data range error until the watchdog is cleared
        bus.close()


def test_disconnected_port_is_a_port_error():
    emu = lockstep_emulator().start()
    bus = DynamixelBus(("a", "b"), make_bus(), port=emu.port_name)
    bus.open()
    emu.disconnect()
    with pytest.raises(CommunicationError) as info:
        for _ in range(3):
            bus.read()
    assert info.value.kind in ("port", "no_reply")
    bus.disable()  # never raises
    bus.close()


def test_torque_commands_beyond_the_current_limit_are_saturated_and_counted(emulator):
    bus = DynamixelBus(("a", "b"), make_bus(), port=emulator.port_name)
    with bus:
        bus.enable()
        bus.write(JointCommand.torque(np.array([100.0, 0.0])))
        assert bus.saturated == 1
        with pytest.raises(ValueError, match="torque mode"):
            bus.write(JointCommand.velocity(np.zeros(2)))
    assert DynamixelBus(("a", "b"), make_bus(), port="x", mode=CommandMode.POSITION).mode is CommandMode.POSITION


# ---- the loop over the emulated bus: faults end in torque off with a complete log -------------


def _run_with_fault(tmp_path, inject):
    """PD loop on two emulated servos; ``inject(emulator)`` is called at cycle 100."""
    from mbctl.hardware.loop import LoopConfig, SafetyLimits, log_columns, run_loop
    from mbctl.hardware.runlog import RunLog

    limits = SafetyLimits(lower=np.full(2, -10.0), upper=np.full(2, 10.0), velocity=np.full(2, 50.0), effort=np.full(2, 5.0))
    with lockstep_emulator() as emu:
        bus = DynamixelBus(("a", "b"), make_bus(), port=emu.port_name)
        cycles = []

        def controller(t, state):
            cycles.append(t)
            if len(cycles) == 100:
                inject(emu)
            return 2.0 * (0.1 - state.q) - 0.1 * state.dq

        with bus:
            bus.enable()
            log = RunLog(tmp_path / "run.npz", log_columns(bus.joint_names))
            summary = run_loop(bus, controller, limits, LoopConfig(duration_s=1.0, paced=False), log, comm_errors=lambda: dict(bus.comm_errors))
        torque_off = wait_until(lambda: not any(emu.servo(k).torque_on for k in range(2)))
    return summary, np.load(tmp_path / "run.npz"), torque_off


@pytest.mark.parametrize(
    "inject, reason, kind",
    [
        (lambda emu: setattr(emu, "faults", Faults(corrupt_crc=1.0)), "watchdog: 3 consecutive failed reads (last: crc", "crc"),
        (lambda emu: setattr(emu, "faults", Faults(drop_reply=1.0)), "watchdog: 3 consecutive failed reads (last: no_reply", "no_reply"),
        (lambda emu: emu.inject_hardware_error(0, HardwareErrorBit.OVERHEATING), "drive fault: drive of joint a", "alert"),
    ],
)
def test_bus_faults_stop_the_loop_with_torque_off(tmp_path, inject, reason, kind):
    summary, log, torque_off = _run_with_fault(tmp_path, inject)
    assert summary.stop_reason.startswith(reason), summary.stop_reason
    assert summary.comm_errors[kind] >= 1 and torque_off
    assert log["t"].shape[0] == summary.cycles and summary.cycles <= 102  # stopped within 2 cycles of the fault


def test_a_disconnected_port_stops_the_loop(tmp_path):
    summary, log, _ = _run_with_fault(tmp_path, lambda emu: emu.disconnect())
    assert summary.stop_reason.startswith(("watchdog", "write failed")), summary.stop_reason
    assert "port" in summary.stop_reason and log["t"].shape[0] == summary.cycles <= 102


def test_garbage_on_the_bus_is_counted_and_survived(emulator):
    """Random bytes sent to the emulator are counted as garbage or bad frames; the bus keeps working."""
    import os
    import random

    rng = random.Random(7)
    fd = os.open(emulator.port_name, os.O_RDWR | os.O_NOCTTY)
    try:
        os.write(fd, bytes(rng.randrange(256) for _ in range(2000)))
    finally:
        os.close(fd)
    bus = DynamixelBus(("a", "b"), make_bus(), port=emulator.port_name)
    with bus:
        bus.read()
    stats = emulator.decoder.stats
    assert stats.garbage_bytes + stats.bad_frames > 0 and stats.packets > 0
