"""A Franka Research 3 in torque control over FCI, through libfranka's own client (pylibfranka; a Panda
speaks an older protocol, which libfranka 0.21 refuses at the connection).

The robot runs FCI's 1 kHz cycle: it sends its state every millisecond and expects, before the next
one, the torque to add to its own gravity compensation. :class:`FrankaArm` is that cycle behind the
joint interface:

- :meth:`~FrankaArm.open` connects (``Robot(address, RealtimeConfig)``), checks the robot is idle (a
  reflex left from an earlier run is cleared only when ``automatic_error_recovery`` asks for it), sets
  the collision thresholds, the joint impedance and the load, and loads libfranka's model;
- :meth:`~FrankaArm.enable` starts torque control;
- :meth:`~FrankaArm.read` is libfranka's ``readOnce``: it blocks until the robot's next state, so the
  robot paces the loop (:attr:`~FrankaArm.paces_loop`); the state's time (the robot's clock) is the
  sample time; ``q``, ``dq`` and ``tau_J`` (the effort) are the measurement;
- :meth:`~FrankaArm.write` is ``writeOnce(Torques)`` of the command minus the gravity the robot adds
  itself (libfranka's model of the robot, or mbctl's), limited in rate (the data sheet's 1000 N·m/s);
- :meth:`~FrankaArm.hand_over` (a clean finish) and :meth:`~FrankaArm.disable` (a stop) end torque
  control with ``motion_finished``: the robot then holds its position under its own joint impedance.
  A Franka has no "torque off": its safe state is that hold, or its brakes after a reflex.

A reflex (a collision, a limit, a missed deadline: ``communication_constraints_violation``) makes
``readOnce`` raise libfranka's ``ControlException``, whose message names the error flags; it stops the
run as a :class:`~mbctl.hardware.franka.libfranka.FrankaFault`. A lost connection (no state within
``state_timeout``) is a :class:`~mbctl.hardware.interface.CommunicationError`.

What ``tau_J`` is: on a Franka, the joint torque sensors behind the gearboxes (link side, after the
joints' friction: :attr:`effort_after_friction` True). franky-sim (``server = "franky-sim"``) reports
as ``tau_J`` the torque it applies to its MuJoCo joints: the command plus its gravity (pinocchio on
franka_description's URDF and its hand), clipped to 87 and 12 N·m; MuJoCo's joint friction
(``frictionloss``), damping and armature act beside it, so that ``tau_J`` is before friction
(:attr:`effort_after_friction` False). It fills ``tau_ext_hat_filtered`` with the same numbers; a
Franka with its own external torque estimate. The robot's ``control_command_success_rate`` (the
fraction of its last 100 cycles that got a command in time) is kept, as is the number of states the
loop missed (the robot's clock stepping by more than a millisecond between two reads); franky-sim
reports a success rate of 1 always.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from mbctl.config.franka import FrankaSpec
from mbctl.errors import InputError
from mbctl.hardware.franka.libfranka import (
    FrankaFault,
    in_mbctl_terms,
    kept_scheduling,
    libfranka_errors,
    realtime_kernel,
    require_pylibfranka,
    set_state_timeout,
    socket_inodes,
)
from mbctl.hardware.interface import CommandMode, HardwareError, JointCommand, JointInterface, JointState

__all__ = ["FrankaArm"]

JOINTS = 7
LIBFRANKA_STATE_TIMEOUT_S = 1.0  # libfranka's own wait for a state
STANDARD_GRAVITY = (0.0, 0.0, -9.81)


class FrankaArm(JointInterface):
    """The seven joints of a Franka arm in torque control over FCI (module docstring).

    Args:
        joint_names: The robot's seven actuated joints, base to flange.
        spec: The ``[franka]`` table (address, thresholds, load, timeouts, gravity model).
        mbctl_gravity: ``g(q)`` (N·m) of mbctl's model, used where ``spec.gravity`` is ``"mbctl"`` or
            libfranka's model cannot be loaded; None: libfranka's only.
        gravity_vector: The gravity (m/s²) for libfranka's model where the robot reports none in its
            state's ``O_ddP_O`` (franky-sim reports zeros; a Franka reports (0, 0, -9.81)).
        period_s: FCI's period (s).
    """

    sample_clock = True
    paces_loop = True
    """:meth:`read` blocks until the robot's next state: the loop does not sleep, and counts as overruns the
    cycles after which the robot's clock stepped by more than a period (:attr:`missed_samples`)."""
    disable_action = "torque control ended (motion_finished): the robot holds its position under its own joint impedance"
    opened = False
    """A robot was connected in this process (``mbctl``'s entry point then ends the process at once when done)."""

    def __init__(self, joint_names: Sequence[str], spec: FrankaSpec, *, mbctl_gravity: Callable[[np.ndarray], np.ndarray] | None = None,
                 gravity_vector: Sequence[float] = STANDARD_GRAVITY, period_s: float = 1e-3):  # fmt: skip
        if len(joint_names) != JOINTS:
            raise InputError(f"a Franka arm has {JOINTS} joints; the robot has {len(joint_names)} actuated ({', '.join(joint_names)})", file=spec.file, field="franka")
        self.joint_names = tuple(joint_names)
        self.spec = spec
        self.period_s = self.sample_period_s = period_s  # FCI: a state every millisecond, a command acting from the next
        self._mbctl_gravity = mbctl_gravity
        self._gravity_vector = [float(g) for g in gravity_vector]
        simulated = spec.server == "franky-sim"
        self.effort_source = "tau_J: franky-sim's applied joint torque (before its friction)" if simulated else "tau_J, the joint torque sensors"
        self.effort_after_friction = not simulated
        self.comm_errors: dict[str, int] = {}
        self.saturated = 0  # commands the rate limit changed
        self.missed_samples = 0
        self.samples = 0
        self.success_rate_min = math.nan
        self.success_rate_last = math.nan
        self.gravity_source = ""
        self.state_timeout_s = spec.state_timeout_s  # libfranka's own where its socket was not found unambiguously
        self._plf = None
        self._robot = None
        self._model = None
        self._control = None
        self._reports_gravity = False
        self._last_ms: int | None = None
        self._first_ms: int | None = None
        self._g = np.zeros(JOINTS)
        self._sent = np.zeros(JOINTS)
        self._ext_sq, self._ext_max = np.zeros(JOINTS), np.zeros(JOINTS)

    # -- connection ---------------------------------------------------------------------------
    def open(self) -> None:
        plf = self._plf = require_pylibfranka()
        spec = self.spec
        if spec.realtime == "enforce" and not realtime_kernel():
            raise InputError('this kernel has no real-time scheduling (/sys/kernel/realtime is not 1), which "enforce" requires (as libfranka does); '
                             'install a PREEMPT_RT kernel, or set realtime = "ignore" (franky-sim, a rehearsal)', file=spec.file, field="franka.realtime")  # fmt: skip
        before = socket_inodes()
        config = plf.RealtimeConfig.kEnforce if spec.realtime == "enforce" else plf.RealtimeConfig.kIgnore
        try:
            with kept_scheduling():
                self._robot = plf.Robot(spec.address, config)
            FrankaArm.opened = True
        except (plf.FrankaException, RuntimeError) as exc:
            raise InputError(f"cannot connect to a Franka at {spec.address}: {' '.join(str(exc).split())} (FCI activated in Desk? franky-sim running?)",
                             file=spec.file, field="franka.address") from None  # fmt: skip
        try:
            self.state_timeout_s = spec.state_timeout_s if set_state_timeout(before, spec.state_timeout_s) else LIBFRANKA_STATE_TIMEOUT_S
            self._check_idle()
            c, load = spec.collision, spec.load
            self._robot.set_collision_behavior(list(c.torque_lower), list(c.torque_upper), list(c.force_lower), list(c.force_upper))
            if spec.joint_impedance is not None:
                self._robot.set_joint_impedance(list(spec.joint_impedance))
            self._robot.set_load(load.mass, list(load.center), list(load.inertia))
            self._load_gravity()
        except (plf.FrankaException, RuntimeError) as exc:
            self.close()
            raise in_mbctl_terms(exc, "setting up the robot") from None
        except BaseException:
            self.close()
            raise

    def _check_idle(self) -> None:
        """The robot must be idle; a reflex is cleared only when asked (``automatic_error_recovery``)."""
        mode = self._plf.RobotMode
        state = self._robot.read_once()
        if state.robot_mode == mode.Reflex and self.spec.automatic_error_recovery:
            self._robot.automatic_error_recovery()
            state = self._robot.read_once()
        if state.robot_mode != mode.Idle:
            what = {mode.Reflex: f"in a reflex ({libfranka_errors(state.last_motion_errors) or 'no flags'}): clear it in Desk, or set [franka] automatic_error_recovery = true",
                    mode.UserStopped: "user-stopped: release the user stop",
                    mode.Move: "moving under another client",
                    mode.Guiding: "in guiding mode"}.get(state.robot_mode, f"not ready ({state.robot_mode.name}): unlock the joints and activate FCI in Desk")  # fmt: skip
            raise HardwareError(f"the Franka at {self.spec.address} is {what}")

    def _load_gravity(self) -> None:
        """libfranka's model of the robot (its own URDF, served by the robot), else mbctl's; says which."""
        if self.spec.gravity == "libfranka":
            try:
                self._model = self._robot.load_model()
            except (self._plf.FrankaException, RuntimeError) as exc:
                if self._mbctl_gravity is None:
                    raise
                self.gravity_source = f"mbctl's model (libfranka's could not be loaded: {' '.join(str(exc).split())})"
                return
            state = self._robot.read_once()
            self._reports_gravity = float(np.linalg.norm(state.O_ddP_O)) > 1.0
            where = "the robot's O_ddP_O" if self._reports_gravity else f"{self._gravity_vector} m/s² (the robot reports none in O_ddP_O)"
            self.gravity_source = f"libfranka's model of the robot (its URDF, served by the robot), gravity {where}"
        elif self._mbctl_gravity is None:
            raise InputError("gravity = \"mbctl\" needs mbctl's model of the robot", file=self.spec.file, field="franka.gravity")
        else:
            self.gravity_source = "mbctl's model"

    def close(self) -> None:
        self._control = None
        self._model = None
        self._robot = None  # libfranka closes the connection

    # -- torque control -----------------------------------------------------------------------
    def enable(self) -> None:
        try:
            with kept_scheduling():
                self._control = self._robot.start_torque_control()
        except (self._plf.FrankaException, RuntimeError) as exc:
            raise in_mbctl_terms(exc, "start_torque_control") from None
        self._sent = np.zeros(JOINTS)  # the robot adds nothing to its gravity compensation before the first command
        self._last_ms = None

    def _finish(self, tau: np.ndarray) -> None:
        """End torque control with ``tau`` as the last command (``motion_finished``): the robot takes over with
        its joint impedance. After a reflex libfranka only marks the control finished; a lost connection
        raises (and libfranka then has nothing left to cancel)."""
        control, self._control = self._control, None
        command = self._plf.Torques(tau.tolist())
        command.motion_finished = True
        control.writeOnce(command)

    def disable(self) -> None:
        """End torque control at once (no added torque), never raising."""
        if self._control is None:
            return
        try:
            self._finish(np.zeros(JOINTS))
        except Exception:  # noqa: BLE001  disable must never raise: the robot stops on its own without commands
            pass

    def hand_over(self) -> str:
        """End torque control with the last command: the robot holds its position under its own joint impedance."""
        if self._control is None:
            return "torque control had already ended"
        try:
            self._finish(self._sent)
        except Exception as exc:  # noqa: BLE001  never raises
            return f"ending torque control failed ({' '.join(str(exc).split())}); the robot stops on its own without commands"
        return "torque control finished (motion_finished): the robot holds its position under its own joint impedance"

    # -- the cycle ----------------------------------------------------------------------------
    def read(self) -> JointState:
        plf = self._plf
        try:
            state = self._control.readOnce()[0] if self._control is not None else self._robot.read_once()
        except (plf.FrankaException, RuntimeError) as exc:
            error = in_mbctl_terms(exc, "readOnce")
            if not isinstance(error, FrankaFault):
                kind = error.kind
                self.comm_errors[kind] = self.comm_errors.get(kind, 0) + 1
            raise error from None
        ms = int(round(state.time.to_sec() * 1e3))
        if self._control is not None:
            self._count(state, ms)
        q = np.array(state.q)
        if self._model is not None:
            if not self._reports_gravity:
                state.O_ddP_O = self._gravity_vector
            self._g[:] = self._model.gravity(state)
        else:
            self._g[:] = self._mbctl_gravity(q)
        return JointState(t=ms * 1e-3, q=q, dq=np.array(state.dq), effort=np.array(state.tau_J))

    def _count(self, state: object, ms: int) -> None:
        """Missed states, the success rate and the robot's external torque estimate, per cycle of control."""
        if self._last_ms is not None and ms - self._last_ms > 1:
            self.missed_samples += ms - self._last_ms - 1
        self._last_ms = ms
        if self._first_ms is None:
            self._first_ms = ms
        self.samples += 1
        rate = float(state.control_command_success_rate)
        self.success_rate_last = rate
        self.success_rate_min = rate if self.samples == 1 else min(rate, self.success_rate_min)
        ext = np.asarray(state.tau_ext_hat_filtered)
        self._ext_sq += ext * ext
        np.maximum(self._ext_max, np.abs(ext), out=self._ext_max)

    def write(self, command: JointCommand) -> None:
        if command.mode is not CommandMode.TORQUE:
            raise ValueError(f"a Franka in torque control takes torque commands, got {command.mode.value}")
        tau = command.value - self._g  # the robot adds its own gravity compensation
        limit = self.spec.torque_rate_limit * self.period_s
        if limit > 0:
            step = tau - self._sent
            if np.abs(step).max() > limit:
                self.saturated += 1
                tau = self._sent + np.clip(step, -limit, limit)
        self._sent = tau
        try:
            self._control.writeOnce(self._plf.Torques(tau.tolist()))
        except (self._plf.FrankaException, RuntimeError) as exc:
            error = in_mbctl_terms(exc, "writeOnce")
            if not isinstance(error, FrankaFault):
                self.comm_errors[error.kind] = self.comm_errors.get(error.kind, 0) + 1
            raise error from None

    # -- reports ------------------------------------------------------------------------------
    @property
    def sensing(self) -> str:
        """Where the measurements come from and what the commands lose, in one line (the run summary)."""
        server = "franky-sim (an FR3 in MuJoCo)" if self.spec.server == "franky-sim" else "a Franka over FCI"
        return (f"libfranka {getattr(self._plf, '__version__', '?')} at {self.spec.address}, {server}: q, dq, {self.effort_source} at the robot's 1 kHz "
                f"(its clock the sample time), state timeout {self.state_timeout_s * 1e3:g} ms; gravity removed from the commands: "
                f"{self.gravity_source or 'none'} (the robot adds its own)")  # fmt: skip

    def timing(self) -> dict[str, float]:
        """The robot's own report on the cycles of control: libfranka's command success rate (last and lowest
        seen), the states the loop missed, and the robot's external torque estimate (RMS and max |.| per
        joint, N·m: ``tau_ext_hat_filtered``)."""
        n = max(self.samples, 1)
        report = {
            "control_command_success_rate": self.success_rate_last,
            "control_command_success_rate_min": self.success_rate_min,
            "samples": float(self.samples),
            "missed_samples": float(self.missed_samples),
            "robot_time_s": (self._last_ms - self._first_ms) * 1e-3 if self._first_ms is not None and self._last_ms is not None else 0.0,
        }
        for name, sq, top in zip(self.joint_names, self._ext_sq, self._ext_max):
            report[f"tau_ext_hat_rms.{name}"] = float(np.sqrt(sq / n))
            report[f"tau_ext_hat_max.{name}"] = float(top)
        return report
