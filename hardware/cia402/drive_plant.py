"""The emulated CiA 402 drives' power stages and the arm behind them.

:class:`DrivePlant` holds what every drive applies (per mille of its rated torque) and steps the
plant with it: in CST the target torque latched at the last SYNC, in CSP a PD stand-in for the
drive's position loop (motor side), each limited to the drive's max torque (0x6072), plus, where
asked, a current loop's ripple (Gaussian, ``noise_permille`` standard deviation, drawn anew each
step, seeded): the torque actual value (0x6077) a drive reports is what it applied over the step
that ended at its sample, ripple included. While no drive is in Operation Enabled their holding
brakes hold the arm (the plant stands still). An external push (``[plant.contact]``) acts from
``start`` seconds after :attr:`DrivePlant.run_start`: the first SYNC every drive received in
Operation Enabled, which is the host loop's first cycle (its time 0).

The arrays are rebuilt only when a drive's state or set-point changed (:meth:`DrivePlant.changed`),
so a step costs one vectorised torque update and one compiled plant step.

Paced, the drives' loop runs on the emulator's clock (:meth:`DrivePlant.loop_step`, every ``step_s``)
and locks to each SYNC (:meth:`DrivePlant.sampled_at`): a part step up to its instant, or, where the
loop has already stepped past it, the state interpolated between its last two steps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from mbctl.config.plant import PlantConfig
from mbctl.dynamics.external import ExternalWrench
from mbctl.dynamics.model.robot import RobotModel
from mbctl.hardware.cia402.emulated_drive import CspGains, EmulatedDrive
from mbctl.hardware.cia402.objects import Mode, State
from mbctl.hardware.cia402.units import Cia402Units

__all__ = ["DrivePlant", "plant_contact"]


def plant_contact(truth: RobotModel, config: PlantConfig) -> ExternalWrench | None:
    """The ``[plant.contact]`` push of the truth model's settings (None without one)."""
    c = config.contact
    return None if c is None else ExternalWrench(truth, c.frame, c.force, c.torque, c.start_s, c.duration_s)


class DrivePlant:
    """The drives' applied torques and the plant they move.

    Args:
        plant: Joint dynamics (:class:`~mbctl.hardware.emulator.TorquePlant`).
        units: The drives' units.
        drives: The emulated drives, in the order of the actuated joints.
        gains: The CSP position loop.
        noise_permille: Standard deviation of the current loop's ripple, per mille of rated torque.
        seed: Seed of the ripple.
        contact: An external wrench whose window counts from :attr:`run_start` (None: none).
    """

    def __init__(
        self,
        plant: object,
        units: Cia402Units,
        drives: Sequence[EmulatedDrive],
        gains: CspGains,
        *,
        noise_permille: float = 0.0,
        seed: int = 0,
        contact: ExternalWrench | None = None,
    ):
        self.plant = plant
        self.units = units
        self.drives = drives
        self.gains = gains
        self.noise_permille = float(noise_permille)
        self.contact = contact
        self.t = 0.0  # s: the plant's time
        self.run_start: float | None = None  # plant time (s) of the first SYNC with every drive enabled
        n = len(units.node_ids)
        self.applied = np.zeros(n)  # per mille over the last step, ripple included
        self._rng = np.random.default_rng(seed)
        self._dirty = True
        self._enabled = np.zeros(n, dtype=bool)
        self._csp = np.zeros(n, dtype=bool)
        self._target = np.zeros(n)
        self._goal = np.zeros(n)
        self._limit = np.zeros(n)
        self._nm = units.rated_torque_Nm / 1e3  # motor N·m per per mille
        self._scale = 2 * math.pi / units.counts_per_rev
        self._motor = units.direction * units.gear_ratio
        # the drives' loop on the clock (paced): times in s on the emulator's clock
        self.step_s, self.plant_t, self.next_step = 5e-4, 0.0, 0.0
        self.steps, self.slipped_s = 0, 0.0  # loop steps run, plant time skipped after stalls
        self.at = self.before = (0.0, *self.state())  # t, q, dq, applied at the last step and the one before

    def changed(self) -> None:
        """A drive's state, mode or set-point changed: rebuild the arrays before the next step."""
        self._dirty = True

    def _rebuild(self) -> None:
        d = self.drives
        self._enabled[:] = [x.state is State.OPERATION_ENABLED and x.nmt == 0x05 for x in d]
        self._csp[:] = [x.mode == Mode.CSP for x in d]
        cst = np.array([x.mode == Mode.CST for x in d])
        self._target[:] = [x.target_torque for x in d]
        self._target[~cst] = 0.0
        self._goal[:] = [(x.target_position - z) for x, z in zip(d, self.units.zero_count)]
        self._goal *= self._scale
        self._limit[:] = [x.max_torque for x in d]
        self._dirty = False

    def synced(self) -> None:
        """A SYNC arrived, the plant at its instant: the run's time starts at the first with every drive enabled."""
        if self.run_start is None and not self.braked and self._enabled.all():
            self.run_start = self.t

    @property
    def braked(self) -> bool:
        """No drive in Operation Enabled: their holding brakes hold the arm."""
        if self._dirty:
            self._rebuild()
        return not self._enabled.any()

    def motor_state(self) -> tuple[np.ndarray, np.ndarray]:
        """Motor angles (rad) and velocities (rad/s)."""
        q, dq = self.plant.state()
        return self._motor * q, self._motor * dq

    def torques(self) -> np.ndarray:
        """Per mille of rated torque each drive applies over the next step (ripple drawn anew)."""
        if self._dirty:
            self._rebuild()
        out = self._target.copy()
        if self._csp.any():
            x, w = self.motor_state()
            pd = (self.gains.kp_Nm_per_rad * (self._goal - x) - self.gains.kd_Nm_s_per_rad * w) / self._nm
            out[self._csp] = pd[self._csp]
        if self.noise_permille:
            out += self._rng.normal(0.0, self.noise_permille, out.shape)
        np.clip(out, -self._limit, self._limit, out=out)
        out[~self._enabled] = 0.0
        return out

    def step(self, dt: float) -> None:
        """Advance ``dt`` seconds: the drives' torques held over it, or the brakes holding the arm."""
        if self.braked:
            brake = getattr(self.plant, "brake", None)
            if brake is not None:
                brake()
            self.applied[:] = 0.0
        else:
            self.applied = self.torques()
            external = None
            if self.contact is not None and self.run_start is not None and self.contact.active(self.t - self.run_start):
                external = self.contact.generalized(self.plant.full.q)
            effort = self.units.effort_from_permille(self.applied)
            if external is None:
                self.plant.step(effort, dt)
            else:
                self.plant.step(effort, dt, external=external)
        for d, p in zip(self.drives, self.applied):
            d.torque_permille = float(p)
        self.t += dt

    def state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Joint positions, velocities (SI) and the torques applied over the last step (per mille)."""
        q, dq = self.plant.state()
        return q, dq, self.applied.copy()

    # -- the drives' loop on the clock (paced) ----------------------------------------------------
    def start_loop(self, t: float, step_s: float) -> None:
        """The loop starts at ``t`` (s), one step every ``step_s``."""
        self.step_s, self.plant_t, self.next_step = step_s, t, t + step_s
        self.at = self.before = (t, *self.state())

    def loop_step(self, until: float | None = None) -> None:
        """One step of the loop: the plant advanced to the next step's instant, or to ``until`` (a
        SYNC's, the loop then locked to it)."""
        t = self.next_step if until is None else until
        self.step(t - self.plant_t)
        self.plant_t, self.next_step = t, t + self.step_s
        self.before, self.at = self.at, (t, *self.state())
        self.steps += 1

    def skip_to(self, t: float) -> None:
        """The loop's time jumps to ``t`` without moving the plant (a stalled thread; counted)."""
        self.slipped_s += t - self.plant_t
        self.plant_t, self.next_step = t, t + self.step_s

    def sampled_at(self, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Positions, velocities and applied torques at ``t`` (a SYNC's instant): the plant stepped up
        to it, or, where the loop has already stepped past it, interpolated between its last two steps."""
        while self.next_step < t - 1e-9:
            self.loop_step()
        if self.plant_t < t - 1e-9:
            self.loop_step(t)
        (t0, q0, dq0, _), (t1, q1, dq1, applied) = self.before, self.at
        if t >= t1 - 1e-9 or t1 - t0 < 1e-12:
            return q1, dq1, applied
        w = max(0.0, (t - t0) / (t1 - t0))
        return q0 + w * (q1 - q0), dq0 + w * (dq1 - dq0), applied
