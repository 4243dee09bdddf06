"""Forward simulation of constrained dynamics: fixed-step RK4 or scipy's adaptive/stiff methods.

The state is ``x = [q, dq, s]``: DOF coordinates (rad, m), their velocities and the
force elements' internal states (LuGre bristle deflections), integrated together:
``dx/dt = [dq, ddq, ds/dt]`` with ``ddq`` from
:meth:`~mbctl.dynamics.constraints.constrained.ConstrainedDynamics.evaluate`.

- ``integrator="rk4"``: classical 4th-order Runge–Kutta with a fixed step ``h``
  (the largest step ``<= step`` that divides the duration evenly).
- ``"ros2"`` (stiff, fixed step): the two-stage Rosenbrock-W method ROS2 of
  :mod:`mbctl.dynamics.simulation.ros2` (two evaluations per step, no Newton iteration,
  second order with any ``J``) with its
  :class:`~mbctl.dynamics.simulation.ros2.StateDiagonalUpdate`: ``J`` is the
  finite-difference Jacobian ``df/dx`` (one
  evaluation per state; normal loads of load-dependent friction held at the step's
  values, which leaves out only their weak, non-stiff coupling and makes those
  evaluations ~3x cheaper), refreshed every ``jacobian_interval`` seconds, with the
  diagonal of the force elements' states (LuGre ``-sigma0*|v|/g``, which changes with
  every velocity) refreshed at every step. Springs, dampers, Baumgarte terms and
  bristles far stiffer than ``1/h`` are damped, not resolved: the method is meant for
  steps of ~1 ms where RK4 needs 1e-5 s.
- ``"radau"``, ``"bdf"``, ``"lsoda"`` (stiff) and ``"rk45"``, ``"dop853"``
  (explicit adaptive): :func:`scipy.integrate.solve_ivp` with ``rtol``, ``atol``
  and an optional ``max_step``.

Samples are recorded every ``output_step`` seconds (default: every RK4 step, or
``step`` for adaptive methods); each record holds the full
:class:`~mbctl.dynamics.constraints.constrained.ConstrainedState` quantities at that instant.
With a ``sink``, the records go to it in batches of ``batch_samples`` as the run proceeds (a
long run then holds one batch in memory). A
near-singular constraint Jacobian or contradicting constraints stop the run with an
error naming the time and configuration (see :mod:`mbctl.dynamics.constraints.constrained`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import scipy.integrate
import scipy.linalg

from mbctl.config.simulation import BACKENDS, INTEGRATORS
from mbctl.dynamics.constraints.constrained import ConstrainedDynamics, ConstrainedState
from mbctl.dynamics.constraints.errors import InconsistentConstraintsError, SingularConstraintError
from mbctl.dynamics.simulation import ros2
from mbctl.dynamics.simulation.compiled import CompiledCore, NotCompilable, unsupported
from mbctl.dynamics.simulation.records import Records, SimulationResult, build_result, recorded_samples, sample_bytes
from mbctl.dynamics.simulation.ros2 import MAX_CHUNK_STEPS
from mbctl.errors import ConfigError, MbctlError

__all__ = ["BACKENDS", "INTEGRATORS", "MAX_CHUNK_STEPS", "SimulationError", "SimulationResult", "recorded_samples", "sample_bytes", "simulate"]


_SCIPY = {"radau": "Radau", "bdf": "BDF", "lsoda": "LSODA", "rk45": "RK45", "dop853": "DOP853"}

Progress = Callable[[int, int], None]


class SimulationError(MbctlError):
    """The integrator failed (step size underflow, non-finite state)."""


# RK4's stability interval on the negative real axis is about [-2.785, 0]; keep a margin
RK4_STABILITY = 2.5


def _check_rk4_stability(system: ConstrainedDynamics, t: float, h: float, x: np.ndarray, nv: int) -> None:
    """Refuse a step that would make RK4 unstable on a stiff internal state (LuGre bristles)."""
    for element, sl in zip(system.forces, system.state_slices):
        rate, name = element.state_stiffness(x[nv : 2 * nv], x[2 * nv :][sl])
        if h * rate > RK4_STABILITY:
            raise ConfigError(
                f"the RK4 step {h:.3g} s is unstable for the stiff state {name} at t = {t:.6g} s "
                f"(decay rate {rate:.4g} 1/s, h*rate = {h * rate:.3g} > {RK4_STABILITY}); use a step below "
                f'{RK4_STABILITY / rate:.2g} s or a stiff integrator (integrator = "radau")',
                file=system.robot.source,
                field="simulation.step",
            )


def derivative(system: ConstrainedDynamics, t: float, x: np.ndarray, nv: int) -> np.ndarray:
    """``dx/dt`` of the interpreted dynamics at ``(t, x)``, ``x = [q, dq, states]``."""
    ev = system.evaluate(t, x[:nv], x[nv : 2 * nv], x[2 * nv :])
    return np.concatenate([x[nv : 2 * nv], ev.ddq, ev.state_rate])


def _difference_steps(x: np.ndarray) -> np.ndarray:
    """Forward-difference steps ``sqrt(eps)*max(|x_i|, 1e-3)`` per state."""
    return 1.5e-8 * np.maximum(np.abs(x), 1e-3)


def _jacobian(f: Callable, t: float, x: np.ndarray, fx: np.ndarray) -> np.ndarray:
    """``df/dx`` by forward differences (steps :func:`_difference_steps`)."""
    J = np.empty((len(x), len(x)))
    for i, dx in enumerate(_difference_steps(x)):
        xp = x.copy()
        xp[i] += dx
        J[:, i] = (f(t, xp)[0] - fx) / dx
    return J


def simulate(
    system: ConstrainedDynamics,
    q0: np.ndarray,
    dq0: np.ndarray,
    duration: float,
    *,
    integrator: str = "rk4",
    step: float = 1e-4,
    output_step: float | None = None,
    t0: float = 0.0,
    state0: np.ndarray | None = None,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    max_step: float | None = None,
    jacobian_interval: float = 0.05,
    progress: Progress | None = None,
    backend: str = "auto",
    sink: Callable[[SimulationResult], None] | None = None,
    batch_samples: int = 4096,
    watch: Callable[[float, np.ndarray], None] | None = None,
) -> SimulationResult:
    """Integrate the constrained dynamics of ``system`` from ``(q0, dq0)`` at ``t0`` for ``duration`` s.

    Args:
        integrator: One of :data:`INTEGRATORS`.
        step: RK4 step (s); for adaptive methods the default output interval.
        output_step: Interval between recorded samples (s); rounded to whole RK4 steps.
        state0: Initial force-element states (default: ``system.initial_state()``).
        rtol, atol, max_step: Tolerances and largest step of adaptive methods.
        jacobian_interval: ``ros2``: simulated time between Jacobian refreshes (s).
        progress: Called with ``(done, total)``: RK4 steps, or recorded samples for
            adaptive methods.
        backend: ``"compiled"``: RK4 steps run in generated C
            (:mod:`mbctl.dynamics.simulation.compiled`); ROS2 and the scipy methods
            step in Python and call the compiled right-hand side (ROS2's Jacobian then
            also differentiates through the normal loads of load-dependent friction).
            Recorded samples come from the compiled diagnostics, checked as
            :func:`~mbctl.dynamics.simulation.compiled.sample_evaluator` says (outside
            RK4, a singular configuration stops the run at the first recorded sample
            (ROS2) or accepted step (scipy) after it). ``"python"``: the interpreted reference throughout. ``"auto"``
            (default): compiled where the system allows it.
        sink: Called with every ``batch_samples`` recorded samples (and the rest at the end) as a
            :class:`SimulationResult` whose counters are zero; the result returned then holds no
            samples, only the run's counters.
        watch: Called with ``(t, q)`` (s; rad, m) of every recorded sample as it is recorded, e.g. to
            publish the latest state to a live view (:class:`mbctl.viz.live.LiveView`); it must
            return at once (the run waits for it) and must not keep ``q`` (a view, reused).

    Raises:
        ConfigError: For a bad integrator name, step or duration.
        SingularConstraintError, InconsistentConstraintsError: See :mod:`mbctl.dynamics.constraints.constrained`.
        SimulationError: If the integrator fails.
    """
    source = system.robot.source
    if integrator not in INTEGRATORS:
        raise ConfigError(f"unknown integrator {integrator!r} (expected one of: {', '.join(INTEGRATORS)})", file=source, field="simulation.integrator")
    for name, value in (("duration", duration), ("step", step)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ConfigError(f"must be > 0, got {value!r}", file=source, field=f"simulation.{name}")
    if output_step is not None and not (math.isfinite(output_step) and output_step > 0):
        raise ConfigError(f"must be > 0, got {output_step!r}", file=source, field="simulation.output_step")
    nv = system.robot.nv
    q0 = np.asarray(q0, dtype=float).copy()
    dq0 = np.asarray(dq0, dtype=float).copy()
    s0 = system.initial_state() if state0 is None else np.asarray(state0, dtype=float).copy()
    if q0.shape != (nv,) or dq0.shape != (nv,) or s0.shape != (system.n_states,):
        raise ValueError(f"initial state shapes {q0.shape}, {dq0.shape}, {s0.shape} do not match ({nv},), ({nv},), ({system.n_states},)")
    system.initialize(t0, q0, dq0)
    rank = system.rank
    evaluations_before = system.evaluations

    def split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return x[:nv], x[nv : 2 * nv], x[2 * nv :]

    def check_finite(t: float, x: np.ndarray) -> None:
        if not np.isfinite(x).all():
            raise SimulationError(
                f"the state became non-finite at t = {t:.6g} s (the step is too large for the stiffness, or the model "
                "is singular); try a smaller step or a stiff integrator"
            )

    on_state = None if watch is None else (lambda t, x: watch(t, x[:nv]))
    records = Records(lambda kept: build_result(system, kept, rank, integrator), sink, batch_samples, on_state)  # (x, evaluation) per sample
    x = np.concatenate([q0, dq0, s0])
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r} (expected one of: {', '.join(BACKENDS)})", field="--backend")
    used = "python"
    if backend != "python":
        reason = unsupported(system)
        if reason and backend == "compiled":
            raise NotCompilable(f"the compiled simulation core does not cover {reason}; use the python backend")
        used = "python" if reason else "compiled"
    compiled_evaluations = [0]  # a list: the closures below count into it
    if used == "compiled":
        # generated and compiled once per structure; this system's numbers are its input p
        core = CompiledCore(system)
        p = core.p
        core.check(t0, x)
        sample = core.sample_evaluator()
        if integrator not in ("rk4", "ros2"):
            # the scipy methods step in Python and call the compiled right-hand side
            compiled_rhs = core.rhs()

    def final(t: float, x: np.ndarray) -> ConstrainedState:
        """A recorded sample outside the RK4 chunks."""
        if used == "compiled":
            compiled_evaluations[0] += 1
            return sample(t, x)
        return system.evaluate(t, *split(x))

    if used == "compiled" and integrator == "rk4":
        n = max(1, math.ceil(duration / step - 1e-9))
        h = duration / n
        every = 1 if output_step is None else max(1, round(output_step / h))
        # a record every `every` steps, taken in calls of `size` steps and one of `rest` (see MAX_CHUNK_STEPS)
        size = min(every, MAX_CHUNK_STEPS)
        rest = every % size
        chunk = core.rk4(size)
        rest_stepper = core.rk4(rest) if rest else None
        single = core.rk4(1) if n % every else None

        def interpreted_steps(t: float, x: np.ndarray, count: int) -> None:
            """Redo ``count`` steps with the interpreted dynamics, which checks every stage."""
            for i in range(count):
                ti = t + i * h
                k1 = derivative(system, ti, x, nv)
                _check_rk4_stability(system, ti, h, x, nv)
                k2 = derivative(system, ti + 0.5 * h, x + 0.5 * h * k1, nv)
                k3 = derivative(system, ti + 0.5 * h, x + 0.5 * h * k2, nv)
                k4 = derivative(system, ti + h, x + h * k3, nv)
                x = x + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
                check_finite(ti + h, x)

        k = 0
        records.append((x, sample(t0, x)))
        while k < n:
            t = t0 + k * h
            _check_rk4_stability(system, t, h, x, nv)
            if n - k >= every:
                x_next, taken = x, 0
                while taken < every:
                    count = min(size, every - taken)
                    x_next = (chunk if count == size else rest_stepper)(t + taken * h, x_next, h, p)[0]
                    taken += count
            else:
                taken, x_next = 1, single(t, x, h, p)[0]
            try:
                check_finite(t + taken * h, x_next)
                evaluation = sample(t + taken * h, x_next)
            except (SimulationError, SingularConstraintError, InconsistentConstraintsError):
                # the chunk met a singular configuration or blew up: the interpreted steps stop where a
                # purely interpreted run stops, with its error
                interpreted_steps(t, x, taken)
                raise
            x = x_next
            k += taken
            if k < n:
                records.append((x, evaluation))
            if progress is not None and (k == n or len(records) % max(1, n // (20 * every)) == 0):
                progress(k, n)  # about 20 reports per run
        records.append((x, sample(t0 + duration, x)))
        steps = n
        compiled_evaluations[0] = 4 * n + len(records)
    elif integrator == "rk4":
        n = max(1, math.ceil(duration / step - 1e-9))
        h = duration / n
        every = 1 if output_step is None else max(1, round(output_step / h))
        report = max(1, n // 20)

        def deriv(t: float, x: np.ndarray) -> tuple[np.ndarray, ConstrainedState]:
            q, dq, s = split(x)
            ev = system.evaluate(t, q, dq, s)
            return np.concatenate([dq, ev.ddq, ev.state_rate]), ev

        for k in range(n):
            t = t0 + k * h
            k1, ev = deriv(t, x)
            _check_rk4_stability(system, t, h, x, nv)
            if k % every == 0:
                records.append((x, ev))
            k2, _ = deriv(t + 0.5 * h, x + 0.5 * h * k1)
            k3, _ = deriv(t + 0.5 * h, x + 0.5 * h * k2)
            k4, _ = deriv(t + h, x + h * k3)
            x = x + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
            check_finite(t + h, x)
            if progress is not None and ((k + 1) % report == 0 or k + 1 == n):
                progress(k + 1, n)
        records.append((x, system.evaluate(t0 + duration, *split(x))))
        steps = n
    elif integrator == "ros2":
        n = max(1, math.ceil(duration / step - 1e-9))
        h = duration / n
        every = 1 if output_step is None else max(1, round(output_step / h))
        refresh = max(1, round(jacobian_interval / h))

        def state_diagonal(x: np.ndarray) -> np.ndarray:
            dq, s = x[nv : 2 * nv], x[2 * nv :]
            return np.concatenate([e.state_jacobian(dq, s[sl]) for e, sl in zip(system.forces, system.state_slices)] or [np.zeros(0)])

        if used == "compiled":
            # steps in C between Jacobian refreshes and records; the Jacobian by differences of
            # the compiled right-hand side (through the normal loads), all of them in one call
            differences = core.jacobian()

            def jacobian(t: float, x: np.ndarray) -> np.ndarray:
                compiled_evaluations[0] += len(x) + 1
                return differences(t, x, p, _difference_steps(x))[1]

            update = ros2.StateDiagonalUpdate(jacobian, 2 * nv, state_diagonal, core.diagonal)
            chunk = ros2.chunk_steps(n, every, refresh, MAX_CHUNK_STEPS, several=True)
            if chunk % every == 0:
                # several samples per call into C, each from the evaluation its step makes there: no
                # further evaluation and no Python per sample (the block's arrays go to the records)
                stepper = core.ros2(chunk, update, samples=chunk // every)
                block = core.block_evaluator()

                def record_block(times: np.ndarray, states: np.ndarray, D: np.ndarray) -> None:
                    records.append_block(block(times, states, D))

            else:
                chunk = ros2.chunk_steps(n, every, refresh, MAX_CHUNK_STEPS)
                stepper, record_block = core.ros2(chunk, update), None

            def advance(t: float, x: np.ndarray, h: float, count: int, extra: tuple, inputs: tuple):
                compiled_evaluations[0] += 2 * count
                out = stepper(t, x, h, p, *extra, *inputs)
                return out if record_block is not None else out[0]

        else:
            last: list = [None]  # the evaluation at the latest state: a record and the step from it share it

            def evaluate(t: float, x: np.ndarray) -> ConstrainedState:
                if last[0] is None or last[0][0] != t or not np.array_equal(last[0][1], x):
                    last[0] = (t, x.copy(), system.evaluate(t, *split(x)))
                return last[0][2]

            def f(t: float, x: np.ndarray) -> np.ndarray:
                return np.concatenate([x[nv : 2 * nv], (ev := evaluate(t, x)).ddq, ev.state_rate])

            def jacobian(t: float, x: np.ndarray) -> np.ndarray:
                ev = evaluate(t, x)
                frozen = ev.normal_loads if len(ev.normal_loads) else None

                def held(t: float, x: np.ndarray) -> tuple[np.ndarray]:
                    e = system.evaluate(t, *split(x), normal_loads=frozen)
                    return (np.concatenate([x[nv : 2 * nv], e.ddq, e.state_rate]),)

                return _jacobian(held, t, x, f(t, x))

            update = ros2.StateDiagonalUpdate(jacobian, 2 * nv, state_diagonal)
            advance, chunk, record_block = ros2.python_steps(f, update), 1, None  # checked at every step
            final = evaluate  # noqa: F811 - the interpreted records reuse the steps' evaluations

        def record(t: float, x: np.ndarray) -> None:
            records.append((x, final(t, x)))

        ros2.integrate(
            advance, update, x, t0, h, n, chunk, every=every, refresh_every=refresh, record=record, check=check_finite, progress=progress, record_block=record_block
        )  # fmt: skip
        steps = n
    else:
        dt_out = output_step if output_step is not None else step
        n_out = max(1, math.ceil(duration / dt_out - 1e-9))
        grid = np.linspace(t0, t0 + duration, n_out + 1)

        def rhs(t: float, x: np.ndarray) -> np.ndarray:
            check_finite(t, x)
            if used == "compiled":
                compiled_evaluations[0] += 1
                return compiled_rhs(t, x, p)[0]
            q, dq, s = split(x)
            ev = system.evaluate(t, q, dq, s)
            return np.concatenate([dq, ev.ddq, ev.state_rate])

        options = {"rtol": rtol, "atol": atol}
        if max_step is not None:
            options["max_step"] = max_step
        ode = getattr(scipy.integrate, _SCIPY[integrator])(rhs, t0, x, t0 + duration, **options)
        records.append((x, final(t0, x)))
        k_out = 1
        steps = 0
        while ode.status == "running":
            message = ode.step()
            steps += 1
            if used == "compiled" and system.constraints.m and ode.status != "failed":
                # the compiled right-hand side does not check the constraint Jacobian: every
                # accepted step is checked here, so a run nearing a singular configuration
                # stops with the interpreted error instead of the method shrinking its step
                final(ode.t, ode.y)
            if ode.status == "failed":
                raise SimulationError(f"{integrator} failed at t = {ode.t:.6g} s: {message}")
            if k_out <= n_out and grid[k_out] <= ode.t:
                dense = ode.dense_output()
                while k_out <= n_out and grid[k_out] <= ode.t:
                    xk = ode.y if k_out == n_out else dense(grid[k_out])
                    records.append((xk, final(float(grid[k_out]), xk)))
                    k_out += 1
                if progress is not None:
                    progress(k_out - 1, n_out)
    records.flush()
    return build_result(
        system,
        records.kept,
        rank,
        integrator,
        steps=steps,
        evaluations=system.evaluations - evaluations_before + compiled_evaluations[0],
        backend=used,
        compile_s=core.build_s if used == "compiled" else 0.0,
        singular_samples=records.singular,
    )
