"""Recorded samples of the compiled core, from its diagnostics function: one at a time
(:func:`sample_evaluator_of`) or as blocks a stepper returns (:func:`block_evaluator`), with the
same checks (a near-singular or flipped constraint Jacobian, inconsistent normal loads: the
interpreted evaluation then raises its error) and the same arithmetic, so that both give equal
numbers at the same state."""

from __future__ import annotations

import casadi as ca
import numpy as np
from scipy.linalg.lapack import dgesdd

from mbctl.dynamics.codegen import CompiledFunction
from mbctl.dynamics.constraints.constrained import ConstrainedDynamics, ConstrainedState
from mbctl.dynamics.simulation.records import SampleBlock

__all__ = ["DIAGNOSTICS", "block_evaluator", "sample_evaluator_of", "singular_values"]

DIAGNOSTICS = ("xdot", "applied", "force", "lam", "phi", "dphi", "target", "jac", "loads", "load_residual", "det", "singular")
"""Outputs of the diagnostics function, in order."""


def _sigma(A: np.ndarray) -> np.ndarray:
    """Singular values of one constraint Jacobian ``(m, nv)``, largest first, (min(m, nv),).

    LAPACK's ``dgesdd`` called directly: 1.6 us against 3.9 us through ``np.linalg.svd`` for
    the four-bar's 2 x 3 Jacobian. A simulation records a sample every millisecond: with the
    per-sample programmed-force check below, this made a 2 s four-bar study run cost 46-50 ms of
    CPU against 38-43 ms (the same runs, alternated)."""
    return dgesdd(A, compute_uv=0)[1] if A.shape[0] else np.zeros(0)


def singular_values(A: np.ndarray) -> np.ndarray:
    """Singular values of each constraint Jacobian of a stack ``(k, m, nv)``, largest first, (k, min(m, nv)):
    the single-sample routine per Jacobian, so that single samples and blocks give equal numbers
    (a loop of ``dgesdd`` against ``np.linalg.svd`` of a stack of 100: 3.3 against 2.1 us per
    2 x 3 Jacobian, 4.0 against 4.9 us per 5 x 12)."""
    if not A.shape[1]:
        return np.zeros((len(A), 0))
    return np.array([_sigma(a) for a in A]).reshape(len(A), min(A.shape[1:]))


def _programmed_forces(A: np.ndarray, lam: np.ndarray, programmed: np.ndarray) -> np.ndarray:
    """``-A[prog]^T lam[prog]`` per sample of stacks ``A`` (k, m, nv) and ``lam`` (k, m) (N·m, N), (k, nv)."""
    if not (A.shape[1] and programmed.any()):
        return np.zeros((len(A), A.shape[2]))
    return -(A[:, programmed, :] * lam[:, programmed, None]).sum(axis=1)


def block_evaluator(system: ConstrainedDynamics, diagnostics: ca.Function):
    nv, m = system.robot.nv, system.constraints.m
    bounds = np.cumsum([0] + [diagnostics.numel_out(i) for i in range(diagnostics.n_out())])
    where = {name: slice(int(bounds[i]), int(bounds[i + 1])) for i, name in enumerate(DIAGNOSTICS)}
    prog = system.constraints.programmed
    policy = system.singularity

    def evaluate(times: np.ndarray, states: np.ndarray, D: np.ndarray) -> SampleBlock:
        k = len(times)
        part = {name: D[sl].T for name, sl in where.items()}  # (k, size) each
        A = part["jac"].reshape(k, nv, m).transpose(0, 2, 1)  # each column of D holds A column-major
        sigma = singular_values(A)
        setup = system._setup
        lam, loads = part["lam"], part["loads"]
        recheck = np.zeros(k, dtype=bool)
        if m and setup.rank:
            recheck |= sigma[:, setup.rank - 1] < policy.tolerance * sigma[:, 0]
        if setup.orientation:
            recheck |= np.sign(part["det"][:, 0]) != setup.orientation
        if loads.shape[1]:
            recheck |= np.abs(part["load_residual"]).max(axis=1) > system.loop_tolerance * np.maximum(1.0, np.abs(loads).max(axis=1))
        for i in np.flatnonzero(recheck):  # the interpreted evaluation raises the error it would have raised
            x = states[:, i]
            system.evaluate(float(times[i]), x[:nv], x[nv : 2 * nv], x[2 * nv :])
        rank = setup.rank if setup is not None else 0
        ratio = np.ones(k)
        if rank and sigma.shape[1]:
            nonzero = sigma[:, 0] != 0
            ratio[nonzero] = sigma[nonzero, rank - 1] / sigma[nonzero, 0]
        xdot = part["xdot"]
        return SampleBlock(
            t=np.asarray(times, dtype=float),
            x=states.T.copy(),
            ddq=xdot[:, nv : 2 * nv],
            state_rate=xdot[:, 2 * nv :],
            force=part["force"],
            programmed_force=_programmed_forces(A, lam, prog),
            applied=part["applied"],
            lam=np.full((k, m), np.nan) if system.solver == "nullspace" else lam,
            phi=part["phi"],
            dphi=part["dphi"],
            target=part["target"],
            sigma_ratio=ratio,
            singular=part["singular"][:, 0] != 0,
        )

    return evaluate


def sample_evaluator_of(system: ConstrainedDynamics, diag: CompiledFunction, p: np.ndarray):
    nv, m = system.robot.nv, system.constraints.m
    prog = system.constraints.programmed
    no_programmed = np.zeros(nv) if not (m and prog.any()) else None  # decided once, not per sample
    policy = system.singularity

    def evaluate(t: float, x: np.ndarray) -> ConstrainedState:
        # the function's own buffers, copied once each: this runs at every recorded sample
        diag.inputs[0][...] = t
        diag.inputs[1][...] = x
        diag.inputs[2][...] = p
        diag.eval()
        xdot, applied, force, lam, phi, dphi, target, A, loads, residual, det, singular = (b.copy() for b in diag.outputs)
        A = A.reshape(m, nv)
        setup = system._setup
        sigma = _sigma(A)
        if m and setup.rank and sigma[setup.rank - 1] < policy.tolerance * sigma[0]:
            system.evaluate(t, x[:nv], x[nv : 2 * nv], x[2 * nv :])
        elif setup.orientation and np.sign(det) != setup.orientation:
            system.evaluate(t, x[:nv], x[nv : 2 * nv], x[2 * nv :])
        elif loads.size and np.abs(residual).max() > system.loop_tolerance * max(1.0, np.abs(loads).max()):
            system.evaluate(t, x[:nv], x[nv : 2 * nv], x[2 * nv :])  # no consistent loads: its error
        programmed = no_programmed.copy() if no_programmed is not None else _programmed_forces(A[None], lam[None], prog)[0]
        if system.solver == "nullspace":
            lam = np.full(m, np.nan)  # the null-space solver reports no multipliers (all rows kept: the same force)
        return ConstrainedState(
            t=t,
            ddq=xdot[nv : 2 * nv],
            state_rate=xdot[2 * nv :],
            force=force,
            programmed_force=programmed,
            applied=applied,
            lam=lam,
            phi=phi,
            dphi=dphi,
            target=target,
            sigma=sigma,
            singular=bool(singular),
            normal_loads=loads,
        )

    return evaluate
