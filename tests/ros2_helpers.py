"""Shared by the live ROS 2 tests: a DDS domain per test, a small planar arm and its closed-form dynamics.

The arm: two revolute joints about z, gravity along -y, links along x. Link 1: mass M1 at L1C from
the shoulder, inertia I1 about its centre; the elbow at L1; link 2: M2 at L2C, I2. Its equations
(Spong's two-link arm), independent of pinocchio and of mbctl:

    M(q) ddq + c(q, dq) + g(q) = tau
    M11 = I1 + I2 + M1 L1C^2 + M2 (L1^2 + L2C^2 + 2 L1 L2C cos q2),  M12 = I2 + M2 (L2C^2 + L1 L2C cos q2),
    M22 = I2 + M2 L2C^2,  h = M2 L1 L2C sin q2,  c = (-h (2 dq1 dq2 + dq2^2), h dq1^2),
    g = (G (M1 L1C + M2 L1) cos q1 + G M2 L2C cos(q1 + q2), G M2 L2C cos(q1 + q2)).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np

M1, L1C, I1, L1 = 2.0, 0.2, 0.03, 0.4
M2, L2C, I2 = 1.0, 0.15, 0.01
G = 9.81

URDF = f"""<?xml version="1.0"?>
<robot name="arm2">
  <link name="base"/>
  <link name="link1"><inertial><origin xyz="{L1C} 0 0"/><mass value="{M1}"/>
    <inertia ixx="0.001" iyy="{I1}" izz="{I1}" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <link name="link2"><inertial><origin xyz="{L2C} 0 0"/><mass value="{M2}"/>
    <inertia ixx="0.001" iyy="{I2}" izz="{I2}" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <joint name="shoulder" type="revolute"><parent link="base"/><child link="link1"/>
    <origin xyz="0 0 0"/><axis xyz="0 0 1"/><limit lower="-3" upper="3" velocity="5" effort="60"/></joint>
  <joint name="elbow" type="revolute"><parent link="link1"/><child link="link2"/>
    <origin xyz="{L1} 0 0"/><axis xyz="0 0 1"/><limit lower="-3" upper="3" velocity="5" effort="30"/></joint>
</robot>
"""

TOML = """urdf = "arm2.urdf"
gravity = [0.0, -9.81, 0.0]
[control.computed-torque]
kp = 400.0
kd = 40.0
[plant]
encoder_counts = 0
"""

_domains = itertools.count()


def private_domain(monkeypatch) -> int:
    """A DDS domain of this test's own (per test, per pytest-xdist worker, per process) and
    discovery on this machine only."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    domain = 1 + (os.getpid() * 37 + index * 53 + next(_domains) * 7) % 99  # 1..99: mbctl run --emulate picks 100..199 where unset
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    return domain


def write_arm(folder: Path, ros2: str = "", name: str = "arm2") -> Path:
    """The arm's URDF and a TOML (with ``ros2``, the body of a ``[ros2]`` table, if given)."""
    (folder / "arm2.urdf").write_text(URDF)
    toml = folder / f"{name}.toml"
    toml.write_text(TOML + (f"[ros2]\n{ros2}\n" if ros2 else ""))
    return toml


def mass_matrix(q: np.ndarray) -> np.ndarray:
    c2 = np.cos(q[1])
    m11 = I1 + I2 + M1 * L1C**2 + M2 * (L1**2 + L2C**2 + 2 * L1 * L2C * c2)
    m12 = I2 + M2 * (L2C**2 + L1 * L2C * c2)
    return np.array([[m11, m12], [m12, I2 + M2 * L2C**2]])


def gravity(q: np.ndarray) -> np.ndarray:
    """Gravity torques (N·m)."""
    c12 = np.cos(q[0] + q[1])
    return np.array([G * (M1 * L1C + M2 * L1) * np.cos(q[0]) + G * M2 * L2C * c12, G * M2 * L2C * c12])


def acceleration(q: np.ndarray, dq: np.ndarray, tau: np.ndarray) -> np.ndarray:
    h = M2 * L1 * L2C * np.sin(q[1])
    c = np.array([-h * (2 * dq[0] * dq[1] + dq[1] ** 2), h * dq[0] ** 2])
    return np.linalg.solve(mass_matrix(q), tau - c - gravity(q))


def rk4(q: np.ndarray, dq: np.ndarray, tau: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """One classical Runge-Kutta step of the arm with ``tau`` held (s)."""
    def f(x: np.ndarray) -> np.ndarray:
        return np.concatenate([x[2:], acceleration(x[:2], x[2:], tau)])

    x = np.concatenate([q, dq])
    k1 = f(x)
    k2 = f(x + dt / 2 * k1)
    k3 = f(x + dt / 2 * k2)
    k4 = f(x + dt * k3)
    x = x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return x[:2], x[2:]
