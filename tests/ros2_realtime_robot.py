"""A UR5 under ros2_control as a real one runs, written apart from mbctl's plant code: an rclpy node in
a process of its own, for tests and benchmarks (``python tests/ros2_realtime_robot.py --rate 500``).

The arm: example-robot-data's UR5 in pinocchio (the URDF found through the package's metadata, or
``--urdf``), advanced by pinocchio's ABA and an integrator of this file's own: semi-implicit Euler
on substeps of at most ``SUBSTEP_S`` (``M^-1`` taken once per update): viscous friction implicit,
dry friction (Stribeck: ``fc + (fs - fc) exp(-|v/vs|^delta)``, at most ``fs`` at rest) as the
torques within those bounds that stop what they can over the substep (time-stepping friction,
solved by projected Gauss-Seidel). The friction numbers and the joints' rotor inertias (armature,
on the diagonal of the mass matrix) are those of configs/ur5.toml, written out here by hand.

The robot's loop, on its own clock (a thread on absolute deadlines at ``--rate``, ``SCHED_FIFO``
where the OS grants it): at each update it advances the arm by the time that actually elapsed since
the last update with the command it took then; reads the joints; publishes ``sensor_msgs/JointState``
stamped with the system clock at that instant, in the driver's own joint order (alphabetical) plus a
gripper joint, effort = the torque applied over the update (plus ``--effort-noise``); then takes the
newest command that has arrived (a queue of one) for the next update.

Its controller manager (``/controller_manager``): ``list_controllers`` and ``switch_controller``
(strict or best effort; a controller claiming joints another active one claims is refused). At the
start ``scaled_joint_trajectory_controller`` (the holding controller, as on a UR: the joints held
where they are, effort their gravity torque) is active and ``forward_effort_controller`` (its
``joints`` in :data:`COMMAND_ORDER`, a shuffled order) is inactive; a command to an inactive
controller is ignored, and an active one keeps applying its last command when its sender is gone.

The first line printed is ``ur5 robot ready at RATE Hz on ROS domain N``; SIGINT or SIGTERM stop it,
and ``--stats FILE`` then gets what it did (JSON).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pinocchio as pin

ARM = ("shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint", "wrist_1_joint", "wrist_2_joint", "wrist_3_joint")
PUBLISHED = (*sorted(ARM), "gripper_finger_joint")  # the driver's own order, and a gripper's joint
COMMAND_ORDER = ("wrist_3_joint", "shoulder_pan_joint", "elbow_joint", "wrist_1_joint", "shoulder_lift_joint", "wrist_2_joint")
HOLDING, COMMANDING = "scaled_joint_trajectory_controller", "forward_effort_controller"
COMMAND_TOPIC = f"/{COMMANDING}/commands"
TYPES = {"joint_state_broadcaster": "joint_state_broadcaster/JointStateBroadcaster", HOLDING: "ur_controllers/ScaledJointTrajectoryController",
         COMMANDING: "forward_command_controller/ForwardCommandController"}
SUBSTEP_S = 5e-4
PGS_SWEEPS = 8  # projected Gauss-Seidel sweeps of the dry friction per substep
SLIP_S = 0.02  # an update this late is a slip of this process (counted)
# a stall is simulated whole, as a real arm moves on under its last command, so the stamps and the motion
# agree (cut at 20 ms, as this node once did, the arm froze while its clock ran: a false 10-120 N·m); only
# a stall beyond this is cut short (counted)
MAX_ADVANCE_S = 1.0
# configs/ur5.toml's friction, by hand: fc, fs (N m), vs (rad/s), delta, fv (N m s/rad)
FRICTION = {
    "shoulder_pan_joint": (4.0, 5.0, 0.05, 2.0, 6.0),
    "shoulder_lift_joint": (4.5, 5.5, 0.05, 2.0, 6.5),
    "elbow_joint": (3.5, 4.5, 0.05, 2.0, 5.0),
    "wrist_1_joint": (1.2, 1.5, 0.05, 2.0, 1.0),
    "wrist_2_joint": (1.2, 1.5, 0.05, 2.0, 1.0),
    "wrist_3_joint": (1.1, 1.4, 0.05, 2.0, 0.9),
}
# configs/ur5.toml's armature (reflected rotor inertia), by hand: kg m^2
ARMATURE = {"shoulder_pan_joint": 0.61, "shoulder_lift_joint": 0.61, "elbow_joint": 0.61, "wrist_1_joint": 0.21, "wrist_2_joint": 0.21, "wrist_3_joint": 0.21}
TOML = "\n".join([
    "[ros2]",
    f"command_joints = {json.dumps(list(COMMAND_ORDER))}",
    f'holding_controller = "{HOLDING}"',
    'effort = "drive"',
])
"""The ``[ros2]`` table a robot TOML needs for this node."""


def ur5_urdf() -> Path:
    """example-robot-data's UR5 URDF, from the package's installed files."""
    dist = importlib.metadata.distribution("example-robot-data")
    return next(Path(dist.locate_file(f)) for f in dist.files or () if str(f).endswith("/ur5_robot.urdf"))


class Ur5:
    """The arm's state and its dynamics (SI units, joints in :data:`ARM` order)."""

    def __init__(self, urdf: Path, q0: np.ndarray):
        self.model = pin.buildModelFromUrdf(str(urdf))
        assert tuple(self.model.names[1:]) == ARM, self.model.names
        self.model.armature = np.array([ARMATURE[j] for j in ARM])  # one revolute joint a velocity, in ARM order
        self.data = self.model.createData()
        self.q, self.v = q0.astype(float).copy(), np.zeros(6)
        self.limits = np.array(self.model.effortLimit)
        fr = np.array([FRICTION[j] for j in ARM])
        self.fc, self.fs, self.vs, self.delta, self.fv = fr.T

    def gravity(self) -> np.ndarray:
        return pin.computeGeneralizedGravity(self.model, self.data, self.q).copy()

    def advance(self, tau: np.ndarray, dt: float, external: np.ndarray) -> None:
        """``dt`` seconds with ``tau`` (N m) and ``external`` (N m) held."""
        n = max(1, math.ceil(dt / SUBSTEP_S))
        h = dt / n
        pin.computeMinverse(self.model, self.data, self.q)  # once per update: the posture barely changes within one
        minv = np.triu(self.data.Minv)
        w = h * (minv + minv.T - np.diag(np.diag(minv)))  # velocity change per unit torque over a substep
        implicit = np.linalg.inv(np.eye(6) + w * self.fv)  # viscous friction implicit: (I + W F) v_new = v + W (tau ...)
        wf = (implicit @ w).tolist()  # velocity change per unit dry friction torque, viscous friction included
        for _ in range(n):
            a = pin.aba(self.model, self.data, self.q, self.v, tau + external)
            v = (implicit @ (self.v + h * a)).tolist()
            level = self.fc + (self.fs - self.fc) * np.exp(-np.abs(self.v / self.vs) ** self.delta)
            cap = np.where(np.abs(self.v) < 1e-6, self.fs, level).tolist()
            f = [0.0] * 6
            for _ in range(PGS_SWEEPS):  # the dry friction torques within their bounds that stop what they can
                change = 0.0
                for i in range(6):
                    fi = min(max(f[i] - v[i] / wf[i][i], -cap[i]), cap[i])
                    d = fi - f[i]
                    if d:
                        f[i] = fi
                        row = wf
                        for j in range(6):
                            v[j] += row[j][i] * d
                        change = max(change, abs(d))
                if change < 1e-9:
                    break
            self.v = np.array(v)
            self.q = self.q + h * self.v


class Robot:
    """The controller manager, the joint states and the update loop (see the module docstring)."""

    def __init__(self, args: argparse.Namespace):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64MultiArray

        from mbctl.hardware.ros2.interfaces import interface_type  # the official definitions, built for rclpy

        self.args = args
        self.period = 1.0 / args.rate
        q0 = np.array([float(x) for x in args.q0.split(",")]) if args.q0 else np.zeros(6)
        self.arm = Ur5(Path(args.urdf) if args.urdf else ur5_urdf(), q0)
        self.rng = np.random.default_rng(args.seed)
        self.push = None
        if args.push:
            joint, torque, start, duration = args.push.split(":")
            self.push = (ARM.index(joint), float(torque), float(start), float(duration))
        self.lock = threading.Lock()
        self.active = {"joint_state_broadcaster": True, HOLDING: True, COMMANDING: False}
        self.newest: np.ndarray | None = None  # the command buffer (a queue of one)
        self.stats = {"updates": 0, "late_max_s": 0.0, "skipped": 0, "slips": 0, "cut": 0, "commands": 0, "ignored": 0, "switches": 0, "applied_again": 0}
        self.motion_s = 0.0
        self.stop = threading.Event()
        self.context = rclpy.Context()
        rclpy.init(context=self.context, signal_handler_options=rclpy.signals.SignalHandlerOptions.NO)
        self.node = rclpy.create_node("controller_manager", context=self.context)
        self.JointState = JointState
        self.states = self.node.create_publisher(JointState, "/joint_states", 10)
        self.node.create_subscription(Float64MultiArray, COMMAND_TOPIC, self.on_command, 10)
        self.ControllerState = interface_type("controller_manager_msgs", "msg", "ControllerState")
        self.node.create_service(interface_type("controller_manager_msgs", "srv", "ListControllers"), "/controller_manager/list_controllers", self.on_list)
        self.node.create_service(interface_type("controller_manager_msgs", "srv", "SwitchController"), "/controller_manager/switch_controller", self.on_switch)
        self.executor = SingleThreadedExecutor(context=self.context)  # rclpy's multi-threaded one holds the interpreter lock far longer
        self.executor.add_node(self.node)
        self.order = [COMMAND_ORDER.index(j) for j in ARM]

    # -- the controller manager (executor threads) ------------------------------------------------
    def on_command(self, msg) -> None:
        with self.lock:
            if not self.active[COMMANDING]:
                self.stats["ignored"] += 1
                return
            data = np.asarray(msg.data, dtype=float)
            if data.shape == (6,) and np.isfinite(data).all():
                self.newest = data[self.order]
                self.stats["commands"] += 1

    def on_list(self, request, response):
        with self.lock:
            response.controller = [self.ControllerState(name=n, state="active" if on else "inactive", update_rate=int(self.args.rate), type=TYPES[n])
                                   for n, on in self.active.items()]
        return response

    def on_switch(self, request, response):
        activate, deactivate = list(request.activate_controllers), list(request.deactivate_controllers)
        with self.lock:
            after = dict(self.active)
            bad = [c for c in activate + deactivate if c not in after]
            bad += [c for c in activate if after.get(c)] + [c for c in deactivate if after.get(c) is False]
            for c in deactivate:
                after[c] = False if c in after else None
            for c in activate:
                after[c] = True if c in after else None
            conflict = after.get(HOLDING) and after.get(COMMANDING)
            response.ok = not conflict and not (bad and request.strictness == 2)
            response.message = "" if response.ok else f"refused: {bad or 'both claim the joints'}"
            if response.ok:
                self.active = {c: bool(on) for c, on in after.items() if on is not None}
                self.newest = None  # an activated forward controller starts without a command
                self.stats["switches"] += 1
        return response

    # -- the update loop -----------------------------------------------------------------------------
    def publish(self, stamp_ns: int, effort: np.ndarray) -> None:
        msg = self.JointState()
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
        where = {j: i for i, j in enumerate(ARM)}
        msg.name = list(PUBLISHED)
        msg.position = [float(self.arm.q[where[j]]) if j in where else 0.0 for j in PUBLISHED]
        msg.velocity = [float(self.arm.v[where[j]]) if j in where else 0.0 for j in PUBLISHED]
        noise = self.rng.normal(0.0, self.args.effort_noise, 6) if self.args.effort_noise else np.zeros(6)
        msg.effort = [float(effort[where[j]] + noise[where[j]]) if j in where else 0.0 for j in PUBLISHED]
        self.states.publish(msg)

    def loop(self) -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(self.args.priority))
        except (OSError, AttributeError):
            pass
        applied: np.ndarray | None = None
        effort = self.arm.gravity()
        t0 = last = time.monotonic()
        k = 0
        while not self.stop.is_set():
            k += 1
            deadline = t0 + k * self.period
            if deadline > time.monotonic():
                time.sleep(deadline - time.monotonic())
            now = time.monotonic()
            stamp = time.time_ns()
            elapsed, last = now - last, now
            self.stats["slips"] += elapsed > SLIP_S
            self.stats["cut"] += elapsed > MAX_ADVANCE_S
            dt = min(elapsed, MAX_ADVANCE_S)
            with self.lock:
                holding = self.active[HOLDING]
            if holding or applied is None:  # held where it is: its gravity torque
                self.arm.v[:] = 0.0
                effort = self.arm.gravity()
            else:
                ext = np.zeros(6)
                if self.push is not None and self.push[2] <= self.motion_s < self.push[2] + self.push[3]:
                    ext[self.push[0]] = self.push[1]
                effort = np.clip(applied, -self.arm.limits, self.arm.limits)
                self.arm.advance(effort, dt, ext)
                self.motion_s += dt
                if self.args.die_after is not None and self.motion_s >= self.args.die_after:
                    os.kill(os.getpid(), signal.SIGKILL)
            self.publish(stamp, effort)
            with self.lock:
                if self.active[HOLDING]:
                    applied = None
                elif self.newest is not None and self.newest is not applied:
                    applied = self.newest
                elif applied is not None:
                    self.stats["applied_again"] += 1
            self.stats["updates"] += 1
            late = time.monotonic() - deadline
            self.stats["late_max_s"] = max(self.stats["late_max_s"], late)
            if late > self.period:
                self.stats["skipped"] += 1
                k = math.floor((time.monotonic() - t0) / self.period)

    def run(self) -> None:
        spin = threading.Thread(target=self.executor.spin, daemon=True)
        spin.start()
        updates = threading.Thread(target=self.loop, daemon=True)
        updates.start()
        print(f"ur5 robot ready at {self.args.rate:g} Hz on ROS domain {os.environ.get('ROS_DOMAIN_ID', '0')}", flush=True)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self.stop.set())
        while not self.stop.wait(0.1):
            pass
        updates.join(2.0)
        self.executor.shutdown(1.0)
        if self.args.stats:
            Path(self.args.stats).write_text(json.dumps({**self.stats, "q": self.arm.q.tolist(), "active": self.active, "motion_s": self.motion_s}) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=500.0, help="update rate, Hz")
    p.add_argument("--q0", help="initial joint positions, rad, in the arm's order (default zeros)")
    p.add_argument("--urdf", help="the UR5's URDF (default: example-robot-data's)")
    p.add_argument("--effort-noise", type=float, default=0.0, help="standard deviation of the effort, N m")
    p.add_argument("--push", help="JOINT:TORQUE:START:DURATION, an external torque from START s of motion")
    p.add_argument("--die-after", type=float, help="SIGKILL itself after this time of motion, s")
    p.add_argument("--priority", type=int, default=50, help="SCHED_FIFO priority of the update thread, if granted")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stats", help="write what it did at exit (JSON)")
    Robot(p.parse_args(argv)).run()


if __name__ == "__main__":
    main()
