"""Pictures of mbctl's results: plots, MeshCat animations and a live view.

This layer sits above the studies and below the command line: it takes result
objects (feed-forward, simulation, run log, fits, sweeps) and writes figures, so a
user draws from Python the same pictures as the command line does::

    import mbctl, mbctl.viz
    robot = mbctl.load_robot("scara")
    traj = mbctl.quintic_rest_to_rest([[0, 0, 0, 0], [0.5, 0.3, -0.2, 0.01]], [2.0], 100.0, robot.joint_names)
    mbctl.viz.plot_feedforward(mbctl.feedforward(robot, traj), "torques.png")

Every ``plot_*`` takes a result and a path whose suffix is one of :data:`FORMATS`
(checked before drawing: a bad one is an :class:`~mbctl.errors.InputError` naming the
path), has an optional ``title`` derived from the result, and returns the path(s)
written. The modules follow the workflows: :mod:`~mbctl.viz.feedforward` (trajectories,
feed-forward torques), :mod:`~mbctl.viz.simulation`, :mod:`~mbctl.viz.variants`
(variants, flexible feed-forward), :mod:`~mbctl.viz.run` (closed-loop run logs),
:mod:`~mbctl.viz.fits` (identification), :mod:`~mbctl.viz.sweep` (parameter studies), :mod:`~mbctl.viz.timing` (path timing),
:mod:`~mbctl.viz.animation` (3-D pages), :mod:`~mbctl.viz.figures` (what they share).
The names below are imported on first use: ``import mbctl.viz`` loads neither
matplotlib nor the numerical stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mbctl.lazy import lazy_exports

# public name -> module that defines it
_API = {
    "FORMATS": "mbctl.viz.figures",
    "plot_trajectory": "mbctl.viz.feedforward",
    "plot_feedforward": "mbctl.viz.feedforward",
    "plot_redundancy": "mbctl.viz.feedforward",
    "plot_torque_tables": "mbctl.viz.feedforward",
    "plot_simulation": "mbctl.viz.simulation",
    "plot_reactions": "mbctl.viz.simulation",
    "plot_variants": "mbctl.viz.variants",
    "plot_flexfeed": "mbctl.viz.variants",
    "plot_run": "mbctl.viz.run",
    "plot_identification": "mbctl.viz.fits",
    "plot_servo_fit": "mbctl.viz.fits",
    "plot_arm_fit": "mbctl.viz.fits",
    "plot_sweep": "mbctl.viz.sweep",
    "plot_timing": "mbctl.viz.timing",
    "animate": "mbctl.viz.animation",
    "LiveView": "mbctl.viz.live",
}

__all__ = list(_API)

if TYPE_CHECKING:
    from mbctl.viz.animation import animate
    from mbctl.viz.feedforward import plot_feedforward, plot_redundancy, plot_torque_tables, plot_trajectory
    from mbctl.viz.figures import FORMATS
    from mbctl.viz.fits import plot_arm_fit, plot_identification, plot_servo_fit
    from mbctl.viz.live import LiveView
    from mbctl.viz.run import plot_run
    from mbctl.viz.simulation import plot_reactions, plot_simulation
    from mbctl.viz.sweep import plot_sweep
    from mbctl.viz.timing import plot_timing
    from mbctl.viz.variants import plot_flexfeed, plot_variants


__getattr__, __dir__ = lazy_exports(__name__, _API)
