"""A live 3-D view of a running loop or simulation, drawn by MeshCat in a process of its own.

:class:`LiveView` spawns a viewer process that starts a MeshCat server (``meshcat-server``,
a browser opens :attr:`LiveView.url`), draws the robot with the scene of the animation pages
(:func:`mbctl.viz.animation.robot_scene`) and then, at most ``rate_hz`` times a second, places
every body at the world placement ``oMi`` (pinocchio forward kinematics) of the latest state:

- of a closed-loop run's log (``log=``): the last complete row of the raw file
  ``<log>.partial`` that :class:`~mbctl.hardware.runlog.RunLog` appends to as the loop runs
  (its ``q.<joint>`` columns, and ``q_ref.<joint>`` as a translucent ghost), then the NPZ's
  last row once the log is closed. The loop is not touched at all: it cannot be delayed by
  the view beyond sharing the CPU with a process of lower priority (niceness +10);
- or of :meth:`LiveView.show` (a simulation's recorded samples, a script, a notebook): the
  state goes into a latest-state slot in shared memory (:class:`StateSlot`), written without
  a lock: the writer never waits, the viewer keeps only the newest state.

Everything that can be slow — forward kinematics, the MeshCat server's sockets, a browser —
is in the viewer process and its server, never in the caller's process. The view stays up,
showing the last state, until :meth:`LiveView.close` (or the end of the caller's process).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import InputError, MbctlError
from mbctl.hardware.runlog import last_closed_row, last_raw_row, raw_paths
from mbctl.stateslot import StateSlot
from mbctl.viz.animation import body_placements, camera, magnified, meshcat_imports, robot_scene

__all__ = ["LiveView", "LogTail", "StateSlot", "RATE_HZ", "check_log_view"]

RATE_HZ = 30.0
"""Default rate (Hz) at which the view looks for a new state and redraws."""
START_TIMEOUT_S = 60.0  # the viewer process imports pinocchio and meshcat and starts a server


class LogTail:
    """The latest row of a closed-loop run's log, read while the loop writes it.

    Reads the last complete row of ``<log>.partial`` (columns in ``<log>.partial.json``);
    once the log is closed (the raw file gone, the NPZ newer than ``since``), the NPZ's
    last row. ``q`` and ``q_ref`` come in the order of ``joint_names``.

    Raises:
        InputError: From :meth:`latest`, if the log does not hold every joint of ``joint_names``.
    """

    def __init__(self, log: str | Path, joint_names: Sequence[str], since: float):
        self.path = Path(log)
        self.raw = raw_paths(self.path)[0]
        self.joint_names = tuple(joint_names)
        self.since = since
        self._final: tuple[float, np.ndarray, np.ndarray | None] | None = None

    def _index(self, columns: Sequence[str], group: str) -> list[int] | None:
        try:
            return [list(columns).index(f"{group}.{j}") for j in self.joint_names]
        except ValueError:
            return None

    def latest(self) -> tuple[float, np.ndarray, np.ndarray | None] | None:
        """``(t, q, q_ref)`` of the last row written (``q_ref`` ``None`` if not logged), ``None`` before the first."""
        if self._final is not None:
            return self._final
        found = last_raw_row(self.path)
        if found is None and not self.raw.exists() and self.path.is_file() and self.path.stat().st_mtime >= self.since:
            found = last_closed_row(self.path, ("t", "q", "q_ref"))
            self._final = None if found is None or np.isnan(found[1][found[0].index("t")]) else self._pick(*found)
            return self._final
        return None if found is None else self._pick(*found)

    def _pick(self, columns: Sequence[str], row: np.ndarray) -> tuple[float, np.ndarray, np.ndarray | None]:
        q = self._index(columns, "q")
        if q is None:
            raise InputError(f"the log does not hold every joint of the robot ({', '.join(self.joint_names)})", file=self.path)
        ref = self._index(columns, "q_ref")
        return float(row[list(columns).index("t")]), row[q], None if ref is None else row[ref]


def check_log_view(robot: RobotModel, field: str = "log") -> None:
    """Refuse (an :class:`InputError` naming ``field``) a robot whose motion a run log cannot hold: a log
    has the actuated joints only, so every DOF must be actuated."""
    if set(robot.actuated_names) != set(robot.joint_names):
        raise InputError(f"{robot.name} has passive or elastic DOF, which a run log does not hold; view a simulation instead", field=field)


class LiveView:
    """A MeshCat view of ``robot`` that follows a run, from a process of its own.

    Args:
        robot: The robot drawn.
        log: A closed-loop run's log (.npz) to follow as the loop writes it; without it, the
            view shows what :meth:`show` publishes. A run log holds the actuated joints only,
            so the robot must have no passive or elastic DOF then.
        rate_hz: Highest redraw rate (Hz); the view looks for a new state this often.
        magnification: Factor on the elastic DOF as drawn (see :mod:`mbctl.viz.animation`).

    Attributes:
        url: The page of the view, for a browser (``http://127.0.0.1:<port>/static/``).

    Use it as a context manager, or call :meth:`close`. In Jupyter the object displays as the
    view itself (an iframe of :attr:`url`).

    Raises:
        InputError: For a log that cannot hold the robot's motion, or a bad rate or factor.
        MbctlError: If the viewer process or its MeshCat server does not start.
    """

    def __init__(self, robot: RobotModel, *, log: str | Path | None = None, rate_hz: float = RATE_HZ, magnification: float = 1.0):
        if not (math.isfinite(rate_hz) and rate_hz > 0):
            raise InputError(f"must be > 0, got {rate_hz!r}", field="rate_hz")
        if not (math.isfinite(magnification) and magnification > 0):
            raise InputError(f"must be > 0, got {magnification!r}", field="magnification")
        if log is not None:
            check_log_view(robot)
        self.robot = robot
        self._input = StateSlot(robot.nv)
        self._drawn = StateSlot(robot.nv)
        source = None if log is None else (str(log), time.time())
        # a fresh interpreter (not multiprocessing's spawn, which re-runs the caller's script): no lock,
        # thread or GIL of the caller's is shared; it stops when its stdin closes (close(), or the caller's
        # end however it comes); its own session: a Ctrl-C at the terminal is the caller's alone
        self._process = subprocess.Popen([sys.executable, "-m", "mbctl.viz.live"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        server: list[int] = []  # the MeshCat server's pid, once known (a stuck view's server is killed from here)
        self._finalizer = weakref.finalize(self, _release, self._process, server, (self._input, self._drawn))
        try:
            pickle.dump((robot, self._input.name, self._drawn.name, source, 1.0 / rate_hz, magnification), self._process.stdin)
            self._process.stdin.flush()
            ready, _, _ = select.select([self._process.stdout], [], [], START_TIMEOUT_S)
            line = self._process.stdout.readline() if ready else b""
            message = json.loads(line) if line else {"error": f"no answer within {START_TIMEOUT_S:g} s (exit code {self._process.poll()})"}
        except (OSError, ValueError) as exc:
            message = {"error": str(exc)}
        if "error" in message:
            self.close()
            raise MbctlError(f"the live view did not start: {message['error']}")
        self.url: str = message["url"]
        server.append(message["server"])

    def show(self, q: np.ndarray, t: float = math.nan) -> None:
        """Publish the positions ``q`` (nv,) (rad, m) at time ``t`` (s); returns at once.

        Only the latest state is drawn: states published faster than the view's rate are skipped.
        """
        self._input.write(t, q)

    def drawn(self) -> tuple[float, np.ndarray] | None:
        """``(t, q)`` of the state the view last sent to its page, ``None`` before the first."""
        state = self._drawn.read()
        return None if state is None or state[0] == 0 else (state[1], state[2])

    @property
    def pid(self) -> int:
        """The viewer process's id (its MeshCat server is its child)."""
        return self._process.pid

    @property
    def alive(self) -> bool:
        """Whether the viewer process runs."""
        return self._process.poll() is None

    def close(self) -> None:
        """Stop the viewer process (its last state drawn first) and its MeshCat server; also done when
        the view is garbage-collected or the caller's process ends."""
        self._finalizer()

    def __enter__(self) -> LiveView:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _repr_html_(self) -> str:
        return f'<iframe src="{self.url}" style="width: 100%; height: 480px; border: none"></iframe>'


def _release(process: subprocess.Popen, server: Sequence[int], slots: Sequence[StateSlot], timeout_s: float = 10.0) -> None:
    """End the viewer process (the end of its stdin stops it, and it ends its ``server``) and free the state slots."""
    with contextlib.suppress(OSError):
        process.stdin.close()  # type: ignore[union-attr]
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:  # stuck (a server that went away mid-request): the view and its server go
        for pid in (process.pid, *server):  # each in a session, so a process group, of its own
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        process.wait()
    process.stdout.close()  # type: ignore[union-attr]
    for slot in slots:
        slot.close()


def _serve() -> None:
    """The viewer process: start MeshCat, draw the scene, then redraw the latest state every period
    until stdin closes. Its arguments come pickled on stdin; it answers one JSON line on stdout."""
    robot, input_name, drawn_name, source, period_s, magnification = pickle.load(sys.stdin.buffer)
    with contextlib.suppress(OSError):
        os.nice(10)  # below the loop and the plant, whatever their scheduling
    stop = threading.Event()
    # SIGTERM, and the end of stdin (the caller's close() or its end): stop, so the server goes too
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=lambda: (sys.stdin.buffer.read(), stop.set()), daemon=True).start()
    visualizer = None

    def draw(q: np.ndarray, paths: list) -> None:
        placements = body_placements(robot, magnified(robot, q[None], magnification))[0]
        for T, path in zip(placements, paths):
            visualizer.window.send(SetTransform(T, path))

    try:
        with meshcat_imports():
            import meshcat
            from meshcat.commands import SetTransform

        with contextlib.redirect_stdout(io.StringIO()):  # meshcat prints the URL; the caller decides what to print
            visualizer = meshcat.Visualizer()
        commands, layers = robot_scene(robot, [("robot", 1.0)] + ([("reference", 0.3)] if source is not None else []))
        for command in [*commands, camera(robot)]:
            visualizer.window.send(command)
        for paths in layers.values():  # the zero configuration until the first state comes
            draw(np.zeros(robot.nv), paths)
        bodies, ghost_bodies = layers["robot"], layers.get("reference", [])
        answer = {"url": visualizer.url(), "server": visualizer.window.server_proc.pid}
    except Exception as exc:  # noqa: BLE001 (said to the caller, which raises it)
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
    if "error" in answer:
        _stop_server(visualizer)
        return

    state, drawn = StateSlot(robot.nv, input_name), StateSlot(robot.nv, drawn_name)
    tail = None if source is None else LogTail(source[0], robot.joint_names, since=source[1])
    last = None

    def update() -> None:
        nonlocal last
        if tail is not None:
            latest = tail.latest()
            if latest is None or (last is not None and latest[0] == last):
                return
            t, q, q_ref = latest
            last = t
            if q_ref is not None and np.isfinite(q_ref).all():
                draw(q_ref, ghost_bodies)
        else:
            latest = state.read()
            if latest is None or latest[0] == 0 or latest[0] == last:
                return
            last, t, q = latest
        if np.isfinite(q).all():
            draw(q, bodies)
            drawn.write(t, q)

    try:
        while not stop.is_set():
            update()
            stop.wait(period_s)
        update()  # the last state published before close()
    except Exception as exc:  # noqa: BLE001 (a view that fails stops; the run goes on)
        print(f"mbctl: the live view stopped: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        state.close()
        drawn.close()
        _stop_server(visualizer)


def _stop_server(visualizer) -> None:
    """End the MeshCat server process the visualizer started."""
    server = getattr(getattr(visualizer, "window", None), "server_proc", None)
    if server is not None:
        server.kill()
        server.wait()


if __name__ == "__main__":
    _serve()
