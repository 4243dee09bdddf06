"""Actuation redundancy on the rigid 3-RRR: distribution modes against independent answers.

Independent answers: the null space of the loop Jacobian from pinocchio's frame
Jacobians (scipy), the pseudo-inverse, pinocchio's RNEA with loop forces for the
reactions (:func:`mbctl.dynamics.constraints.reactions.joint_reactions`), the KKT (Lagrange) solver of
the constrained dynamics, and the exact one-dimensional minimizers along the single
internal-force direction of a 3-drive, 2-DOF mechanism.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pinocchio as pin
import pytest
import scipy.linalg

from mbctl.ctrl.actuation import actuation_settings
from mbctl.ctrl.constrained_path import trajectory_from_constraints
from mbctl.ctrl.feedforward import feedforward
from mbctl.ctrl.redundancy import ActuationLimitError, ActuationRedundancy
from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.constraints.loops import LoopClosure
from mbctl.dynamics.constraints.reactions import joint_reactions
from mbctl.dynamics.constraints.solvers import lagrange
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.setup import (
    build_dynamics,
    constraint_set,
    initial_state,
    simulation_setup,
)

REDUNDANT = ("min-norm", "min-internal-force", "min-power")
MODES = (*REDUNDANT, "non-redundant")
TOL = 1e-9


@pytest.fixture(scope="module")
def rrr3(configs):
    """The robot, its motion along the spiral (101 samples) and the tree torques."""
    robot = load_robot(configs / "rrr3.toml")
    setup = simulation_setup(robot)
    dyn = build_dynamics(robot, setup)
    q0, _ = initial_state(robot, setup, dyn)
    traj = trajectory_from_constraints(dyn, np.linspace(0.0, 0.5, 101), q0)
    tau_tree = feedforward(robot, traj).dynamics.tau
    loops = [c for c in constraint_set(robot) if isinstance(c, LoopClosure)]
    return robot, traj, tau_tree, loops


@pytest.fixture(scope="module")
def redundancy(rrr3):
    robot, traj, _, _ = rrr3
    return ActuationRedundancy(robot, constraints=constraint_set(robot), q_reference=traj.q[0])


@pytest.fixture(scope="module")
def modes(rrr3, redundancy):
    _, traj, tau_tree, _ = rrr3
    return {m: redundancy.distribute(traj.t, traj.q, traj.dq, traj.ddq, tau_tree, m) for m in MODES}


@pytest.fixture(scope="module")
def reference(rrr3, redundancy):
    """Per sample from pinocchio and scipy: loop Jacobian A, its gamma, null-space basis V, W^T, f, M, nle."""
    robot, traj, tau_tree, loops = rrr3
    system = ConstrainedDynamics(robot, loops, solver="lagrange")
    B = np.zeros((robot.nv, redundancy.na))
    B[[robot.joint(n).idx_v for n in redundancy.joints], np.arange(redundancy.na)] = 1.0
    out = []
    for k in range(len(traj.t)):
        ks = system.kinematics(traj.q[k], traj.dq[k])
        cv = system.constraints.evaluate(ks, traj.t[k])
        V = scipy.linalg.null_space(cv.jac)
        M = np.triu(ks.data.M) + np.triu(ks.data.M, 1).T  # computeAllTerms fills the upper triangle
        out.append({"A": cv.jac, "gamma": cv.gamma, "V": V, "Wt": V.T @ B, "f": V.T @ tau_tree[k], "M": M, "nle": ks.data.nle.copy()})
    return system, B, out


def _null_direction(Wt: np.ndarray) -> np.ndarray:
    return scipy.linalg.null_space(Wt)[:, 0]


def test_every_mode_reproduces_the_generalized_force(rrr3, modes, reference):
    """B tau - A^T lambda = tau_tree and V^T (B tau - tau_tree) = 0 to 1e-9 at every sample, every mode."""
    _, _, tau_tree, _ = rrr3
    _, B, ref = reference
    for mode, d in modes.items():
        assert d.residual.max() <= TOL and d.reduced_residual.max() <= TOL, mode
        for k, r in enumerate(ref):
            generalized = B @ d.tau[k] - tau_tree[k]
            assert np.abs(r["V"].T @ generalized).max() <= TOL, (mode, k)
            assert np.abs(generalized - r["A"].T @ d.lam[k]).max() <= TOL, (mode, k)


def test_min_norm_equals_the_pseudo_inverse(modes, reference):
    """Without an active limit min-norm is (W^T)^+ f."""
    _, _, ref = reference
    tau = np.array([np.linalg.pinv(r["Wt"]) @ r["f"] for r in ref])
    assert np.abs(modes["min-norm"].tau - tau).max() <= TOL


def test_weighted_min_norm_is_the_weighted_pseudo_inverse(rrr3, redundancy, reference):
    """With weights w: tau = K^-1 W (W^T K^-1 W)^-1 f, K = diag(w)."""
    robot, traj, tau_tree, _ = rrr3
    w = np.array([1.0, 4.0, 0.5])
    weighted = ActuationRedundancy(
        robot, dataclasses.replace(redundancy.settings, weights=w), constraints=constraint_set(robot), q_reference=traj.q[0]
    )
    d = weighted.distribute(traj.t, traj.q, traj.dq, traj.ddq, tau_tree, "min-norm")
    for k, r in enumerate(reference[2]):
        W = r["Wt"].T
        expected = (W / w[:, None]) @ np.linalg.solve(r["Wt"] @ (W / w[:, None]), r["f"])
        assert np.abs(d.tau[k] - expected).max() <= TOL, k


def test_min_norm_with_a_tight_limit_is_the_clipped_one_dimensional_minimizer(rrr3, redundancy, reference):
    """With |tau| <= 1.2 N·m (min-norm peaks at 1.33) the QP keeps the limit, meets the force and equals
    the exact minimizer tau_p + n*clip(0, s_lo, s_hi) along the internal-force direction n."""
    robot, traj, tau_tree, _ = rrr3
    limit = 1.2
    tight = ActuationRedundancy(
        robot,
        dataclasses.replace(redundancy.settings, effort=np.full(3, limit)),
        constraints=constraint_set(robot),
        q_reference=traj.q[0],
    )
    d = tight.distribute(traj.t, traj.q, traj.dq, traj.ddq, tau_tree, "min-norm")
    assert np.abs(d.tau).max() <= limit + 1e-12
    assert d.residual.max() <= TOL and d.reduced_residual.max() <= TOL
    active = 0
    for k, r in enumerate(reference[2]):
        tau_p = np.linalg.pinv(r["Wt"]) @ r["f"]
        n = _null_direction(r["Wt"])
        bounds = np.sort(np.stack([(-limit - tau_p) / n, (limit - tau_p) / n]), axis=0)
        s = np.clip(0.0, bounds[0].max(), bounds[1].min())
        active += s != 0.0
        assert np.abs(d.tau[k] - (tau_p + n * s)).max() <= TOL, k
    assert active > 0  # the limit is active somewhere


def test_qpoases_agrees_with_qrqp_under_a_tight_limit(rrr3, redundancy):
    """Two QP solvers (compiled qrqp, interpreted qpOASES) give the same limited torques."""
    robot, traj, tau_tree, _ = rrr3
    out = {}
    for solver in ("qrqp", "qpoases"):
        settings = dataclasses.replace(redundancy.settings, effort=np.full(3, 1.2), solver=solver)
        r = ActuationRedundancy(robot, settings, constraints=constraint_set(robot), q_reference=traj.q[0])
        out[solver] = {m: r.distribute(traj.t, traj.q, traj.dq, traj.ddq, tau_tree, m).tau for m in REDUNDANT}
    for m in REDUNDANT:
        assert np.abs(out["qrqp"][m] - out["qpoases"][m]).max() < 1e-7, m


def test_reactions_match_pinocchio(rrr3, modes, reference):
    """Passive-joint and cut-joint forces equal pinocchio's RNEA with the loop forces as external forces."""
    _, traj, _, _ = rrr3
    system = reference[0]
    for mode, d in modes.items():
        rc = joint_reactions(system, traj.t, traj.q, traj.dq, traj.ddq, d.lam)
        names = list(rc.joint_names)
        tree = rc.joint_wrench[:, [names.index(n) for n in ("b1", "b2", "b3")], :3]
        expected = np.concatenate([tree, rc.loop_wrench[:, :, :3]], axis=1)
        assert d.reaction_names == ("b1", "b2", "b3", "p2", "p3")
        assert np.abs(d.reaction - expected).max() <= 1e-10, mode


def test_min_internal_force_is_minimal(rrr3, modes, reference):
    """Its reaction norm is <= every other mode's at every sample, and it is the exact minimizer
    along the internal-force direction, with the reactions taken from pinocchio."""
    _, traj, tau_tree, _ = rrr3
    best = modes["min-internal-force"].internal_force
    for mode, d in modes.items():
        assert np.all(best <= d.internal_force + 1e-12), mode
    system, B, ref = reference
    passive = [rrr3[0].joint_names.index(n) for n in ("b1", "b2", "b3")]
    for k in range(0, len(traj.t), 10):
        r = ref[k]
        tau_p = np.linalg.pinv(r["Wt"]) @ r["f"]
        n = _null_direction(r["Wt"])

        def forces(tau: np.ndarray) -> np.ndarray:
            lam = np.linalg.lstsq(r["A"].T, B @ tau - tau_tree[k], rcond=None)[0]
            rc = joint_reactions(system, traj.t[k], traj.q[k], traj.dq[k], traj.ddq[k], lam)
            return np.concatenate([rc.joint_wrench[0, passive, :3].ravel(), rc.loop_wrench[0, :, :3].ravel()])

        r0, r1 = forces(tau_p), forces(tau_p + n)
        s = -((r1 - r0) @ r0) / ((r1 - r0) @ (r1 - r0))  # the reactions are affine in s
        assert np.abs(modes["min-internal-force"].tau[k] - (tau_p + n * s)).max() <= 1e-8, k


def test_min_power_is_minimal(rrr3, modes):
    """Its drive-power norm is <= every other mode's at every sample; exactly, its regularised
    objective |P|^2 + eps^2 |tau|^2 is <= theirs."""
    _, traj, _, _ = rrr3
    eps = actuation_settings(rrr3[0]).power_regularization
    best = modes["min-power"]
    for mode, d in modes.items():
        assert np.all(best.power_norm <= d.power_norm + 1e-9), mode
        regularised = best.power_norm**2 + eps**2 * np.sum(best.tau**2, axis=1)
        assert np.all(regularised <= d.power_norm**2 + eps**2 * np.sum(d.tau**2, axis=1) + 1e-12), mode


def test_min_power_at_rest_is_min_norm(modes):
    """At the start from rest every drive speed is 0 and the regularisation makes min-power min-norm."""
    assert np.abs(modes["min-power"].tau[0] - modes["min-norm"].tau[0]).max() <= TOL


def test_non_redundant_equals_the_lagrange_solution(rrr3, modes, reference):
    """a1, a2 driving, a3 free: the torques are the multipliers of the KKT system with a1, a2
    prescribed (mbctl.dynamics.constraints.solvers.lagrange), which also reproduces the motion's ddq."""
    robot, traj, _, _ = rrr3
    d = modes["non-redundant"]
    assert np.all(d.tau[:, 2] == 0.0)
    ia1, ia2 = robot.joint("a1").idx_v, robot.joint("a2").idx_v
    for k, r in enumerate(reference[2]):
        E = np.zeros((2, robot.nv))
        E[0, ia1] = E[1, ia2] = 1.0
        ddq, lam = lagrange(r["M"], -r["nle"], np.vstack([r["A"], E]), np.concatenate([r["gamma"], traj.ddq[k, [ia1, ia2]]]))
        assert np.abs(ddq - traj.ddq[k]).max() <= 1e-9 * max(1.0, np.abs(traj.ddq[k]).max())
        assert np.abs(d.tau[k, :2] - (-lam[-2:])).max() <= TOL, k


def test_infeasible_limits_name_time_and_drives(rrr3, redundancy):
    """|tau| <= 1 N·m cannot hold the spiral's end; the error gives the time and the drives at their limits."""
    robot, traj, tau_tree, _ = rrr3
    tight = ActuationRedundancy(
        robot,
        dataclasses.replace(redundancy.settings, effort=np.full(3, 1.0)),
        constraints=constraint_set(robot),
        q_reference=traj.q[0],
    )
    with pytest.raises(ActuationLimitError) as info:
        tight.distribute(traj.t, traj.q, traj.dq, traj.ddq, tau_tree, "min-internal-force")
    err = info.value
    assert 0.45 < err.time < 0.5 and err.joints == ("a1", "a2")
    assert "infeasible at t = " in str(err) and err.field == "actuation.effort"
    with pytest.raises(ActuationLimitError) as info:
        tight.distribute(traj.t, traj.q, traj.dq, traj.ddq, tau_tree, "non-redundant")
    (joint,) = info.value.joints
    assert f"mode non-redundant needs tau.{joint} = " in str(info.value) and "beyond its limit 1 N·m" in str(info.value)


def test_trajectory_from_constraints_follows_the_spiral(rrr3):
    """P runs from (0, 0) to (-14.42, 36.15) mm on the loops; dq and ddq match differences of q."""
    robot, traj, _, _ = rrr3
    data = robot.model.createData()
    fid = robot.model.getFrameId("p1")
    ends = []
    for k in (0, len(traj.t) - 1):
        pin.framesForwardKinematics(robot.model, data, robot.configuration(traj.q[k]))
        ends.append(data.oMf[fid].translation[:2].copy())
    assert np.abs(ends[0]).max() < 1e-12
    assert np.abs(ends[1] - [-14.42e-3, 36.15e-3]).max() < 1e-9
    fine = trajectory_from_constraints(
        build_dynamics(robot, simulation_setup(robot)), traj.t[50] + np.array([-1e-5, 0.0, 1e-5]), traj.q[50]
    )
    assert np.abs((fine.q[2] - fine.q[0]) / 2e-5 - traj.dq[50]).max() < 1e-6 * np.abs(traj.dq[50]).max()
    assert np.abs((fine.dq[2] - fine.dq[0]) / 2e-5 - traj.ddq[50]).max() < 1e-5 * np.abs(traj.ddq[50]).max()
