"""The runs of a study: parameter values per run, and the robot description each run gets.

Run ``i`` is grid point ``i // samples`` (every combination of the grid axes in
declaration order, the last varying fastest) with Monte Carlo draw ``i % samples``.
The draws come from one ``numpy.random.default_rng(seed)`` stream, parameter after
parameter in declaration order, and are the same at every grid point (common random
numbers: grid points differ only by their grid values).

A run's robot is built by writing its values into a copy of the parsed robot
description and parsing that copy through the ordinary spec path
(:func:`mbctl.config.study_samples.sample_spec`, then
:func:`mbctl.dynamics.model.robot.build_robot`), so every check a robot file gets, a
sample gets too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbctl.config.study import Distribution, Grid, StudySpec
from mbctl.errors import ConfigError, InputError

__all__ = ["Design", "design", "sample_error"]


@dataclass(frozen=True, eq=False)
class Design:
    """Every run's parameter values.

    Attributes:
        paths: Varied parameters (dotted paths), in declaration order.
        values: (runs, parameters) values in the parameters' units; row ``i`` is run ``i``.
    """

    paths: tuple[str, ...]
    values: np.ndarray

    def __len__(self) -> int:
        return self.values.shape[0]

    def run(self, i: int) -> dict[str, float]:
        """Run ``i``'s values by path."""
        return {p: float(v) for p, v in zip(self.paths, self.values[i])}


def design(study: StudySpec) -> Design:
    """The values of every run of ``study`` (see the module docstring for the order)."""
    grids = [p for p in study.parameters if isinstance(p.variation, Grid)]
    draws = [p for p in study.parameters if isinstance(p.variation, Distribution)]
    axes = [np.asarray(p.variation.values, dtype=float) for p in grids]
    points = np.stack([m.ravel() for m in np.meshgrid(*axes, indexing="ij")], axis=1) if axes else np.zeros((1, 0))
    rng = np.random.default_rng(study.seed)
    columns = {}
    for p in draws:
        d = p.variation
        if d.kind == "uniform":
            columns[p.path] = rng.uniform(d.a, d.b, study.samples)
        elif d.kind == "normal":
            columns[p.path] = rng.normal(d.a, d.b, study.samples)
        else:
            columns[p.path] = np.exp(rng.normal(np.log(d.a), d.b, study.samples))
    n = points.shape[0] * study.samples
    values = np.empty((n, len(study.parameters)))
    for k, p in enumerate(study.parameters):
        if p in grids:
            values[:, k] = np.repeat(points[:, grids.index(p)], study.samples)
        else:
            values[:, k] = np.tile(columns[p.path], points.shape[0])
    return Design(tuple(p.path for p in study.parameters), values)


def sample_error(study: StudySpec, run: int, values: dict[str, float], exc: InputError) -> ConfigError:
    """A one-line error naming the study file and the parameter(s) that made run ``run`` invalid."""
    blamed = [p for p in values if exc.field is not None and (exc.field == p or exc.field.startswith(p.rsplit(".", 1)[0]))]
    field = study.field(blamed[0]) if blamed else "parameters"
    shown = ", ".join(f"{p} = {v:.6g}" for p, v in values.items())
    return ConfigError(f"run {run} ({shown}) makes the robot invalid: {exc}", file=study.source, field=field)
