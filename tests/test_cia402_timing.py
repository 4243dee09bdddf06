"""CiA 402 timing: the host's policy for late and missing TPDOs, and the emulated drives' own time.

The policy runs against the lock-step emulator (its faults drop or delay the TPDOs of chosen SYNCs;
sample ages count SYNC periods), the drives' own time on a virtual clock the test advances (no
serving thread: the test hands frames to the emulator and runs its due jobs), so nothing here
depends on the machine's speed.
"""

from __future__ import annotations

import dataclasses
import re

import can
import numpy as np
import pytest
from test_cia402 import PERIOD_S, _run_with_fault, lockstep_pair, two_drives
from test_dynamixel import Inertia

from mbctl.dynamics.model.robot import load_robot
from mbctl.errors import ConfigError
from mbctl.hardware.cia402.bus import Cia402Bus
from mbctl.hardware.cia402.emulator import Cia402Emulator, Cia402Faults
from mbctl.hardware.cia402.objects import POSITION_ACTUAL, RPDO_MAP, STATUSWORD, TORQUE_ACTUAL, TPDO1, TPDO1_MAP, TPDO2_MAP, Mode, State, rpdo_struct
from mbctl.hardware.cia402.timing import effort_source
from mbctl.hardware.cia402.units import canopen_config
from mbctl.hardware.interface import JointCommand


def _node7(**faults):
    """Faults on node 7 (joint b) from the next SYNC on."""
    return lambda emu: setattr(emu, "faults", Cia402Faults(nodes=(7,), **faults))


def _limits(**fields):
    return dataclasses.replace(two_drives(), **fields)


# ---- the host's policy ----------------------------------------------------------------------


def test_a_missing_tpdo_returns_the_last_sample_with_its_time():
    """One SYNC without node 7's TPDOs: the read returns the previous sample itself (its time too, so
    the estimator sees no new sample), counted; the next SYNC's sample is fresh again."""
    emulator, bus = lockstep_pair(two_drives(), pdo_timeout_s=0.5)
    with emulator, bus:
        bus.enable()
        for _ in range(3):
            before = bus.read()
            bus.write(JointCommand.torque(np.array([0.05, 0.05])))
        emulator.faults = Cia402Faults(nodes=(7,), drop_syncs=1)
        again = bus.read()
        bus.write(JointCommand.torque(np.array([0.05, 0.05])))
        fresh = bus.read()
    assert again is before and again.t == before.t
    assert fresh.t == pytest.approx(before.t + 2 * PERIOD_S) and not np.array_equal(fresh.q, before.q)
    assert bus.comm_errors["missing"] == 2 and bus.comm_errors["reused"] == 1 and "no_reply" not in bus.comm_errors


def test_one_missing_tpdo_does_not_stop_the_run_and_is_counted(tmp_path):
    """A run with one SYNC's TPDOs lost completes, degraded, and says how many samples were reused."""
    summary, log, _ = _run_with_fault(tmp_path, _node7(drop_syncs=1))
    assert summary.cycles == 200 and log["t"].shape[0] == 200
    # (a TPDO of this machine's own later than the 0.5 s deadline would add to the counts, never take from them)
    assert summary.stop_reason.startswith("completed, degraded: ") and "CANopen samples reused (" in summary.stop_reason, summary.stop_reason
    assert not summary.clean and summary.comm_errors["missing"] >= 2 and summary.comm_errors["reused"] >= 1 and "no_reply" not in summary.comm_errors


def test_missing_tpdos_in_a_row_stop_the_run_naming_node_and_count(tmp_path):
    """``tpdo_missing_max = 3``: the third cycle in a row without node 7's TPDOs stops the run (two
    samples reused before it), the reason naming the node, its TPDOs and the count."""
    summary, log, off = _run_with_fault(tmp_path, _node7(drop_syncs=10), config=_limits(tpdo_missing_max=3))
    assert "no_reply: node 7 (b): TPDO1 (and 1 more TPDOs) missing" in summary.stop_reason and "3 cycles in a row" in summary.stop_reason, summary.stop_reason
    assert 50 <= summary.cycles <= 52 and summary.comm_errors["missing"] >= 6 and summary.comm_errors["reused"] >= 2 and off


def test_no_fresh_sample_for_the_timeout_stops_the_run(tmp_path):
    """``sample_timeout_ms = 3.5`` at 1 ms periods (lock-step: sample ages in SYNC periods), the count's
    limit out of reach: the fourth cycle without a fresh sample (4 ms old) stops the run."""
    summary, _, _ = _run_with_fault(tmp_path, _node7(drop_syncs=10), config=_limits(tpdo_missing_max=100, sample_timeout_s=3.5e-3))
    found = re.search(r"(\d+) cycles in a row; no fresh sample for (\d+) ms", summary.stop_reason)
    assert found and found[1] == found[2] == "4", summary.stop_reason
    assert summary.cycles in (52, 53)  # 52: a TPDO of the machine's own later than 0.5 s just before the drops


def test_a_late_tpdo_is_counted():
    """Node 7's TPDOs of one SYNC held back to the next: that cycle reuses its sample; the copies that
    come after the next cycle's sample is complete are counted as late and dropped, and the run goes on."""
    emulator, bus = lockstep_pair(two_drives(), pdo_timeout_s=0.5)
    with emulator, bus:
        bus.enable()
        for k in range(5):
            if k == 2:
                emulator.faults = Cia402Faults(nodes=(7,), delay_syncs=1)
            bus.write(JointCommand.torque(np.array([0.05, 0.05])))
            state = bus.read()
    assert state.t == pytest.approx(5 * PERIOD_S)  # fresh again
    assert bus.comm_errors["late"] >= 2 and bus.comm_errors["missing"] >= 2 and bus.comm_errors["reused"] >= 1  # (more: this machine's own lateness)
    assert re.fullmatch(r"\d+ CANopen samples reused \(\d+ TPDOs missing at their deadline, \d+ late\)", bus.degraded), bus.degraded


def test_a_drive_silent_past_its_heartbeat_timeout_stops_as_no_reply(tmp_path):
    """No TPDO and no heartbeat from node 7 (a drive gone): stopped when its 2.5 ms heartbeat timeout runs
    out, as a missing reply (the count's limit not reached)."""
    summary, _, _ = _run_with_fault(tmp_path, _node7(drop_syncs=100, stop_heartbeat=True), config=_limits(tpdo_missing_max=100, sample_timeout_s=1.0))
    assert "no_reply: node 7 (b): no TPDO and no heartbeat for" in summary.stop_reason, summary.stop_reason


def test_the_policy_defaults_and_bad_values(tmp_path):
    """Defaults: five cycles in a row; no fresh sample for ten periods, at least 20 ms. A bad value names
    its field."""
    config = canopen_config(load_robot("ur5"))
    assert config.tpdo_missing_max == 5 and config.sample_timeout_s is None
    names = load_robot("ur5").actuated_names
    assert Cia402Bus(names, config, cycle_s=1e-3).policy.sample_timeout_s == pytest.approx(0.02)
    assert Cia402Bus(names, config, cycle_s=4e-3).policy.sample_timeout_s == pytest.approx(0.04)
    from pathlib import Path

    from mbctl.configs import __file__ as configs_init

    text = (Path(configs_init).parent / "ur5.toml").read_text()
    for edit, field in (("tpdo_missing_max = 0", "drives.tpdo_missing_max"), ("sample_timeout_ms = -1", "drives.sample_timeout_ms")):
        bad = tmp_path / "bad.toml"
        bad.write_text(text.replace('mode = "cst"', f'mode = "cst"\n{edit}', 1))
        with pytest.raises(ConfigError, match=field):
            load_robot(bad)


def test_the_effort_is_the_drives_torque_actual_value():
    """0x6077 is mapped: the bus names it as a measured drive torque (friction still opposes it); a
    layout without it names none."""
    bus = Cia402Bus(("a", "b"), two_drives())
    assert bus.effort_source == "torque actual value 0x6077" and bus.effort_after_friction is False
    assert effort_source((TPDO1_MAP, TPDO2_MAP)) == "torque actual value 0x6077"
    assert effort_source((((STATUSWORD, 16), (POSITION_ACTUAL, 32)),)) == ""


# ---- the drives' own time, on a virtual clock ----------------------------------------------------


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _paced(noise_permille: float = 0.0, plant=None):
    """A paced emulator on a virtual clock, no serving thread, both drives in CST, Operation Enabled,
    with the host's PDO mapping (as :meth:`Cia402Bus.open` writes it); and a bus to watch the frames."""
    clock, config = Clock(), two_drives()
    emulator = Cia402Emulator(config, plant or Inertia(), clock=clock, step_s=5e-4, reply_delay_s=2.5e-4, effort_noise_permille=noise_permille)
    emulator.start(serve=False)
    for d in emulator.drives:
        for comm, mapping, cob, layout in ((0x1400, 0x1600, 0x200, RPDO_MAP[Mode.CST]), (0x1800, 0x1A00, 0x180, TPDO1_MAP)):
            d.node.set_data(comm, 1, (cob + d.node_id).to_bytes(4, "little"), check_writable=False)
            d.node.set_data(mapping, 0, bytes([len(layout)]), check_writable=False)
            for sub, (index, bits) in enumerate(layout, 1):
                d.node.set_data(mapping, sub, (index << 16 | bits).to_bytes(4, "little"), check_writable=False)
        emulator._nmt(d, 0x01)
        d.mode, d.state = int(Mode.CST), State.OPERATION_ENABLED
    emulator.power.changed()
    watch = can.Bus(interface="virtual", channel=config.channel)
    return emulator, clock, watch


def _run_until(emulator, clock, t):
    """Advance the virtual clock to ``t`` (s), the drives' due jobs run on the way."""
    while clock.t < t - 1e-12:
        clock.t = min(t, clock.t + 1e-4)
        for _ in range(3):
            emulator.poll()


def _tpdo1s(watch):
    frames = []
    while (msg := watch.recv(0.0)) is not None:
        if 0x180 < msg.arbitration_id < 0x200:
            frames.append((msg.arbitration_id, *TPDO1.unpack(msg.data)))
    return frames


def test_drives_sample_at_the_sync_latch_the_target_and_reply_later():
    """SYNC at 1.2 ms (loop steps at 0.5 and 1.0 ms): the plant is sampled at 1.2 ms, the RPDO received
    before the SYNC acts from then on, the loop's next step is 0.5 ms after the SYNC, the TPDOs go out
    0.25 ms after it, and the torque actual value is what was applied just before the sample (0, then
    500 at the next SYNC)."""
    emulator, clock, watch = _paced(plant=Inertia(J=1e-4))
    try:
        rpdo = can.Message(arbitration_id=0x203, data=rpdo_struct(Mode.CST).pack(0x0F, 500), is_extended_id=False)  # 500 per mille
        _run_until(emulator, clock, 1.2e-3)
        emulator.handle(rpdo)
        emulator._sync()
        assert _tpdo1s(watch) == [] and emulator.power.next_step == pytest.approx(1.7e-3)  # nothing sent yet
        _run_until(emulator, clock, 1.45e-3)
        first = _tpdo1s(watch)
        _run_until(emulator, clock, 5.2e-3)
        emulator._sync()
        _run_until(emulator, clock, 5.45e-3)
        second = _tpdo1s(watch)
    finally:
        emulator.stop()
        watch.shutdown()
    assert [f[0] for f in first] == [0x183, 0x187] and first[0][3] == 0 and second[0][3] == 500
    expected = Inertia(J=1e-4)  # the same plant stepped by hand: no torque to 1.2 ms, 500 per mille (0.25 N·m) for 8 steps after
    for tau, dt in [(0.0, 5e-4)] * 2 + [(0.0, 2e-4)] + [(0.25, 5e-4)] * 8:
        expected.step(np.array([tau, 0.0]), dt)
    assert second[0][2] == round(100 + expected.q[0] * 4096 / (2 * np.pi)) > 105  # moved 9 increments


def test_the_plant_moves_on_without_the_host():
    """No SYNC for 20 ms: the drives' loop keeps stepping the plant with the latched torque (physics does
    not wait for the host), one step per 0.5 ms."""
    emulator, clock, watch = _paced()
    try:
        emulator.drives[0].target_torque = 500
        emulator.power.changed()
        _run_until(emulator, clock, 0.02)
    finally:
        emulator.stop()
        watch.shutdown()
    expected = Inertia()
    for _ in range(40):
        expected.step(np.array([0.25, 0.0]), 5e-4)
    assert emulator.power.steps == 40 and emulator.plant.q == pytest.approx(expected.q, rel=1e-9)


class Recording(Inertia):
    """The plant, keeping every effort it was stepped with."""

    def __init__(self):
        super().__init__()
        self.efforts = []

    def step(self, tau, dt):
        self.efforts.append(np.array(tau))
        super().step(tau, dt)


def test_the_torque_actual_value_carries_the_current_loops_ripple():
    """With 20 per mille of ripple the applied torque scatters around the target by that standard
    deviation; the plant is moved by exactly what the drives report as applied (torque actual value)."""
    emulator, clock, watch = _paced(noise_permille=20.0)
    emulator.plant = emulator.power.plant = plant = Recording()
    reported = []
    step = emulator.power.loop_step

    def step_and_report():
        step()
        reported.append([s[TORQUE_ACTUAL] for s in emulator._samples(emulator.power.at[1:])])

    emulator.power.loop_step = step_and_report
    try:
        emulator.drives[0].target_torque = 300
        emulator.power.changed()
        _run_until(emulator, clock, 1.0)
    finally:
        emulator.stop()
        watch.shutdown()
    permille = np.array(plant.efforts) / np.array([0.5e-3, -0.6e-3])  # joint N·m -> per mille (joint b: gear 3, direction -1)
    assert len(permille) == 2000 and abs(permille[:, 0].mean() - 300) < 2.0 and permille.std(axis=0) == pytest.approx([20.0, 20.0], rel=0.05)
    assert np.array_equal(np.array(reported), np.round(permille))


class Push:
    """A contact of 1 N·m on joint a from 5 to 8 ms after the run's start (the ExternalWrench interface)."""

    def active(self, t: float) -> bool:
        return 5e-3 - 1e-9 <= t < 8e-3 - 1e-9

    def generalized(self, q: np.ndarray) -> np.ndarray:
        return np.array([1.0, 0.0])


class PushedInertia(Recording):
    """The plant, keeping the external force of each step too (``full.q``: what a contact reads)."""

    def __init__(self):
        super().__init__()
        self.external = []
        self.full = self

    def step(self, tau, dt, external=None):
        self.external.append(0.0 if external is None else external[0])
        super().step(tau, dt)


def test_the_push_counts_from_the_first_sync_with_every_drive_enabled():
    """Lock-step at 1 ms: the push acts in the 6th to 8th period after the first SYNC in Operation Enabled
    (the host loop's first cycle), not from the emulator's start; nothing while the brakes hold."""
    plant = PushedInertia()
    emulator = Cia402Emulator(two_drives(), plant, lockstep_s=PERIOD_S, contact=Push())
    bus = Cia402Bus(("a", "b"), emulator.config, cycle_s=PERIOD_S, pdo_timeout_s=5.0)
    with emulator, bus:
        for _ in range(5):  # SYNCs before the enable: the brakes hold, no run time passes
            bus.read()
        bus.enable()
        for _ in range(12):
            bus.read()
            bus.write(JointCommand.torque(np.zeros(2)))
    assert plant.external == [0.0] * 5 + [1.0] * 3 + [0.0] * 3  # 11 steps: the first SYNC after the enable follows no command


def test_tpdos_still_unsent_at_the_next_sync_are_never_sent():
    """A stalled emulator (no due jobs run between two SYNCs): the first SYNC's TPDOs, still waiting,
    would pass for the second's, so they are dropped and counted; the second's go out."""
    emulator, clock, watch = _paced()
    try:
        _run_until(emulator, clock, 1e-3)
        emulator._sync()
        clock.t = 5e-3  # the thread stalled 4 ms: no poll
        emulator._sync()
        _run_until(emulator, clock, 5.3e-3)
        frames = _tpdo1s(watch)
    finally:
        emulator.stop()
        watch.shutdown()
    assert [f[0] for f in frames] == [0x183, 0x187] and emulator.stats.unsent == 2 and emulator.stats.syncs == 2
