"""The paced simulated plant in its own process, stepping on its own clock like a robot.

The control process and the plant exchange the latest command and the latest
measurement through shared memory, so a read or a write costs microseconds and the
plant's physics is not charged to the controller's budget. The child process runs a
lock-step :class:`~mbctl.hardware.sim.SimPlant` at absolute deadlines
``t0 + k*period`` as a robot's update does: it advances one period under the command it took at
the last deadline, publishes the measurement of that instant, and takes the newest command, which
acts over the next period. A command computed from the measurement of one deadline therefore acts
from the next one on (the loop's prediction horizon, :mod:`mbctl.hardware.sample_timing`).

With torque off (before :meth:`PlantProcess.enable`, after :meth:`~PlantProcess.disable`)
the joints are held, as by brakes, and the plant's time stands still; enabled, it
moves from where it was held. A plant whose step costs more than a period catches up
by stepping back to back;
if it falls more than ``max_lag_s`` behind the wall clock it gives up the lost time
(its clock slips) and counts it. Its timing report (:meth:`PlantProcess.timing`)
gives the steps, the overruns (periods whose step ended after the next deadline),
the step cost p50/p99 (µs), the slipped time (s) and its real-time factor
``simulated time / time spent stepping`` (above 1: the plant is faster than the
robot it stands for).

Shared memory, float64 words, each block guarded by a sequence counter (odd while
the writer is inside; a reader retries until it sees the same even count before
and after copying)::

    measurement  [seq, t, t_host, q(n), dq(n), effort(n)]  plant  -> control
    command      [seq, enabled, mode, value(n)]            control -> plant

(``mode`` 0: ``value`` are drive torques, N·m or N; 1: goal positions, rad, of a plant
whose every actuated joint has a servo, ``[joints.<name>.actuator]``, taken by its firmware loop.)
    status       [ready, stop, failed, steps, overruns, saturated, busy_s, slipped_s]
"""

from __future__ import annotations

import gc
import math
import os
import pickle
import subprocess
import sys
import time
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from mbctl.dynamics.actuator import robot_servos
from mbctl.dynamics.model.robot import RobotModel
from mbctl.hardware.clock import WallClock
from mbctl.hardware.interface import CommandMode, CommunicationError, HardwareError, JointCommand, JointInterface, JointState
from mbctl.hardware.realtime import DEFAULT_PRIORITY, realtime_priority
from mbctl.hardware.sim import PlantConfig, SimPlant, encoder_resolution, sensing_description

__all__ = ["PlantProcess"]

_READY, _STOP, _FAILED, _STEPS, _OVERRUNS, _SATURATED, _BUSY, _SLIPPED = range(8)
_STATUS = 8

# the plant's step costs, counted in log-spaced bins (0.1 us .. 10 s, 200 a decade: 1.2 % wide) rather than
# kept one by one, so that its memory stays flat however long it runs (a list grew 2 MiB a minute at 1 kHz)
_COST_MIN_S, _COST_PER_DECADE, _COST_BINS = 1e-7, 200, 8 * 200


def cost_bin(cost_s: float) -> int:
    """The histogram bin of a step cost (s); costs outside 0.1 us .. 10 s go to the end bins."""
    return min(max(int(math.log10(max(cost_s, _COST_MIN_S) / _COST_MIN_S) * _COST_PER_DECADE), 0), _COST_BINS - 1)


def cost_percentile(counts: np.ndarray, percent: float) -> float:
    """The ``percent``-th percentile (s) of the costs counted in ``counts``: its bin's geometric centre (within 0.6 %)."""
    cumulative = np.cumsum(counts)
    k = int(np.searchsorted(cumulative, percent / 100.0 * cumulative[-1]))
    return _COST_MIN_S * 10.0 ** ((k + 0.5) / _COST_PER_DECADE)


class _Layout:
    """Offsets of the three blocks for ``n`` joints."""

    def __init__(self, n: int):
        self.n = n
        self.measurement = slice(0, 3 + 3 * n)
        self.command = slice(self.measurement.stop, self.measurement.stop + 3 + n)
        self.status = slice(self.command.stop, self.command.stop + _STATUS)
        self.size = self.status.stop


def _publish(block: np.ndarray, values: np.ndarray) -> None:
    block[0] += 1
    block[1:] = values
    block[0] += 1


def _snapshot(block: np.ndarray) -> np.ndarray:
    while True:
        seq = block[0]
        if seq % 2 == 0:
            values = block[1:].copy()
            if block[0] == seq:
                return values


def _serve() -> None:
    """The child process (``python -m mbctl.hardware.plant_process``): arguments pickled on stdin, report on stdout."""
    out = sys.stdout.buffer
    args = pickle.load(sys.stdin.buffer)
    shm = SharedMemory(name=args["shm"])
    # the parent owns the segment: without this, Python < 3.13 unlinks it when the child exits
    resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]
    try:
        gc.collect()
        gc.freeze()
        gc.disable()  # as in the control loop: a collection could cost the plant a period
        with realtime_priority(args["priority"]) as scheduling:
            report = _step_until_stopped(shm, args["truth"], args["period_s"], args["config"], args["q0"], args["max_lag_s"], args["spin_s"])
        report["realtime"] = scheduling.startswith("SCHED_FIFO")
    finally:
        shm.close()
    pickle.dump(report, out)
    out.flush()


def _step_until_stopped(shm: SharedMemory, truth: RobotModel, period_s: float, config: PlantConfig, q0: np.ndarray | None, max_lag_s: float, spin_s: float) -> dict:
    """Step the plant at its deadlines until the stop flag is set; the report (costs, or an error)."""
    layout = _Layout(len(truth.actuated_names))
    words = np.ndarray((layout.size,), dtype=np.float64, buffer=shm.buf)
    measurement, command, status = words[layout.measurement], words[layout.command], words[layout.status]
    costs = np.zeros(_COST_BINS, dtype=np.int64)
    try:
        try:
            plant = SimPlant(truth, period_s, config, q0=q0)
        except Exception as exc:  # noqa: BLE001  reported to the parent, which raises it
            status[_FAILED] = 1.0
            return {"error": f"{exc.__class__.__name__}: {exc}"}

        def measure(t_host: float) -> None:
            s = plant.read()
            _publish(measurement, np.concatenate([[s.t, t_host], s.q, s.dq, s.effort]))

        measure(time.perf_counter())
        clock = WallClock(spin_s)
        enabled = False
        latched = None  # the command taken at the last tick: it acts over the period that follows
        status[_READY] = 1.0
        t0 = clock.now()
        k = 0
        parent = os.getppid()
        while status[_STOP] == 0.0 and os.getppid() == parent:  # an orphaned plant stops too
            clock.sleep_until(t0 + (k + 1) * period_s)
            k += 1
            stepped = enabled  # held, as by brakes, while torque was off: the robot does not move then
            if stepped:
                start = time.perf_counter()
                plant.write(JointCommand.position(latched[2:]) if latched[1] else JointCommand.torque(latched[2:]))
                cost = time.perf_counter() - start
                measure(t0 + k * period_s)  # the state of this deadline's instant on the host's clock
            # as a robot's update does: the newest command, applied from this instant to the next tick
            latched = _snapshot(command)
            if latched[0] and not enabled:
                plant.enable()
            elif not latched[0] and enabled:
                plant.disable()
            enabled = bool(latched[0])
            if not stepped:
                continue
            costs[cost_bin(cost)] += 1
            status[_STEPS] += 1
            status[_SATURATED] = plant.saturated
            status[_BUSY] += cost
            now = clock.now()
            if now > t0 + (k + 1) * period_s:
                status[_OVERRUNS] += 1
                lag = now - (t0 + k * period_s)
                if lag > max_lag_s:
                    slip = math.floor(lag / period_s) * period_s
                    t0 += slip
                    status[_SLIPPED] += slip
        return {"costs": costs}
    except Exception as exc:  # noqa: BLE001  any failure of the plant is reported, never silent
        status[_FAILED] = 1.0
        return {"error": f"{exc.__class__.__name__}: {exc}", "costs": costs}


class PlantProcess(JointInterface):
    """The simulated plant (:class:`~mbctl.hardware.sim.SimPlant`) stepping in a child process on its own clock.

    Args:
        truth: Robot simulated (its actuated joints are served, in order).
        period_s: Plant period (s): one step and one measurement per period.
        config: Sensor model, substeps, seed.
        q0: Initial DOF positions (rad, m); default zeros.
        max_lag_s: Largest lag behind the wall clock (s) the plant makes up by
            stepping back to back; beyond it the lost time is given up and counted.
        start_timeout_s: How long the child may take to start (s): it imports the
            dynamics and builds the truth model.
        spin_s: Busy-wait window before each of the plant's deadlines (s).
        realtime_priority: ``SCHED_FIFO`` priority of the plant process, if the OS
            grants it (None: normal scheduling); ``timing()["realtime"]`` says.
    """

    sample_clock = True  # measurements carry the plant time they were sampled at
    effort_source = "the torque the simulated plant applied ([plant] effort noise added)"

    def __init__(
        self,
        truth: RobotModel,
        period_s: float,
        config: PlantConfig | None = None,
        *,
        q0: np.ndarray | None = None,
        max_lag_s: float = 0.02,
        start_timeout_s: float = 60.0,
        spin_s: float = 2e-4,
        realtime_priority: int | None = DEFAULT_PRIORITY - 1,
    ):
        self.truth = truth
        self.joint_names = truth.actuated_names
        self.period_s = self.sample_period_s = period_s
        self.config = config or PlantConfig()
        self.q0 = q0
        self.max_lag_s = max_lag_s
        self.start_timeout_s = start_timeout_s
        self.spin_s = spin_s
        self.realtime_priority = realtime_priority
        self._layout = _Layout(len(self.joint_names))
        self._servo_joints = bool(self.joint_names) and set(self.joint_names) <= set(robot_servos(truth))
        self._shm: SharedMemory | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._report: dict[str, Any] | None = None
        self._final: dict[str, float] = {}
        self._saturated = 0
        self._last_seq = -1.0
        self._stale = 0

    @property
    def sensing(self) -> str:
        """How the plant is measured, in one line (:func:`~mbctl.hardware.sim.sensing_description`)."""
        names = list(self.joint_names)
        return sensing_description(self.config, names, encoder_resolution(self.truth, names, self.config.sensors.encoder_counts))

    @property
    def saturated(self) -> int:
        """Commands the plant limited to the joints' effort limits."""
        return int(self._status[_SATURATED]) if self._shm is not None else self._saturated

    # -- shared memory -----------------------------------------------------------------------
    def _blocks(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._shm is None:
            raise HardwareError("the plant process is not open")
        words = np.ndarray((self._layout.size,), dtype=np.float64, buffer=self._shm.buf)
        return words[self._layout.measurement], words[self._layout.command], words[self._layout.status]

    def _child_report(self) -> dict[str, Any]:
        """The child's final report (waits for it to exit)."""
        if self._report is None and self._proc is not None:
            try:
                out, err = self._proc.communicate(timeout=10.0)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                out, err = self._proc.communicate()
            try:
                self._report = pickle.loads(out) if out else {"error": (err.decode(errors="replace").strip().splitlines() or ["no output"])[-1]}
            except pickle.UnpicklingError:
                self._report = {"error": "unreadable report"}
        return self._report or {}

    # -- JointInterface ----------------------------------------------------------------------
    def open(self) -> None:
        """Start the child process and wait until it publishes its first measurement."""
        self._shm = SharedMemory(create=True, size=8 * self._layout.size)
        self._measurement, self._command, self._status = self._blocks()
        self._measurement[:] = 0.0
        self._command[:] = 0.0
        self._status[:] = 0.0
        # a fresh interpreter (not multiprocessing's spawn, which re-runs the user's main script)
        self._proc = subprocess.Popen([sys.executable, "-m", "mbctl.hardware.plant_process"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        args = {"shm": self._shm.name, "truth": self.truth, "period_s": self.period_s, "config": self.config, "q0": self.q0, "max_lag_s": self.max_lag_s, "spin_s": self.spin_s, "priority": self.realtime_priority}
        assert self._proc.stdin is not None
        self._proc.stdin.write(pickle.dumps(args))
        self._proc.stdin.close()
        self._proc.stdin = None  # communicate() must not flush it again
        deadline = time.monotonic() + self.start_timeout_s
        while self._status[_READY] == 0.0:
            if self._status[_FAILED] or self._proc.poll() is not None:
                reason = self._child_report().get("error", "it exited")
                self.close()
                raise HardwareError(f"the simulated plant did not start: {reason}")
            if time.monotonic() > deadline:
                self.close()
                raise HardwareError(f"the simulated plant did not start within {self.start_timeout_s:g} s")
            time.sleep(0.005)

    def close(self) -> None:
        """Stop the child (torque off first, by the caller) and collect its timing report."""
        if self._shm is None:
            return
        self._status[_STOP] = 1.0
        self._final = self._collect()
        del self._measurement, self._command, self._status
        self._shm.close()
        self._shm.unlink()
        self._shm = None
        self._proc = None

    def enable(self) -> None:
        """Torque on, from zero torque."""
        _publish(self._command, np.concatenate([[1.0, 0.0], np.zeros(self._layout.n)]))

    def disable(self) -> None:
        """Torque off: the plant applies zero torque from its next period on."""
        if self._shm is not None:
            _publish(self._command, np.concatenate([[0.0, 0.0], np.zeros(self._layout.n)]))

    def read(self) -> JointState:
        """The latest measurement the plant published (its ``t`` is the plant's time, s).

        Raises:
            CommunicationError: If the plant process failed or exited.
        """
        seq = self._measurement[0]
        self._stale = self._stale + 1 if seq == self._last_seq else 0
        self._last_seq = seq
        # an unchanged measurement is normal between two plant periods; after a few, ask whether the plant is alive
        if self._status[_FAILED] or (self._stale >= 3 and self._proc is not None and self._proc.poll() is not None):
            raise CommunicationError("port", f"the simulated plant stopped: {self._child_report().get('error', 'its process exited')}")
        values = _snapshot(self._measurement)
        n = self._layout.n
        return JointState(t=float(values[0]), q=values[2 : 2 + n], dq=values[2 + n : 2 + 2 * n], effort=values[2 + 2 * n :], t_host=float(values[1]))

    def write(self, command: JointCommand) -> None:
        """Send drive torques, or goal positions (rad) when every actuated joint has a servo;
        the plant applies the latest one from its next period on."""
        if command.mode is CommandMode.POSITION and not self._servo_joints:
            raise ValueError("the simulated plant takes position commands only when every actuated joint has a servo ([joints.<name>.actuator])")
        if command.mode not in (CommandMode.TORQUE, CommandMode.POSITION):
            raise ValueError(f"the simulated plant takes torque commands (position commands when every joint has a servo), got {command.mode.value}")
        mode = 1.0 if command.mode is CommandMode.POSITION else 0.0
        _publish(self._command, np.concatenate([[1.0, mode], np.asarray(command.value, dtype=float)]))

    # -- timing --------------------------------------------------------------------------------
    def _collect(self) -> dict[str, float]:
        status = self._status
        report = self._child_report()
        costs = np.asarray(report.get("costs", np.zeros(_COST_BINS)), dtype=float)  # counts per cost bin
        counted = costs.sum() > 0
        steps = float(status[_STEPS])
        self._saturated = int(status[_SATURATED])
        busy = float(status[_BUSY])
        return {
            "steps": steps,
            "overruns": float(status[_OVERRUNS]),
            "slipped_s": float(status[_SLIPPED]),
            "step_p50_us": cost_percentile(costs, 50) * 1e6 if counted else math.nan,
            "step_p99_us": cost_percentile(costs, 99) * 1e6 if counted else math.nan,
            "real_time_factor": steps * self.period_s / busy if busy > 0 else math.nan,
            "realtime": float(bool(report.get("realtime"))),
        }

    def timing(self) -> dict[str, float]:
        """The plant's own timing report (after :meth:`close`: with step percentiles)."""
        return dict(self._final)


if __name__ == "__main__":
    _serve()
