"""Simulation of a :class:`~mbctl.dynamics.flexible.planar.PlanarFlexibleModel`: Radau or ROS2, and the run it records.

``"radau"`` is scipy's Radau IIA (adaptive) with the model's forward-difference Jacobian;
``"ros2"`` the two-stage Rosenbrock-W method of :mod:`mbctl.dynamics.simulation.ros2` (fixed
step) with the exact stiff block ``[[0, I], [-G K~, -G D~]]`` of the elastic coordinates and
spring joints as its Jacobian (:class:`~mbctl.dynamics.simulation.ros2.StiffBlockUpdate`),
stepping in generated C where the output times are equally spaced. The applied force is
given at the output times and linear in between (:func:`interpolate_force`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.integrate

from mbctl.dynamics.simulation import ros2
from mbctl.errors import ConfigError, MbctlError

if TYPE_CHECKING:  # the model's class binds simulate as its method
    from mbctl.dynamics.flexible.planar import PlanarFlexibleModel

__all__ = ["INTEGRATORS", "FlexibleRun", "PlanarFlexibleError", "interpolate_force", "simulate"]

INTEGRATORS = ("radau", "ros2")

# ROS2 steps per call into C at most: enough to make the return to Python rare, few enough that the
# generated function compiles in seconds
_CHUNK_STEPS = 100


class PlanarFlexibleError(MbctlError):
    """The integration of the planar flexible model failed (the message says where)."""


@dataclass(frozen=True, eq=False)
class FlexibleRun:
    """A simulated run of a :class:`PlanarFlexibleModel` (one row per recorded sample).

    Attributes:
        t: Times (s), (N,).
        q, v, a: Generalized coordinates, velocities, accelerations (N, n).
        lam: Loop multipliers (N, m), N (``Q_c = -A^T lambda`` on the position rows ``p_A - p_B``).
        phi: Loop violation (N, m) (m).
        integrator: ``"radau"`` or ``"ros2"``.
        steps: Integrator steps (ros2; 0 for radau); evaluations: right-hand-side evaluations; jacobians: Jacobian evaluations.
        wall_s: Wall time of the integration (s), compile time excluded; compile_s: of the code generation.
    """

    t: np.ndarray
    q: np.ndarray
    v: np.ndarray
    a: np.ndarray
    lam: np.ndarray
    phi: np.ndarray
    integrator: str
    steps: int
    evaluations: int
    jacobians: int
    wall_s: float
    compile_s: float


def simulate(
    model: PlanarFlexibleModel,
    x0: np.ndarray,
    t_out: np.ndarray,
    force: Callable[[float], np.ndarray] | np.ndarray | None = None,
    *,
    integrator: str = "radau",
    rtol: float = 1e-6,
    atol: float = 1e-9,
    step: float = 1e-4,
    compiled_steps: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> FlexibleRun:
    """Integrate from ``x0`` at ``t_out[0]``, recording at ``t_out`` (s).

    Args:
        force: ``t -> Q`` (n,): generalized force on the coordinates (N·m on the joints), or its
            samples at ``t_out`` (len(t_out), n), linear in between; default none. ``ros2``
            takes it at ``t_out`` and linear in between in any case.
        integrator: ``"radau"`` (adaptive, ``rtol``/``atol``, the Jacobian by forward differences)
            or ``"ros2"`` (fixed ``step``, :mod:`mbctl.dynamics.simulation.ros2` with its
            :class:`~mbctl.dynamics.simulation.ros2.StiffBlockUpdate`: ``J`` is the stiff block
            ``da/dq_s = -G K_s``, ``da/dv_s = -G D_s`` of the elastic coordinates and spring
            joints ``s`` at every step's state, ``G`` the coordinates' block of the KKT matrix's
            inverse; the rest of the Jacobian (joint columns, Baumgarte terms, velocity
            terms: eigenvalues far below ``1/step``) is left to the W-method, which keeps its
            order with any ``J``). The force is interpolated linearly between the output times
            (exact for torques sampled there).
        compiled_steps: ``ros2`` with equally spaced ``t_out``: the steps run in generated C,
            one call per output interval; otherwise the same arithmetic stepped in numpy.
        progress: Called with ``(done, total)`` steps (``ros2``) about 20 times per run.

    Raises:
        ConfigError: For an unknown integrator or a bad step.
        PlanarFlexibleError: If the integration fails or the state becomes non-finite.
    """
    if integrator not in INTEGRATORS:
        raise ConfigError(f"unknown integrator {integrator!r} (expected one of: {', '.join(INTEGRATORS)})", field="integrator")
    t_out = np.asarray(t_out, dtype=float)
    start = time.perf_counter()
    rhs = model.compiled("rhs")
    compile_s = time.perf_counter() - start
    counts = {"rhs": 0, "jac": 0}
    if force is None or callable(force):
        zero = np.zeros(model.n)

        def u(t: float) -> np.ndarray:
            return zero if force is None else force(t)

        forces = np.array([u(tk) for tk in t_out]).reshape(len(t_out), model.n)
    else:
        forces = np.asarray(force, dtype=float)
        if forces.shape != (len(t_out), model.n):
            raise ValueError(f"force samples of shape {forces.shape}, expected ({len(t_out)}, {model.n}): one row per output time")

        def u(t: float) -> np.ndarray:
            k = min(max(int(np.searchsorted(t_out, t, side="right")) - 1, 0), len(t_out) - 2)
            w = (t - t_out[k]) / (t_out[k + 1] - t_out[k])
            return forces[k] + w * (forces[k + 1] - forces[k])

    start = time.perf_counter()
    if integrator == "radau":
        jac = model.compiled("jac")
        compile_s += time.perf_counter() - start
        start = time.perf_counter()

        def f(t: float, x: np.ndarray) -> np.ndarray:
            counts["rhs"] += 1
            return rhs(x, u(t))[0].ravel()

        def J(t: float, x: np.ndarray) -> np.ndarray:
            counts["jac"] += 1
            counts["rhs"] += len(x) + 1
            return np.asarray(jac(x, u(t))[0])

        sol = scipy.integrate.solve_ivp(f, (t_out[0], t_out[-1]), x0, method="Radau", t_eval=t_out, jac=J, rtol=rtol, atol=atol)
        if not sol.success or sol.y.shape[1] != len(t_out):
            raise PlanarFlexibleError(f"Radau failed at t = {sol.t[-1]:.6g} s: {sol.message}")
        X, steps = sol.y.T, 0  # scipy does not report its accepted steps
    else:
        if not (math.isfinite(step) and step > 0):
            raise ConfigError(f"must be > 0, got {step!r}", field="step")
        X, steps, compile_s, wall = _ros2(model, x0, t_out, forces, step, compiled_steps, progress, counts, compile_s)
    if integrator == "radau":
        wall = time.perf_counter() - start
    n, m = model.n, model.m
    A = np.empty((len(t_out), n))
    lam = np.empty((len(t_out), m))
    phi = np.empty((len(t_out), m))
    for k, xk in enumerate(X):
        xdot, lk, pk = rhs(xk, forces[k])
        A[k], lam[k], phi[k] = xdot.ravel()[n:], lk.ravel(), pk.ravel()
    return FlexibleRun(
        t=t_out,
        q=X[:, :n].copy(),
        v=X[:, n:].copy(),
        a=A,
        lam=lam,
        phi=phi,
        integrator=integrator,
        steps=steps,
        evaluations=counts["rhs"],
        jacobians=counts["jac"],
        wall_s=wall,
        compile_s=compile_s,
    )


def _ros2(model: PlanarFlexibleModel, x0, t_out, forces, step, compiled_steps, progress, counts, compile_s) -> tuple[np.ndarray, int, float, float]:
    """ROS2 through :func:`mbctl.dynamics.simulation.ros2.integrate` with steps that land on every
    output time, ``forces`` (N x n) given there: ``(X, steps, compile_s, wall_s)``."""
    start = time.perf_counter()
    update = model.stiff_update()
    compile_s += time.perf_counter() - start
    rhs = model.compiled("rhs")
    spans = np.diff(t_out)
    uniform = len(spans) > 0 and np.allclose(spans, spans[0], rtol=1e-9, atol=0.0)
    counts_per_span = [max(1, math.ceil(span / step - 1e-9)) for span in (spans[:1] if uniform else spans)]

    def per_step(first: int, samples: int, count: int) -> np.ndarray:
        """``u_step`` columns of the ``count`` steps of each output interval ``first ... first + samples - 1``:
        the force on the line between the interval's samples, at each step's ends."""
        w0, w1 = np.arange(count) / count, np.arange(1, count + 1) / count
        Fa, Fb = forces[first : first + samples], forces[first + 1 : first + samples + 1]
        ta, tb = t_out[first : first + samples, None], t_out[first + 1 : first + samples + 1, None]

        def at(w):
            return (Fa[:, None, :] + w[None, :, None] * (Fb - Fa)[:, None, :]).reshape(samples * count, -1).T, (ta + w * (tb - ta)).reshape(1, -1)

        (ua, t0), (ub, t1) = at(w0), at(w1)
        return np.vstack([ua, ub, t0, t1])

    def f(t: float, x: np.ndarray, u_step: np.ndarray) -> np.ndarray:
        counts["rhs"] += 1
        return rhs(x, interpolate_force(t, u_step, model.n))[0].ravel()

    records: list[np.ndarray] = []

    def record(t: float, x: np.ndarray) -> None:
        records.append(x)

    def check(t: float, X: np.ndarray) -> None:
        if not np.isfinite(X).all():
            raise PlanarFlexibleError(f"the state became non-finite by t = {t:.6g} s: try a smaller step")

    steps = 0
    if uniform:
        count = counts_per_span[0]
        n = count * len(spans)
        h = spans[0] / count
        # several samples per call into C (fewer returns to Python), at most _CHUNK_STEPS steps
        chunk = ros2.chunk_steps(n, count, n, _CHUNK_STEPS, several=True)
        outputs = max(1, chunk // count)
        advance = ros2.python_steps(f, update, outputs=outputs, per_step=(0,))
        if compiled_steps:
            start = time.perf_counter()
            stepper = model.ros2_stepper(chunk, outputs)
            compile_s += time.perf_counter() - start

            def advance(t, x, h, taken, extra, inputs):
                counts["rhs"] += 2 * taken
                return stepper(t, x, h, *extra, *inputs)[0]

        def extra(ta: float, tb: float) -> tuple[np.ndarray]:
            first, offset = divmod(round((ta - t_out[0]) / h), count)
            if chunk < count:  # a part of one output interval
                return (per_step(first, 1, count)[:, offset : offset + chunk],)
            return (per_step(first, chunk // count, count),)

        start = time.perf_counter()
        ros2.integrate(
            advance, update, x0, float(t_out[0]), h, n, chunk, every=count, refresh_every=n, record=record, check=check, extra=extra, progress=progress
        )
        steps = n
    else:
        start = time.perf_counter()
        records.append(np.array(x0, dtype=float))
        advance = ros2.python_steps(f, update, per_step=(0,))
        for k, count in enumerate(counts_per_span):
            X = advance(float(t_out[k]), records[-1], spans[k] / count, count, (per_step(k, 1, count),), ())
            check(float(t_out[k + 1]), X)
            records.append(X[:, -1])
            steps += count
            if progress is not None:
                progress(k + 1, len(spans))
    return np.array(records), steps, compile_s, time.perf_counter() - start


def interpolate_force(t, u_step, n: int):
    """The force at ``t`` on the line from ``u_a`` at ``t_a`` to ``u_b`` at ``t_b``, ``u_step = [u_a, u_b,
    t_a, t_b]`` (numpy or CasADi)."""
    ua, ub, ta, tb = u_step[:n], u_step[n : 2 * n], u_step[2 * n], u_step[2 * n + 1]
    return ua + (ub - ua) * ((t - ta) / (tb - ta))
