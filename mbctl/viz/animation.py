"""3-D animations of runs as self-contained HTML pages, drawn by MeshCat's viewer.

The page is what MeshCat's own static export produces — its three.js viewer bundled in
the page, then the scene and one animation clip as MeshCat commands (msgpack, inlined
as data URLs) — written here directly, without MeshCat's server, so no process or port
is needed and the file plays offline. The viewer gives orbit controls and, under
"Animations", play / pause / reset, a time scrubber and a time scale.

What is drawn, per pinocchio joint (body) of the robot, in world coordinates:

- a sphere at the joint origin (orange: actuated, grey: passive, blue: elastic — RFE
  segments and flexible-base DOF);
- the URDF's visual elements of the body (boxes, cylinders, spheres, meshes) where it
  has them and pinocchio finds the files; otherwise a cylinder from the joint origin to every child
  joint origin and every frame placed on the body (tool points, loop-closure points),
  or to the centre of mass when the body has neither; a chain of RFE segments is thus
  drawn as the deformed link;
- traces: the paths of named frames over the whole run, as lines;
- optionally a translucent ghost of a reference motion.

The elastic DOF (deflections from the undeformed shape) are drawn multiplied by
``magnification``; the page states the factor. Every body node is animated with the
world placement ``oMi`` of its joint from :func:`pinocchio.forwardKinematics`.
"""

from __future__ import annotations

import base64
import contextlib
import html
import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pinocchio as pin

from mbctl.dynamics.constraints.kinds import FramePosition
from mbctl.dynamics.constraints.loops import LoopClosure
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.simulation.setup import constraint_set
from mbctl.errors import InputError
from mbctl.fileio import atomic_output

if TYPE_CHECKING:
    from meshcat.commands import SetObject, SetProperty, SetTransform
    from meshcat.path import Path as ScenePath

__all__ = ["Trace", "animation_html", "body_placements", "camera", "magnified", "robot_scene", "write_animation"]

FPS = 30  # frames per second of the clip; the viewer interpolates between keyframes
_COLORS = {"actuated": 0xE8742A, "passive": 0x9A9A9A, "elastic": 0x3C78D8}
_LINK_COLOR = 0xC8C8C8
_TRACE_COLORS = (0x2CA02C, 0xD62728, 0x9467BD, 0x8C564B)


@dataclass(frozen=True)
class Trace:
    """A frame's path over the run, drawn as a line: ``points`` (n, 3) in m, world frame."""

    name: str
    points: np.ndarray


def body_placements(robot: RobotModel, q: np.ndarray) -> np.ndarray:
    """World placements ``oMi`` (n, njoints - 1, 4, 4) of every joint frame along ``q`` (n, nv; rad, m)."""
    model, data = robot.model, robot.model.createData()
    out = np.empty((len(q), model.njoints - 1, 4, 4))
    for k, qk in enumerate(q):
        pin.forwardKinematics(model, data, robot.configuration(qk))
        for j in range(1, model.njoints):
            out[k, j - 1] = data.oMi[j].homogeneous
    return out


def frame_paths(robot: RobotModel, q: np.ndarray, frames: Sequence[str]) -> list[Trace]:
    """The world positions (m) of ``frames`` along ``q``."""
    model, data = robot.model, robot.model.createData()
    ids = [model.getFrameId(name) for name in frames]
    points = np.empty((len(frames), len(q), 3))
    for k, qk in enumerate(q):
        pin.framesForwardKinematics(model, data, robot.configuration(qk))
        for i, fid in enumerate(ids):
            points[i, k] = data.oMf[fid].translation
    return [Trace(name, p) for name, p in zip(frames, points)]


def _segment_transform(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The placement of MeshCat's cylinder (axis y, centred) spanning points ``a`` to ``b``."""
    d = b - a
    u = d / np.linalg.norm(d)
    y = np.array([0.0, 1.0, 0.0])
    axis, c = np.cross(y, u), float(y @ u)
    s = np.linalg.norm(axis)
    if s < 1e-12:
        R = np.eye(3) if c > 0 else np.diag([1.0, -1.0, -1.0])
    else:
        k = axis / s
        K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
        R = np.eye(3) + s * K + (1 - c) * K @ K
    T = np.eye(4)
    T[:3, :3] = R
    T[:3, 3] = (a + b) / 2
    return T


def _body_points(robot: RobotModel) -> list[list[np.ndarray]]:
    """Per body (joint 1..), the points in its joint frame that its cylinders reach."""
    model = robot.model
    points: list[list[np.ndarray]] = [[] for _ in range(model.njoints)]
    for j in range(1, model.njoints):
        p = model.parents[j]
        if p > 0:
            points[p].append(model.jointPlacements[j].translation.copy())
    for frame in model.frames:
        if frame.parentJoint > 0 and frame.type != pin.FrameType.JOINT:
            points[frame.parentJoint].append(frame.placement.translation.copy())
    for j in range(1, model.njoints):
        if not points[j]:
            points[j].append(model.inertias[j].lever.copy())
    return [[x for x in pts if np.linalg.norm(x) > 1e-9] for pts in points[1:]]


def _visuals(robot: RobotModel, g) -> list[tuple[int, np.ndarray, object]]:
    """``(joint, placement in the joint frame, meshcat geometry)`` of the URDF's visual
    elements, or ``[]`` where it has none or pinocchio cannot load them (missing meshes)."""
    urdf = Path(robot.urdf)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = pin.buildGeomFromUrdf(robot.model, str(urdf), pin.GeometryType.VISUAL, package_dirs=[str(p) for p in urdf.parents[:6]])
    except (ValueError, RuntimeError, OSError):
        return []
    out = []
    for o in model.geometryObjects:
        shape = type(o.geometry).__name__
        T = o.placement.homogeneous.copy()
        if shape == "Box":
            geometry = g.Box(list(2 * np.asarray(o.geometry.halfSide)))
        elif shape == "Sphere":
            geometry = g.Sphere(float(o.geometry.radius))
        elif shape == "Cylinder":  # URDF cylinders run along z, MeshCat's along y
            geometry = g.Cylinder(2 * float(o.geometry.halfLength), float(o.geometry.radius))
            T = T @ np.array([[1.0, 0, 0, 0], [0, 0, -1, 0], [0, 1, 0, 0], [0, 0, 0, 1]])
        elif o.meshPath and Path(o.meshPath).suffix.lower() in (".dae", ".stl", ".obj") and Path(o.meshPath).is_file():
            loader = {".dae": g.DaeMeshGeometry, ".stl": g.StlMeshGeometry, ".obj": g.ObjMeshGeometry}[Path(o.meshPath).suffix.lower()]
            geometry = loader.from_file(o.meshPath)
            T = T @ np.diag([*np.asarray(o.meshScale, dtype=float), 1.0])
        else:
            return []  # a shape this page cannot draw: the skeleton for the whole robot
        out.append((int(o.parentJoint), T, geometry))
    return out


def _size(robot: RobotModel) -> float:
    """A characteristic length (m) of the robot at its zero configuration."""
    placements = body_placements(robot, np.zeros((1, robot.nv)))[0]
    reach = max((np.linalg.norm(T[:3, 3]) for T in placements), default=0.0)
    extents = [np.linalg.norm(x) for pts in _body_points(robot) for x in pts]
    return max(reach, max(extents, default=0.0), 0.05)


def _kind(robot: RobotModel, joint: int) -> str:
    name = robot.model.names[joint]
    if name in robot.elastic_names:
        return "elastic"
    return "actuated" if name in robot.actuated_names else "passive"


def magnified(robot: RobotModel, q: np.ndarray, magnification: float) -> np.ndarray:
    """``q`` (n, nv) with the elastic DOF (deflections from the undeformed shape) times ``magnification``, as drawn."""
    if magnification == 1.0 or not robot.is_elastic:
        return q
    elastic = [robot.joint(n).idx_v for n in robot.elastic_names]
    out = np.array(q, dtype=float, copy=True)
    out[:, elastic] *= magnification
    return out


@contextlib.contextmanager
def meshcat_imports() -> Iterator[None]:
    """Import meshcat's modules inside this block: its package import loads its server, written for an
    older pyzmq, whose deprecation warnings say nothing to a user."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def robot_scene(
    robot: RobotModel, layers: Sequence[tuple[str, float]] = (("robot", 1.0),)
) -> tuple[list[SetObject | SetTransform], dict[str, list[ScenePath]]]:
    """The MeshCat commands that draw ``robot`` once per layer ``(root, opacity)`` under
    ``/meshcat/<root>`` (the robot, a translucent reference ghost), and per root the scene path
    of each body's node (joints 1 .. njoints - 1, pinocchio order).

    A body's shapes are given in its joint frame, so a ``SetTransform`` of the joint's world placement
    ``oMi`` on its node draws the body where it is; shapes fixed to the world are placed here. Both the
    animation pages and the live view (:mod:`mbctl.viz.live`) draw this scene. The URDF's visual
    elements are loaded once for all layers (about 1 s for the UR5's meshes).
    """
    with meshcat_imports():
        from meshcat import geometry as g
        from meshcat.commands import SetObject, SetTransform
        from meshcat.path import Path as ScenePath

    radius = 0.025 * _size(robot)
    visuals = _visuals(robot, g)
    points = _body_points(robot)
    commands: list = []
    bodies: dict[str, list] = {}
    for root, opacity in layers:
        link_material = g.MeshLambertMaterial(color=_LINK_COLOR, opacity=opacity, transparent=opacity < 1)
        for i, (j, T, geometry) in enumerate(visuals):
            if j == 0:  # fixed to the world
                path = ScenePath(("meshcat", root, f"base{i}"))
                commands.append(SetObject(geometry, link_material, path))
                commands.append(SetTransform(T, path))
        bodies[root] = []
        for j, pts in enumerate(points, start=1):
            body = ScenePath(("meshcat", root, f"body{j:02d}_{robot.model.names[j]}"))
            # the URDF's visual elements of this body, else cylinders to the points it carries
            shapes = [(T, geometry) for k, T, geometry in visuals if k == j]
            joint_material = g.MeshLambertMaterial(color=_COLORS[_kind(robot, j)], opacity=opacity, transparent=opacity < 1)
            commands.append(SetObject(g.Sphere((0.6 if shapes else 1.6) * radius), joint_material, body.append("joint")))
            shapes = shapes or [(_segment_transform(np.zeros(3), p), g.Cylinder(float(np.linalg.norm(p)), radius)) for p in pts]
            for i, (T, geometry) in enumerate(shapes):
                segment = body.append(f"link{i}")
                commands.append(SetObject(geometry, link_material, segment))
                commands.append(SetTransform(T, segment))
            bodies[root].append(body)
    return commands, bodies


def camera(robot: RobotModel) -> SetProperty:
    """The command that places the viewer's camera (it orbits the origin; viewer axes: y up) to see the whole robot."""
    with meshcat_imports():
        from meshcat.commands import SetProperty
        from meshcat.path import Path as ScenePath

    size = _size(robot)
    return SetProperty("position", [1.1 * size, 0.8 * size, 1.1 * size], ScenePath(("Cameras", "default", "rotated", "<object>")))


def animation_html(
    robot: RobotModel,
    t: np.ndarray,
    q: np.ndarray,
    *,
    reference: np.ndarray | None = None,
    traces: Sequence[Trace] = (),
    magnification: float = 1.0,
    title: str = "",
) -> str:
    """A self-contained HTML page playing the motion ``q`` (n, nv) at times ``t`` (n,) (s).

    Args:
        reference: A reference motion (n, nv) drawn as a translucent ghost.
        traces: Paths drawn as lines (e.g. a tool or loop-closure point).
        magnification: Factor on the elastic DOF (RFE segments, flexible base) as drawn.
        title: Shown on the page above the viewer.

    Raises:
        InputError: For shapes that do not match the robot, or non-finite values.
    """
    with meshcat_imports():
        from meshcat import geometry as g
        from meshcat.animation import Animation, AnimationFrameVisualizer
        from meshcat.commands import SetAnimation, SetObject, SetTransform
        from meshcat.path import Path as ScenePath

    t = np.asarray(t, dtype=float)
    q = np.asarray(q, dtype=float)
    if q.ndim != 2 or q.shape[1] != robot.nv or t.shape != (len(q),) or len(q) < 1:
        raise InputError(f"positions of shape (n, {robot.nv}) with n times are needed for {robot.name}, got {q.shape} and {t.shape}", field="q")
    if not (np.isfinite(q).all() and np.isfinite(t).all()) or np.any(np.diff(t) < 0):
        raise InputError("times must be finite and increasing, positions finite", field="q")
    if reference is not None and np.shape(reference) != q.shape:
        raise InputError(f"the reference needs shape {q.shape}, got {np.shape(reference)}", field="q_ref")
    if not (math.isfinite(magnification) and magnification > 0):
        raise InputError(f"must be > 0, got {magnification!r}", field="--magnify")

    # one keyframe per 1/FPS s of simulated time, from the nearest sample at or before it
    frames = np.arange(0, max(1, int(math.floor((t[-1] - t[0]) * FPS + 1e-9)) + 1))
    rows = np.clip(np.searchsorted(t, t[0] + frames / FPS, side="right") - 1, 0, len(t) - 1)
    animation = Animation(default_framerate=FPS)
    layers = [("robot", q, 1.0)] + ([("reference", np.asarray(reference, dtype=float), 0.3)] if reference is not None else [])
    commands, bodies = robot_scene(robot, [(root, opacity) for root, _, opacity in layers])
    for root, motion, _ in layers:
        placements = body_placements(robot, magnified(robot, motion[rows], magnification))
        for j, body in enumerate(bodies[root]):
            commands.append(SetTransform(placements[0, j], body))  # the pose before the clip starts
            for k, frame in enumerate(frames):
                AnimationFrameVisualizer(animation, body, int(frame)).set_transform(placements[k, j])
    for i, trace in enumerate(traces):
        line = g.Line(g.PointsGeometry(np.asarray(trace.points, dtype=float).T), g.LineBasicMaterial(color=_TRACE_COLORS[i % len(_TRACE_COLORS)]))
        commands.append(SetObject(line, path=ScenePath(("meshcat", "traces", trace.name))))
    commands.append(camera(robot))
    commands.append(SetAnimation(animation, play=True))  # plays once on opening, then stays at the end
    return _page(commands, title, magnification if robot.is_elastic else None, float(t[-1] - t[0]))


def _page(commands: list, title: str, magnification: float | None, duration: float) -> str:
    """MeshCat's static page: its viewer script, then every command as msgpack bytes."""
    import meshcat
    import umsgpack

    script = (Path(meshcat.__file__).parent / "viewer" / "dist" / "main.min.js").read_text(encoding="utf-8")
    loads = "\n".join(
        f'await fetch("data:application/octet-binary;base64,{base64.b64encode(umsgpack.packb(c.lower())).decode()}")'
        ".then(r => r.arrayBuffer()).then(b => viewer.handle_command_bytearray(new Uint8Array(b)));"
        for c in commands
    )
    note = f"{html.escape(title)} — {duration:.3g} s; Open Controls, then Animations: play, time, timeScale"
    if magnification is not None:
        note += f"; elastic deflections drawn x{magnification:g}"
    # the clip runs in keyframe units (FPS per s): a time scale of 1 plays it in real time
    return f"""<!DOCTYPE html>
<html>
<head><meta charset="utf-8"><title>{html.escape(title or "mbctl animation")}</title>
<style>body {{ margin: 0; }} #note {{ position: absolute; left: 8px; top: 6px; right: 260px; font: 13px sans-serif; z-index: 2; }}
#meshcat-pane {{ width: 100vw; height: 100vh; }}</style></head>
<body>
<div id="note">{note}</div>
<div id="meshcat-pane"></div>
<script>{script}</script>
<script>
var viewer = new MeshCat.Viewer(document.getElementById("meshcat-pane"));
window.mbctlReady = (async () => {{
{loads}
}})().then(() => {{ document.body.dataset.ready = "1"; }});
</script>
</body>
</html>
"""


def write_animation(path: str | Path, robot: RobotModel, t: np.ndarray, q: np.ndarray, **options) -> None:
    """Write :func:`animation_html` to ``path`` (a temporary file, then renamed)."""
    page = animation_html(robot, t, q, **options)
    with atomic_output(path) as tmp:
        Path(tmp).write_text(page, encoding="utf-8")


def constrained_frames(robot: RobotModel) -> list[str]:
    """Frames the robot's ``[[constraints]]`` hold: programmed points and loop-closure points."""
    frames = []
    for c in constraint_set(robot):
        name = c.frame if isinstance(c, FramePosition) else c.frames[0] if isinstance(c, LoopClosure) else None
        if name is not None and name not in frames:
            frames.append(name)
    return frames


def traces(robot: RobotModel, q: np.ndarray, requested: Sequence[str], field: str = "trace") -> list[Trace]:
    """Paths of ``requested`` frames (default: the constrained ones) along ``q``."""
    names = requested or constrained_frames(robot)
    unknown = [n for n in names if not robot.model.existFrame(n)]
    if unknown:
        raise InputError(f"unknown frame {unknown[0]!r} of {robot.name}", field=field)
    return frame_paths(robot, q, names)


def motion(robot: RobotModel, data: Mapping[str, np.ndarray], file: Path | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(t, q, q_ref)`` from a run file: all DOF of a simulation, or the actuated joints of a run log."""
    if "joint_names" in data:  # a simulation
        names = [str(n) for n in data["joint_names"]]
        if names != list(robot.joint_names):
            raise InputError(f"the run's joints ({', '.join(names)}) are not those of {robot.name}", file=file, field="joint_names")
        return np.asarray(data["t"], dtype=float), np.asarray(data["q"], dtype=float), None
    if "columns" in data:  # a closed-loop run log
        joints = [str(c).split(".", 1)[1] for c in data["columns"] if str(c).startswith("q.")]
        if sorted(joints) != sorted(robot.joint_names):
            raise InputError(
                f"the log holds joints {', '.join(joints)}; {robot.name} has DOF {', '.join(robot.joint_names)} (a robot with passive "
                "or elastic DOF is animated from mbctl simulate)",
                file=file,
            )
        order = [joints.index(n) for n in robot.joint_names]
        q = np.asarray(data["q"], dtype=float).reshape(len(data["t"]), -1)[:, order]
        q_ref = np.asarray(data["q_ref"], dtype=float).reshape(q.shape)[:, order] if "q_ref" in data else None
        return np.asarray(data["t"], dtype=float), q, q_ref
    raise InputError("not a run of mbctl simulate or mbctl run (no joint_names or columns)", file=file)


def animate(
    robot: RobotModel,
    result: object,
    path: str | Path,
    *,
    reference: np.ndarray | None = None,
    magnify: float = 1.0,
    trace: Sequence[str] = (),
    title: str = "",
) -> Path:
    """Write a run of ``robot`` in 3-D to ``path`` (.html), one self-contained MeshCat page.

    ``result`` is anything with times ``t`` (N,) (s) and positions ``q`` (N, nv) (a
    :class:`~mbctl.dynamics.simulation.integrate.SimulationResult`, a
    :class:`~mbctl.ctrl.trajectory.Trajectory`), or the arrays of an NPZ written by
    ``mbctl simulate`` or ``mbctl run --log`` (a run log brings its reference, drawn as a
    ghost). ``trace`` names frames whose paths are drawn (default: the constrained
    frames); ``magnify`` multiplies elastic deflections as drawn. Returns ``path``.

    Raises:
        InputError: For a run that does not match ``robot``, an unknown frame, or bad values.
    """
    if isinstance(result, Mapping):
        t, q, logged = motion(robot, result)
        reference = logged if reference is None else reference
    else:
        t, q = np.asarray(result.t, dtype=float), np.asarray(result.q, dtype=float)  # type: ignore[attr-defined]
    write_animation(path, robot, t, q, reference=reference, traces=traces(robot, q, list(trace)), magnification=magnify, title=title or robot.name)
    return Path(path)
