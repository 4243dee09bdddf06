"""CiA 402 drives on CANopen: the driver against the emulated drives on python-can's virtual bus.

The emulator runs in lock-step (its plant moves one period per SYNC that follows new
set-points, on virtual time), so what the driver reads is exact and the same on a loaded
machine; no test needs CAN hardware or a vcan module. One test runs the emulator in its
own process over udp_multicast on loopback.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_dynamixel import Inertia, wait_until

from mbctl.config.control import EndSpec
from mbctl.ctrl.controllers import build_controller
from mbctl.ctrl.tracking import TrackingController
from mbctl.ctrl.trajectory import quintic_rest_to_rest, write_trajectory
from mbctl.dynamics.model.robot import load_robot
from mbctl.errors import ConfigError
from mbctl.hardware.cia402.bus import Cia402Bus, DriveStateFault
from mbctl.hardware.cia402.canbus import open_can_bus
from mbctl.hardware.cia402.emulator import Cia402Emulator, Cia402Faults
from mbctl.hardware.cia402.objects import Mode, State
from mbctl.hardware.cia402.units import CanopenConfig, Cia402Units, bus_load, bus_rate, canopen_config
from mbctl.hardware.interface import CommandMode, CommunicationError, JointCommand, JointInterface, JointState
from mbctl.hardware.loop import LoopConfig, SafetyLimits, log_columns, run_loop
from mbctl.hardware.runlog import RunLog
from mbctl.hardware.session import CANOPEN_WATCHDOG_FAILURES, child_process
from mbctl.hardware.sim import TruthPlant

PERIOD_S = 1e-3
UPRIGHT = np.array([0.0, -1.5708, 0.0, 0.0, 0.0, 0.0])  # the UR5 with its upper arm upright: clear of its mounting plane ([keepout])
_channels = itertools.count()


def channel() -> str:
    """A virtual channel of this test alone."""
    return f"test-cia402-{next(_channels)}"


def two_drives(mode: Mode = Mode.CST, heartbeat_s: float = 1e-3, heartbeat_timeout_s: float = 2.5e-3) -> CanopenConfig:
    units = Cia402Units(
        node_ids=np.array([3, 7]),
        rated_torque_Nm=np.array([0.5, 0.2]),
        gear_ratio=np.array([1.0, 3.0]),
        counts_per_rev=np.array([4096.0, 65536.0]),
        zero_count=np.array([100.0, -2000.0]),
        direction=np.array([1.0, -1.0]),
        max_torque_permille=np.array([2000, 1500]),
    )
    return CanopenConfig("virtual", channel(), 1000000, mode, heartbeat_s, heartbeat_timeout_s, None, None, units)


def lockstep_pair(config: CanopenConfig, plant=None, faults=None, mode=CommandMode.TORQUE, pdo_timeout_s=5.0):
    """Emulator and driver in lock-step; the generous TPDO timeout only matters when one is dropped."""
    emulator = Cia402Emulator(config, plant or Inertia(), faults=faults, lockstep_s=PERIOD_S)
    bus = Cia402Bus(("a", "b"), config, mode=mode, cycle_s=PERIOD_S, pdo_timeout_s=pdo_timeout_s)
    return emulator, bus


def torque_off(emulator: Cia402Emulator) -> bool:
    return wait_until(lambda: all(d.state is not State.OPERATION_ENABLED and d.torque_permille == 0 for d in emulator.drives))


# ---- units and configuration ---------------------------------------------------------------


def test_units_by_hand():
    """Increments, increments/s and per mille of rated torque against hand-computed joint values."""
    u = two_drives().units
    # joint b: direction -1, gear 3, 65536 increments per motor turn, zero at -2000
    assert u.q_from_counts(np.array([100 + 4096, -2000 - 65536 * 3]))[1] == pytest.approx(2 * np.pi)
    assert u.counts_from_q(np.array([np.pi / 2, -np.pi]))[1] == -2000 + 65536 * 1.5
    assert u.dq_from_counts(np.array([4096.0, 65536.0]))[0] == pytest.approx(2 * np.pi)
    # 1000 per mille = rated torque at the motor, times the gear at the joint, with the sign
    assert u.effort_from_permille(np.array([1000.0, 1000.0])) == pytest.approx([0.5, -0.6])
    assert u.permille_from_effort(np.array([0.25, 0.3])) == pytest.approx([500.0, -500.0])


def test_bus_load_of_six_drives():
    """SYNC + 6 x (RPDO 4 B, TPDO 8 B, TPDO 4 B) at 1 Mbit/s, worst-case bit stuffing (135 bits for 8 bytes):
    2 ms of bus per cycle, so 1 kHz overloads the bus twice over and 400 Hz fits."""
    bits = (47 + 8) + 6 * ((47 + 32 + 16) + (47 + 64 + 24) + (47 + 32 + 16))
    assert bits == 2005 and bus_load(6, Mode.CST, 1000000, 1e-3) == pytest.approx(bits / 1000.0)
    assert bus_load(6, Mode.CST, 1000000, 2.5e-3) < 1.0


def test_ur5_canopen_table():
    """The bundled UR5's [drives] table: six drives in CST, nodes 1..6, per mille of rated torque at the joint."""
    config = canopen_config(load_robot("ur5"))
    assert config.mode is Mode.CST and list(config.units.node_ids) == [1, 2, 3, 4, 5, 6]
    assert config.units.nm_per_permille[0] == pytest.approx(1.2 * 101 * 1e-3)


@pytest.mark.parametrize(
    "edit, field",
    [
        (("node_id = 2", "node_id = 1"), "drives.joints"),
        (("node_id = 3", "node_id = 300"), "drives.joints.elbow_joint.node_id"),
        (('mode = "cst"', 'mode = "csv"'), "drives.mode"),
        (("max_torque_permille = 1300", "max_torque_permille = 0"), "drives.joints.wrist_1_joint.max_torque_permille"),
        (("heartbeat_timeout_ms = 30.0", "heartbeat_timeout_ms = 5.0"), "drives.heartbeat_timeout_ms"),
    ],
)
def test_bad_canopen_tables_name_the_field(tmp_path, edit, field):
    """A bad [drives] value is refused with its file and field; the unedited table loads."""
    from pathlib import Path

    from mbctl.configs import __file__ as configs_init

    text = (Path(configs_init).parent / "ur5.toml").read_text()
    good = tmp_path / "good.toml"
    good.write_text(text)
    assert canopen_config(load_robot(good)).units.node_ids.size == 6
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace(*edit, 1))
    with pytest.raises(ConfigError) as info:
        load_robot(bad)
    assert field in str(info.value) and "bad.toml" in str(info.value)


# ---- start-up and the exchange ---------------------------------------------------------------


def test_start_up_maps_pdos_and_enables_by_sdo():
    """After open the drives run CST with the host's PDO mapping; enable walks them to Operation Enabled."""
    config = two_drives()
    emulator, bus = lockstep_pair(config)
    with emulator:
        with bus:
            assert [d.mode for d in emulator.drives] == [10, 10] and [d.heartbeat_ms for d in emulator.drives] == [1, 1]
            drive = emulator.drives[1]
            assert set(drive.rpdo) == {0x207} and [cob for cob, _, _ in drive.tpdo] == [0x187, 0x287]
            assert drive.rpdo[0x207][1] == (0x6040, 0x6071) and drive.tpdo[0][2] == (0x6041, 0x6064, 0x6077)
            assert all(d.state is State.SWITCH_ON_DISABLED for d in emulator.drives)
            bus.enable()
            assert all(d.state is State.OPERATION_ENABLED for d in emulator.drives)
            bus.write(JointCommand.torque(np.array([0.1, -0.3])))
            bus.read()
            assert [d.target_torque for d in emulator.drives] == [200, 500]  # 0.1/0.5 and -0.3/(0.2*3*-1) of rated
            state = bus.read()
            assert state.effort == pytest.approx([0.1, -0.3])
        assert torque_off(emulator)


def test_start_up_with_an_eds_file(tmp_path):
    """With ``[drives] eds`` the driver takes its objects from the drive's EDS file (here one written
    from the built-in dictionary by canopen's exporter) and runs the same start-up and exchange."""
    import canopen

    from mbctl.hardware.cia402.objects import build_dictionary

    canopen.export_od(build_dictionary(1), str(tmp_path / "drive.eds"), doc_type="eds")
    config = CanopenConfig(**{**two_drives().__dict__, "eds": tmp_path / "drive.eds"})
    emulator, bus = lockstep_pair(config)
    with emulator, bus:
        bus.enable()
        bus.write(JointCommand.torque(np.array([0.1, -0.3])))
        bus.read()
        assert bus.read().effort == pytest.approx([0.1, -0.3]) and emulator.drives[1].rpdo[0x207][1] == (0x6040, 0x6071)


def test_a_wrong_rated_torque_is_refused():
    """The drive's 0x6076 must match the TOML's rated torque (the unit of every torque on the bus)."""
    config = two_drives()
    emulator = Cia402Emulator(config, Inertia(), lockstep_s=PERIOD_S)
    wrong = CanopenConfig(**{**config.__dict__, "units": Cia402Units(**{**config.units.__dict__, "rated_torque_Nm": np.array([0.5, 0.25])})})
    with emulator:
        with pytest.raises(ConfigError, match=r"drives.joints.b.rated_torque_mNm.*0x6076\) of 200 mN·m"):
            Cia402Bus(("a", "b"), wrong, pdo_timeout_s=5.0).open()


def test_positions_and_velocities_read_in_si_units():
    """What the driver reads is the plant's state, quantised to increments (and increments/s) by hand."""
    config = two_drives()
    plant = Inertia()
    plant.q[:] = [0.3, -1.1]
    plant.dq[:] = [2.0, -0.7]
    emulator, bus = lockstep_pair(config, plant)
    with emulator, bus:
        state = bus.read()
    step = 2 * np.pi / np.array([4096.0, 65536.0 * 3])
    assert state.q == pytest.approx(np.round(plant.q / step) * step, abs=1e-15)
    assert state.q != pytest.approx(plant.q, abs=1e-6)  # quantised indeed
    assert state.dq == pytest.approx(np.round(plant.dq / step) * step, abs=1e-12)


class DirectPlant(JointInterface):
    """The same plant stepped directly, with the drives' quantisation written out here: per mille of
    rated torque (clipped to max torque) out, increments and increments/s in (UR5: zero 0, direction +1)."""

    def __init__(self, plant: TruthPlant, units: Cia402Units, names):
        self.plant, self.joint_names = plant, tuple(names)
        self.nm = units.rated_torque_Nm * units.gear_ratio / 1000.0
        self.limit = units.max_torque_permille
        self.step = 2 * np.pi / (units.counts_per_rev * units.gear_ratio)
        self.permille = np.zeros(len(names))

    def open(self): ...
    def close(self): ...
    def enable(self): ...
    def disable(self): ...

    def read(self) -> JointState:
        q, dq = self.plant.state()
        return JointState(0.0, np.round(q / self.step) * self.step, np.round(dq / self.step) * self.step, self.permille * self.nm)

    def write(self, command: JointCommand) -> None:
        self.permille = np.clip(np.round(command.value / self.nm), -self.limit, self.limit)
        self.plant.step(self.permille * self.nm, PERIOD_S)


def test_lockstep_run_equals_the_plant_stepped_directly(tmp_path):
    """Computed torque on the UR5 at 1 kHz: over the emulated CANopen bus the log equals the run on the
    plant stepped directly (same quantisation), to round-off; and the arm moved."""
    robot = load_robot("ur5")
    config = canopen_config(robot)
    config = CanopenConfig(**{**config.__dict__, "interface": "virtual", "channel": channel()})
    q_start = np.array([0.0, -1.2, 1.4, -1.6, -1.57, 0.0])
    traj = quintic_rest_to_rest(np.array([q_start, q_start + 0.3]), [0.3], 1000.0, robot.joint_names)
    law = build_controller(robot, "computed-torque")
    limits = SafetyLimits.of(robot)
    loop = LoopConfig(duration_s=0.3, paced=False, watchdog_failures=CANOPEN_WATCHDOG_FAILURES)

    def run(backend, name):
        tracking = TrackingController(law, traj, compiled=False)
        summary = run_loop(backend, tracking, limits, loop, RunLog(tmp_path / f"{name}.npz", log_columns(robot.actuated_names)), tracking.reference)
        assert summary.stop_reason == "completed", summary.stop_reason
        return np.load(tmp_path / f"{name}.npz")

    emulator = Cia402Emulator(config, TruthPlant(robot, q0=q_start, period_s=PERIOD_S), lockstep_s=PERIOD_S)
    with emulator, Cia402Bus(robot.actuated_names, config, cycle_s=PERIOD_S, pdo_timeout_s=5.0) as bus:
        can_log = run(bus, "can")
    direct = run(DirectPlant(TruthPlant(robot, q0=q_start, period_s=PERIOD_S), config.units, robot.actuated_names), "direct")
    assert can_log["q"].shape == (300, 6)
    assert np.abs(can_log["q"] - direct["q"]).max() < 1e-9 and np.abs(can_log["tau"] - direct["tau"]).max() < 1e-6
    assert np.abs(can_log["q"][-1] - can_log["q"][0]).max() > 0.2  # it tracked a real motion


def test_csp_drives_follow_their_goal():
    """In CSP the emulated drives' position loop brings the joints to the goal positions sent (joint a:
    0.5 N·m/rad on 0.01 kg m², damping ratio 0.39, settled to 1 % within 1.5 s)."""
    config = two_drives(Mode.CSP)
    emulator, bus = lockstep_pair(config, mode=CommandMode.POSITION)
    goal = np.array([0.2, -0.1])
    with emulator, bus:
        bus.enable()
        for _ in range(3000):
            state = bus.read()
            bus.write(JointCommand.position(goal))
    assert state.q == pytest.approx(goal, abs=2e-3)


# ---- faults: every one ends in a quick stop to every drive, the log kept, the reason stated ---


def _run_with_fault(tmp_path, inject, faults_at_start=None, config=None):
    """PD loop on two emulated drives (``config``, default :func:`two_drives`); ``inject(emulator)`` is
    called in cycle 50. A missing TPDO waits 0.5 s: on a loaded machine no TPDO the emulator sends is
    that late in lock-step."""
    limits = SafetyLimits(lower=np.full(2, -10.0), upper=np.full(2, 10.0), velocity=np.full(2, 50.0), effort=np.full(2, 0.9))
    emulator, bus = lockstep_pair(config or two_drives(), faults=faults_at_start, pdo_timeout_s=0.5)
    cycles = []

    def controller(t, state):
        cycles.append(t)
        if len(cycles) == 51:  # the warm-up call is the first
            inject(emulator)
        return 2.0 * (0.1 - state.q) - 0.1 * state.dq

    with emulator, bus:
        log = RunLog(tmp_path / "run.npz", log_columns(bus.joint_names))
        summary = run_loop(bus, controller, limits, LoopConfig(duration_s=0.2, paced=False, watchdog_failures=CANOPEN_WATCHDOG_FAILURES), log, comm_errors=lambda: dict(bus.comm_errors))
        off = torque_off(emulator)
    return summary, np.load(tmp_path / "run.npz"), off


def _faults(**kw):
    return lambda emu: setattr(emu, "faults", Cia402Faults(nodes=(7,), **kw))


@pytest.mark.parametrize(
    "inject, reason, kind, max_cycles",
    [
        (_faults(drop_tpdo=1.0), "watchdog: 1 consecutive failed reads (last: no_reply: node 7 (b): TPDO1 (and 1 more TPDOs) missing", "no_reply", 54),
        (_faults(corrupt_tpdo=1.0), "watchdog: 1 consecutive failed reads (last: frame: node 7 (b): TPDO1 of 7 bytes", "frame", 50),
        (_faults(stop_heartbeat=True), "watchdog: 1 consecutive failed reads (last: heartbeat: node 7 (b): no heartbeat", "heartbeat", 53),
        (lambda emu: emu.inject_fault(1, 0x4310), "drive fault: drive of joint b: EMCY 0x4310 (temperature)", "emcy", 50),
        (lambda emu: emu.leave_operation(0), "drive fault: drive of joint a: left Operation Enabled: Switch On Disabled", None, 50),
    ],
)
def test_faults_stop_the_loop_with_torque_off(tmp_path, inject, reason, kind, max_cycles):
    """Injected in cycle 50, each fault stops the run within 3 cycles (heartbeat: its 2.5 ms timeout; TPDOs
    missing for good: the fifth cycle without them, ``tpdo_missing_max``'s default)."""
    summary, log, off = _run_with_fault(tmp_path, inject)
    assert summary.stop_reason.startswith(reason), summary.stop_reason
    assert kind is None or summary.comm_errors[kind] >= 1
    assert off and log["t"].shape[0] == summary.cycles and 50 <= summary.cycles <= max_cycles


def test_a_refused_transition_stops_before_the_first_cycle(tmp_path):
    """A drive that does not follow Shutdown/Switch On/Enable Operation: no cycle runs, the reason says which."""
    summary, log, off = _run_with_fault(tmp_path, lambda emu: None, Cia402Faults(refuse_transitions=True, nodes=(7,)))
    assert summary.stop_reason.startswith("enabling torque failed: drive of joint b: refused shutdown: still Switch On Disabled")
    assert summary.cycles == 0 and off


def test_a_fault_before_enable_is_not_reset():
    """A drive already in Fault is refused at enable (its cause needs a person), not silently reset."""
    emulator, bus = lockstep_pair(two_drives())
    with emulator, bus:
        emulator.inject_fault(0, 0x2310)
        with pytest.raises(DriveStateFault, match=r"drive of joint a: EMCY 0x2310 \(current, output side\)"):
            bus.read()
        with pytest.raises(DriveStateFault, match=r"drive of joint a: is in Fault"):
            bus.enable()
        assert emulator.drives[0].state is State.FAULT


# ---- the emulator in its own process, and the command line ------------------------------------


def _udp_available() -> bool:
    try:
        open_can_bus("udp_multicast", "239.74.163.250:43999", 1000000).shutdown()
    except CommunicationError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(not _udp_available(), reason="python-can's udp_multicast cannot open a multicast socket on loopback here")
def test_emulator_in_its_own_process_gives_the_same_run(cli, tmp_path):
    """`mbctl run ur5 --bus canopen --emulate`: the emulator in its own process (udp_multicast on loopback),
    in this process (virtual bus), and started by hand with `mbctl emulate --lockstep-period` log the
    same lock-step run."""
    robot = load_robot("ur5")
    q_start = np.array([0.0, -1.2, 1.4, -1.6, -1.57, 0.0])
    write_trajectory(tmp_path / "traj.csv", quintic_rest_to_rest(np.array([q_start, q_start + 0.2]), [0.2], 1000.0, robot.joint_names))
    logs = {}
    channel = "239.74.163.251:43998"
    # started by hand: the run reaches its drives over the bus only (as a commissioning run would, the
    # arm's truth in a file only the emulator reads), lock-step because they step once per SYNC
    by_hand = ["mbctl", "emulate", "ur5", "--bus", "canopen", "--interface", "udp_multicast", "--channel", channel,
               "--lockstep-period", "0.001", "--q0", ",".join(map(str, q_start))]  # fmt: skip
    runs = (("process", ["--emulate", "--interface", "udp_multicast"]), ("thread", ["--emulate"]), ("by hand", ["--interface", "udp_multicast", "--channel", channel]))
    for name, extra in runs:
        with contextlib.ExitStack() as stack:
            if name == "by hand":
                stack.enter_context(child_process([str(Path(sys.executable).with_name("mbctl")), *by_hand[1:]], "emulating", "mbctl emulate"))
            r = cli("run", "ur5", "--trajectory", tmp_path / "traj.csv", "--bus", "canopen", "--lockstep", "--rate", "1000", *extra,
                    "--log", tmp_path / f"{name}.npz", "--summary", tmp_path / f"{name}.json")
        s = json.loads((tmp_path / f"{name}.json").read_text())
        assert r.code == 0 and s["stop_reason"] == "completed" and s["plant"] == "canopen", r.err
        logs[name] = np.load(tmp_path / f"{name}.npz")
    held = round(EndSpec.hold_s * 1000)  # the end hold's cycles follow the trajectory's
    assert np.array_equal(logs["process"]["q"], logs["thread"]["q"]) and logs["process"]["q"].shape == (200 + held, 6)
    assert np.array_equal(logs["by hand"]["q"], logs["thread"]["q"])


@pytest.mark.parametrize(
    "args, field",
    [
        (["--plant", "dynamixel", "--bus", "canopen"], "--bus"),
        (["--interface", "virtual"], "--interface"),
        (["--plant", "dynamixel", "--emulate"], "drives.bus"),
        (["--bus", "canopen", "--interface", "socketcan", "--lockstep"], "--lockstep"),  # a real bus is never lock-stepped
    ],
)
def test_contradictory_run_options_are_refused(cli, tmp_path, args, field):
    """One line naming the option (or the table), exit 2, nothing written."""
    robot = load_robot("ur5")
    write_trajectory(tmp_path / "t.csv", quintic_rest_to_rest(np.tile(UPRIGHT, (2, 1)), [0.01], 1000.0, robot.joint_names))
    r = cli("run", "ur5", "--trajectory", tmp_path / "t.csv", *args, "--log", tmp_path / "r.npz", "--summary", tmp_path / "r.json")
    assert r.code == 2 and field in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert not (tmp_path / "r.npz").exists()


def test_a_rate_beyond_the_bus_is_refused(cli, tmp_path):
    """Six drives at 1 kHz need 2 ms of a 1 Mbit/s bus per 1 ms cycle: refused before anything opens (exit 2);
    at 400 Hz the check passes and the run goes on to open the bus (no can0 here: a hardware error, exit 1)."""
    robot = load_robot("ur5")
    write_trajectory(tmp_path / "t.csv", quintic_rest_to_rest(np.tile(UPRIGHT, (2, 1)), [0.01], 1000.0, robot.joint_names))
    base = ("run", "ur5", "--trajectory", tmp_path / "t.csv", "--bus", "canopen", "--log", tmp_path / "r.npz", "--summary", tmp_path / "r.json")
    r = cli(*base, "--rate", "1000")
    assert r.code == 2 and "--rate" in r.err and "200 %" in r.err and "lower the rate to 498 Hz" in r.err, r.err
    r = cli(*base, "--rate", "400", "--interface", "socketcan", "--channel", "mbctl-no-such-can")
    assert r.code == 1 and "cannot open CAN interface socketcan channel mbctl-no-such-can" in r.err, r.err
    assert not (tmp_path / "r.npz").exists()


def test_without_rate_a_canopen_run_takes_what_the_bus_carries(cli, tmp_path):
    """No ``--rate``: six drives on 1 Mbit/s run at 400 Hz (500 Hz needs 100.25 % of the bus), the
    emulated bus alike; two drives would fit 1 kHz."""
    assert bus_rate(6, Mode.CST, 1000000) == 400.0 and bus_load(6, Mode.CST, 1000000, 1 / 500) > 1.0 >= bus_load(6, Mode.CST, 1000000, 1 / 400)
    assert bus_rate(2, Mode.CST, 1000000) == 1000.0 and bus_rate(6, Mode.CSP, 125000) == 50.0
    robot = load_robot("ur5")
    write_trajectory(tmp_path / "t.csv", quintic_rest_to_rest(np.zeros((2, 6)) + [0.0, -1.2, 1.4, -1.6, -1.57, 0.0], [0.02], 1000.0, robot.joint_names))
    r = cli("run", "ur5", "--trajectory", tmp_path / "t.csv", "--bus", "canopen", "--emulate", "--lockstep", "--log", tmp_path / "r.npz", "--summary", tmp_path / "r.json")
    assert r.code == 0 and json.loads((tmp_path / "r.json").read_text())["rate_hz"] == 400.0, r.err


def _mbctl(*args) -> subprocess.CompletedProcess:
    """``mbctl ARGS`` in a process of its own: stderr then holds all a user sees, the interpreter's exit included."""
    return subprocess.run([sys.executable, "-m", "mbctl", *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "args, field",
    [(["--channel", "notachannel"], "--channel"), (["--channel", "239.74.163.2:99999"], "--channel"), (["--channel", "10.1.2.3:43113"], "--channel"),
     (["--ripple-permille", "-1"], "--ripple-permille"), (["--reply-delay-us", "-5"], "--reply-delay-us")],
)  # fmt: skip
def test_bad_emulate_options_are_one_line_and_exit_2(args, field):
    """`mbctl emulate ur5 --bus canopen` with a bad channel or timing option: one line naming it, exit 2, no
    python-can warning at exit (no bus is built from a channel that cannot be one)."""
    r = _mbctl("emulate", "ur5", "--bus", "canopen", *args)
    assert r.returncode == 2 and r.stderr.startswith(f"mbctl: error: {field}:") and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_udp_multicast_with_the_tables_can0_channel_names_both(cli, tmp_path):
    """`mbctl run ur5 --bus canopen --interface udp_multicast` without --channel: the TOML's socketcan channel
    cannot be a multicast group; refused naming --channel and drives.channel, exit 2."""
    robot = load_robot("ur5")
    write_trajectory(tmp_path / "t.csv", quintic_rest_to_rest(np.tile(UPRIGHT, (2, 1)), [0.01], 1000.0, robot.joint_names))
    r = cli("run", "ur5", "--trajectory", tmp_path / "t.csv", "--bus", "canopen", "--interface", "udp_multicast",
            "--log", tmp_path / "r.npz", "--summary", tmp_path / "r.json")  # fmt: skip
    assert r.code == 2 and "--channel" in r.err and "'can0' (drives.channel)" in r.err and len(r.err.strip().splitlines()) == 1, r.err


@pytest.mark.skipif(not _udp_available(), reason="python-can's udp_multicast cannot open a multicast socket on loopback here")
def test_no_emulator_listening_is_one_line(tmp_path):
    """`mbctl run ur5 --bus canopen --interface udp_multicast` with nothing on the channel: the SDO timeout as one
    line (a hardware error, exit 1), without canopen's abort log or python-can's shutdown warning."""
    robot = load_robot("ur5")
    write_trajectory(tmp_path / "t.csv", quintic_rest_to_rest(np.tile(UPRIGHT, (2, 1)), [0.01], 1000.0, robot.joint_names))
    r = _mbctl("run", "ur5", "--trajectory", tmp_path / "t.csv", "--bus", "canopen", "--interface", "udp_multicast",
               "--channel", "239.74.163.251:43997", "--no-realtime", "--log", tmp_path / "r.npz", "--summary", tmp_path / "r.json")  # fmt: skip
    assert r.returncode == 1 and "No SDO response" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
