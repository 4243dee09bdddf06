"""What :func:`~mbctl.dynamics.simulation.integrate.simulate` records: the result type, the samples
kept or handed to a sink in batches, and the memory and count of the samples a run records."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields

import numpy as np

from mbctl.dynamics.constraints.constrained import ConstrainedDynamics, ConstrainedState

__all__ = ["Records", "SampleBlock", "SimulationResult", "build_result", "recorded_samples", "sample_bytes"]


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


@dataclass(frozen=True, eq=False)
class SampleBlock:
    """Recorded samples as arrays, one row per sample (a compiled stepper's block; the fields of
    :class:`~mbctl.dynamics.constraints.constrained.ConstrainedState` stacked, units as there).

    Attributes:
        t: Times (s), (k,).
        x: States ``[q, dq, s]``, (k, 2 nv + n_states).
        sigma_ratio: ``s_r/s_1`` of the constraint Jacobian, (k,) (1 without constraints).
        singular: Whether the Jacobian was near-singular (damped), (k,).
    """

    t: np.ndarray
    x: np.ndarray
    ddq: np.ndarray
    state_rate: np.ndarray
    force: np.ndarray
    programmed_force: np.ndarray
    applied: np.ndarray
    lam: np.ndarray
    phi: np.ndarray
    dphi: np.ndarray
    target: np.ndarray
    sigma_ratio: np.ndarray
    singular: np.ndarray

    def __len__(self) -> int:
        return len(self.t)

    def rows(self, start: int, stop: int) -> SampleBlock:
        """Samples ``start`` to ``stop - 1``."""
        return SampleBlock(**{f.name: getattr(self, f.name)[start:stop] for f in fields(self)})


def _block_of(system: ConstrainedDynamics, records: list[tuple[np.ndarray, ConstrainedState]], rank: int) -> SampleBlock:
    """Single records ``(x, evaluation)`` stacked as a :class:`SampleBlock`."""
    n, nv, m = len(records), system.robot.nv, system.constraints.m
    evs = [ev for _, ev in records]

    def stack(values: list, width: int) -> np.ndarray:
        return np.array(values, dtype=float).reshape(n, width)

    return SampleBlock(
        t=np.array([ev.t for ev in evs], dtype=float),
        x=stack([x for x, _ in records], 2 * nv + system.n_states),
        ddq=stack([e.ddq for e in evs], nv),
        state_rate=stack([e.state_rate for e in evs], system.n_states),
        force=stack([e.force for e in evs], nv),
        programmed_force=stack([e.programmed_force for e in evs], nv),
        applied=stack([e.applied for e in evs], nv),
        lam=stack([e.lam for e in evs], m),
        phi=stack([e.phi for e in evs], m),
        dphi=stack([e.dphi for e in evs], m),
        target=stack([e.target for e in evs], m),
        sigma_ratio=np.array([_sigma_ratio(e, rank) for e in evs], dtype=float),
        singular=np.array([bool(e.singular) for e in evs], dtype=bool),
    )


class Records:
    """The recorded samples, single ``(x, evaluation)`` records or :class:`SampleBlock` s: all kept, or
    handed to ``sink`` as ``build(kept)`` every ``batch`` samples (blocks split where a batch ends;
    :meth:`flush` hands the rest); ``watch`` sees ``(t, x)`` of each sample as it comes. ``len``
    counts every sample recorded."""

    def __init__(
        self,
        build: Callable[[list], SimulationResult],
        sink: Callable[[SimulationResult], None] | None,
        batch: int,
        watch: Callable[[float, np.ndarray], None] | None = None,
    ):
        self.build, self.sink, self.batch, self.watch = build, sink, max(1, batch), watch
        self.kept: list[tuple[np.ndarray, ConstrainedState] | SampleBlock] = []
        self.count = self.singular = self._pending = 0

    def append(self, record: tuple[np.ndarray, ConstrainedState]) -> None:
        self.kept.append(record)
        self.count += 1
        self._pending += 1
        self.singular += bool(record[1].singular)
        if self.watch is not None:
            self.watch(record[1].t, record[0])
        if self.sink is not None and self._pending >= self.batch:
            self.flush()

    def append_block(self, block: SampleBlock) -> None:
        if self.sink is not None and self._pending + len(block) > self.batch:  # split at the batch's end
            cut = self.batch - self._pending
            self.append_block(block.rows(0, cut))
            self.append_block(block.rows(cut, len(block)))
            return
        self.kept.append(block)
        self.count += len(block)
        self._pending += len(block)
        self.singular += int(block.singular.sum())
        if self.watch is not None:
            for t, x in zip(block.t, block.x):
                self.watch(float(t), x)
        if self.sink is not None and self._pending >= self.batch:
            self.flush()

    def flush(self) -> None:
        if self.sink is not None and self.kept:
            self.sink(self.build(self.kept))
            self.kept, self._pending = [], 0

    def __len__(self) -> int:
        return self.count


def build_result(system: ConstrainedDynamics, records: list, rank: int, integrator: str, **counters) -> SimulationResult:
    """The arrays of ``records`` (single ``(x, evaluation)`` records and :class:`SampleBlock` s, in time
    order) as a :class:`SimulationResult` (``counters``: steps, evaluations, ...; zero if not given)."""
    nv = system.robot.nv
    blocks: list[SampleBlock] = []
    singles: list = []
    for record in [*records, None]:  # None: the end, which closes the last run of single records
        if isinstance(record, tuple):
            singles.append(record)
            continue
        if singles:
            blocks.append(_block_of(system, singles, rank))
            singles = []
        if record is not None:
            blocks.append(record)
    if not blocks:
        blocks = [_block_of(system, [], rank)]

    def join(name: str) -> np.ndarray:
        return np.concatenate([getattr(b, name) for b in blocks]) if len(blocks) > 1 else getattr(blocks[0], name)

    x = join("x")
    return SimulationResult(
        t=join("t"),
        q=np.ascontiguousarray(x[:, :nv]),
        dq=np.ascontiguousarray(x[:, nv : 2 * nv]),
        ddq=join("ddq"),
        state=np.ascontiguousarray(x[:, 2 * nv :]),
        phi=join("phi"),
        dphi=join("dphi"),
        target=join("target"),
        lam=join("lam"),
        tau_c=join("force"),
        tau_programmed=join("programmed_force"),
        tau_applied=join("applied"),
        sigma_ratio=join("sigma_ratio"),
        joint_names=system.robot.joint_names,
        row_names=system.rows,
        state_names=system.state_names,
        solver=system.solver,
        integrator=integrator,
        rank=rank,
        eliminated_rows=system.eliminated_rows,
        **{"steps": 0, "evaluations": 0, "singular_samples": 0, **counters},
    )
