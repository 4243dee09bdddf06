"""What :func:`~mbctl.dynamics.simulation.integrate.simulate` records: the result type, the samples
kept or handed to a sink in batches, and the memory and count of the samples a run records."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from mbctl.dynamics.constraints.constrained import ConstrainedDynamics, ConstrainedState

__all__ = ["Records", "SimulationResult", "build_result", "recorded_samples", "sample_bytes"]


@dataclass(frozen=True, eq=False)
class SimulationResult:
    """A simulated run; arrays have one row per recorded sample.

    Attributes:
        t: Times (s), (N,).
        q, dq, ddq: Coordinates, velocities, accelerations (N, nv) (rad, m, per s, per s²).
        state: Force-element states (N, n_states), e.g. LuGre ``z`` (rad or m).
        phi, dphi: Constraint violation and its rate per row (N, m); NaN ``phi`` for
            velocity-level rows.
        target: Target value per row (N, m); NaN for rows without a target.
        lam: Multipliers (N, m) (see :class:`~mbctl.dynamics.constraints.constrained.ConstrainedState`).
        tau_c: Generalized constraint force ``Q_c`` (N, nv) (N·m, N).
        tau_programmed: Its part due to programmed constraints (N, nv).
        tau_applied: Sum of the force elements (friction ...) (N, nv).
        sigma_ratio: ``s_r/s_1`` of the constraint Jacobian (N,), the distance from
            a singular configuration (1 without constraints).
        joint_names, row_names, state_names: Column names.
        solver, integrator: What produced the run.
        steps: Integrator steps taken; evaluations: dynamics evaluations (compiled and interpreted).
        backend: ``"compiled"`` or ``"python"``: what ran the integration steps.
        compile_s: Wall time spent generating, compiling or loading the C code (s);
            a cached library loads in milliseconds, and a structure already built in
            this process (the same robot with other numbers) costs nothing.
        singular_samples: Recorded samples at which the Jacobian was near-singular
            (damped mode only).
        rank, eliminated_rows: Rank of the constraint Jacobian and rows eliminated.
        initial_q, initial_dq: The state the run started from.
    """

    t: np.ndarray
    q: np.ndarray
    dq: np.ndarray
    ddq: np.ndarray
    state: np.ndarray
    phi: np.ndarray
    dphi: np.ndarray
    target: np.ndarray
    lam: np.ndarray
    tau_c: np.ndarray
    tau_programmed: np.ndarray
    tau_applied: np.ndarray
    sigma_ratio: np.ndarray
    joint_names: tuple[str, ...]
    row_names: tuple[str, ...]
    state_names: tuple[str, ...]
    solver: str
    integrator: str
    steps: int
    evaluations: int
    singular_samples: int
    rank: int
    eliminated_rows: tuple[str, ...] = field(default_factory=tuple)
    backend: str = "python"
    compile_s: float = 0.0

    def violation(self) -> np.ndarray:
        """``max_i |Phi_i|`` over position-level rows at every sample (N,) (m or rad)."""
        pos = ~np.isnan(self.phi).all(axis=0) if len(self.t) else np.zeros(0, bool)
        if not pos.any():
            return np.zeros(len(self.t))
        return np.nanmax(np.abs(self.phi[:, pos]), axis=1)

    def velocity_violation(self) -> np.ndarray:
        """``max_i |dPhi_i|`` at every sample (N,) (m/s or rad/s)."""
        if self.dphi.shape[1] == 0:
            return np.zeros(len(self.t))
        return np.abs(self.dphi).max(axis=1)


# Python objects of one recorded sample (the state copy, a ConstrainedState and its ~15 arrays, the
# record tuple), bytes; measured on the four-bar: 3.1 kB a sample, of which 520 B are numbers
_SAMPLE_OVERHEAD = 2600


def recorded_samples(duration: float, step: float, output_step: float | None, integrator: str) -> float:
    """How many samples :func:`simulate` records for these settings (s), computed as it does; a float, so
    that an absurd request (``duration / step`` = 1e21) is a number to compare, not an allocation."""
    if not all(math.isfinite(v) and v > 0 for v in (duration, step, *([output_step] if output_step is not None else []))):
        return math.nan
    fixed = integrator in ("rk4", "ros2")
    if not math.isfinite(duration / (step if fixed or output_step is None else output_step)):  # 1e300 / 1e-108 overflows
        return math.inf
    if fixed:
        n = max(1.0, math.ceil(duration / step - 1e-9))
        every = 1.0 if output_step is None else max(1.0, round(output_step / (duration / n)))
        return math.ceil(n / every) + 1.0
    return max(1.0, math.ceil(duration / (output_step if output_step is not None else step) - 1e-9)) + 1.0


def sample_bytes(system: ConstrainedDynamics, reactions: bool = False) -> int:
    """Memory one recorded sample takes while :func:`simulate` runs and its result is built (bytes):
    the Python objects of the record, its numbers (state, rate, forces, multipliers, violations,
    Jacobian, normal loads) and the row of the result's arrays; ``reactions`` adds the joint
    reaction wrenches (6 numbers per joint and per loop)."""
    nv, m, ns = system.robot.nv, system.constraints.m, system.n_states
    loads = sum(len(getattr(e, "reaction_joints", ())) for e in system.forces) * 6
    record = 2 * (2 * nv + ns) + 3 * nv + 5 * m + m * nv + 2 * loads
    result = 2 + 6 * nv + ns + 4 * m
    wrenches = 2 * 6 * (len(system.robot.joints) + m) if reactions else 0
    return _SAMPLE_OVERHEAD + 8 * (record + result + wrenches)


def _sigma_ratio(ev: ConstrainedState, rank: int) -> float:
    if rank == 0 or ev.sigma.size == 0 or ev.sigma[0] == 0:
        return 1.0
    return float(ev.sigma[rank - 1] / ev.sigma[0])


class Records:
    """The recorded samples ``(x, evaluation)``: all kept, or handed to ``sink`` as ``build(batch)`` every
    ``batch`` samples (:meth:`flush` hands the rest); ``watch`` sees ``(t, x)`` of each as it comes.
    ``len`` counts every sample recorded."""

    def __init__(
        self,
        build: Callable[[list], SimulationResult],
        sink: Callable[[SimulationResult], None] | None,
        batch: int,
        watch: Callable[[float, np.ndarray], None] | None = None,
    ):
        self.build, self.sink, self.batch, self.watch = build, sink, max(1, batch), watch
        self.kept: list[tuple[np.ndarray, ConstrainedState]] = []
        self.count = self.singular = 0

    def append(self, record: tuple[np.ndarray, ConstrainedState]) -> None:
        self.kept.append(record)
        self.count += 1
        self.singular += bool(record[1].singular)
        if self.watch is not None:
            self.watch(record[1].t, record[0])
        if self.sink is not None and len(self.kept) >= self.batch:
            self.flush()

    def flush(self) -> None:
        if self.sink is not None and self.kept:
            self.sink(self.build(self.kept))
            self.kept = []

    def __len__(self) -> int:
        return self.count


def build_result(system: ConstrainedDynamics, records: list[tuple[np.ndarray, ConstrainedState]], rank: int, integrator: str, **counters) -> SimulationResult:
    """The arrays of ``records`` as a :class:`SimulationResult` (``counters``: steps, evaluations, ...; zero if not given)."""
    nv, ns, m = system.robot.nv, system.n_states, system.constraints.m
    n = len(records)
    evs = [ev for _, ev in records]

    def stack(values: list, width: int) -> np.ndarray:
        return np.array(values, dtype=float).reshape(n, width)

    return SimulationResult(
        t=np.array([ev.t for ev in evs], dtype=float),
        q=stack([x[:nv] for x, _ in records], nv),
        dq=stack([x[nv : 2 * nv] for x, _ in records], nv),
        ddq=stack([e.ddq for e in evs], nv),
        state=stack([x[2 * nv :] for x, _ in records], ns),
        phi=stack([e.phi for e in evs], m),
        dphi=stack([e.dphi for e in evs], m),
        target=stack([e.target for e in evs], m),
        lam=stack([e.lam for e in evs], m),
        tau_c=stack([e.force for e in evs], nv),
        tau_programmed=stack([e.programmed_force for e in evs], nv),
        tau_applied=stack([e.applied for e in evs], nv),
        sigma_ratio=np.array([_sigma_ratio(e, rank) for e in evs], dtype=float),
        joint_names=system.robot.joint_names,
        row_names=system.rows,
        state_names=system.state_names,
        solver=system.solver,
        integrator=integrator,
        rank=rank,
        eliminated_rows=system.eliminated_rows,
        **{"steps": 0, "evaluations": 0, "singular_samples": 0, **counters},
    )
