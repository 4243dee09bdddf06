"""The live MeshCat view: the lock-free state slot, the run-log tail, and the page in headless
Chromium following the log a closed-loop run writes (pinocchio's forward kinematics as oracle)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import queue
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest

from mbctl.ctrl.trajectory import quintic_rest_to_rest, write_trajectory
from mbctl.dynamics.model.robot import load_robot
from mbctl.errors import InputError
from mbctl.hardware import session
from mbctl.hardware.loop import log_columns
from mbctl.hardware.runlog import RunLog
from mbctl.hardware.session import SessionOptions, run_session
from mbctl.viz.live import LiveView, LogTail, StateSlot

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
TIMEOUT_S = 60.0  # generous: the machine may be loaded; only a wrong pose makes a test wait this long


def fk(robot, q: np.ndarray) -> list[np.ndarray]:
    """World placements ``oMi`` (4x4) of joints 1.. at ``q``."""
    data = robot.model.createData()
    pin.forwardKinematics(robot.model, data, robot.configuration(q))
    return [data.oMi[j].homogeneous for j in range(1, robot.model.njoints)]


def poll(condition, what: str):
    """``condition()`` once it is truthy; fails after :data:`TIMEOUT_S`."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    pytest.fail(f"timed out waiting for {what}")


def row(names: list[str], t: float, q, q_ref) -> np.ndarray:
    """A row of the run log of joints ``names``: time, positions and reference positions set, the rest zero."""
    columns = log_columns(names)
    out = np.zeros(len(columns))
    out[columns.index("t")] = t
    for group, values in (("q", q), ("q_ref", q_ref)):
        for name, value in zip(names, values):
            out[columns.index(f"{group}.{name}")] = value
    return out


def test_the_state_slot_never_gives_a_torn_state(tmp_path):
    """A writer in another process publishes ``(k, [k, k, ...])`` as fast as it can until told to
    stop; every read here is whole (all entries equal to the time) or, when every try met a write,
    none at all; the reads see the writes advance, forward only. The writer runs until the reads
    have seen 200 states, so the outcome does not depend on how the two processes are scheduled."""
    slot = StateSlot(64)
    stop = tmp_path / "stop"
    writer = subprocess.Popen(
        [sys.executable, "-c", f"import os\nimport numpy as np\nfrom mbctl.viz.live import StateSlot\ns = StateSlot(64, {slot.name!r})\nk = 0\n"
         f"while not os.path.exists({str(stop)!r}):\n    k += 1\n    s.write(float(k), np.full(64, float(k)))\ns.close()"]
    )  # fmt: skip
    seen: list[float] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(set(seen)) < 200 and time.monotonic() < deadline and writer.poll() is None:
            state = slot.read(retries=10)
            if state is None:
                continue
            seq, t, q = state
            assert np.all(q == t) and (seq == 0 or seq == t), (seq, t, q[:3])
            seen.append(t)
        stop.touch()
        assert writer.wait(TIMEOUT_S) == 0
        assert len(set(seen)) >= 200, f"the reads saw {len(set(seen))} states"
        assert seen == sorted(seen)  # the latest state only moves forward
    finally:
        stop.touch()
        if writer.poll() is None:
            writer.kill()
        slot.close()


def test_the_log_tail_reads_the_last_complete_row_then_the_npz(tmp_path):
    """While a run log is written the tail gives its last whole row (a half-written row is
    skipped); once the log is closed, the NPZ's last row; joints in the robot's order."""
    log = tmp_path / "run.npz"
    names = ["b", "a"]  # the log's order differs from the tail's
    columns = log_columns(names)
    tail = LogTail(log, ["a", "b"], since=time.time() - 1)
    assert tail.latest() is None
    runlog = RunLog(log, columns, flush_every=1)
    assert tail.latest() is None
    runlog.append(row(names, 0.001, [1.0, 2.0], [3.0, 4.0]))
    t, q, q_ref = tail.latest()
    assert t == 0.001 and q.tolist() == [2.0, 1.0] and q_ref.tolist() == [4.0, 3.0]
    runlog.append(row(names, 0.002, [5.0, 6.0], [7.0, 8.0]))
    runlog._file.write(np.zeros(3).tobytes())  # a row being written
    runlog._file.flush()
    assert tail.latest()[0] == 0.002 and tail.latest()[1].tolist() == [6.0, 5.0]
    runlog._file.truncate(2 * 8 * len(columns))
    runlog.close()
    t, q, _ = tail.latest()
    assert t == 0.002 and q.tolist() == [6.0, 5.0] and not runlog.raw_path.exists()


def children(pid: int, command: str) -> list[int]:
    """Processes whose parent is ``pid`` and whose command line holds ``command`` (Linux /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid and command in stat.with_name("cmdline").read_text():
                out.append(int(stat.parent.name))
    return out


def test_show_is_drawn_and_a_log_needs_every_dof_actuated(tmp_path):
    """What :meth:`LiveView.show` publishes is what the view draws; closing ends the viewer and its
    MeshCat server; a robot with passive DOF cannot follow a run log (refused before any process starts)."""
    robot = load_robot("scara")
    with LiveView(robot) as view:
        assert view.url.startswith("http://127.0.0.1:")
        q = np.array([0.1, -0.2, 0.3, 0.02])
        view.show(q, 1.5)
        t, drawn = poll(view.drawn, "the shown state")
        assert t == 1.5 and np.array_equal(drawn, q)
        assert view.alive
        server = children(view.pid, "meshcat")
        assert len(server) == 1
    assert not view.alive
    assert not Path(f"/proc/{server[0]}").exists()
    with pytest.raises(InputError, match="passive or elastic DOF"):
        LiveView(load_robot("fourbar"), log=tmp_path / "run.npz")


class Browser:
    """Headless Chromium on a live view's page; :meth:`placements` reads every body's matrix."""

    def __init__(self, view: LiveView, robot, sync_api):
        flags = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"]
        self.errors: list[str] = []
        self._playwright = sync_api.sync_playwright().start()
        self._browser = self._playwright.chromium.launch(executable_path=CHROMIUM, args=flags)
        self.page = self._browser.new_page()
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(view.url)
        self.paths = {
            root: [["meshcat", root, f"body{j:02d}_{robot.model.names[j]}"] for j in range(1, robot.model.njoints)] for root in ("robot", "reference")
        }

    def placements(self, root: str = "robot") -> list[np.ndarray] | None:
        """The bodies' placements on the page (local matrices: /meshcat/<root> is at the identity)."""
        read = """(paths) => paths.map(p => { const n = viewer.scene_tree.find(p); return n.object ? Array.from(n.object.matrix.elements) : null; })"""
        matrices = self.page.evaluate(read, self.paths[root])
        return None if any(m is None for m in matrices) else [np.array(m).reshape(4, 4).T for m in matrices]

    def shows(self, expected: list[np.ndarray], root: str = "robot") -> bool:
        got = self.placements(root)
        return got is not None and all(np.allclose(a, b, atol=1e-6) for a, b in zip(got, expected))  # single precision

    def close(self) -> None:
        self._browser.close()
        self._playwright.stop()


def browser_api():
    if CHROMIUM is None:
        pytest.skip("no Chromium on this machine (apt-get install chromium; .ci/run installs it)")
    return pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")


def test_the_page_follows_a_run_log_as_it_is_written(tmp_path):
    """Rows appended to a run log move the robot (and its reference ghost) on the page to
    pinocchio's placements at the last row, at two instants of the run and at its end (the NPZ)."""
    sync_api = browser_api()
    robot = load_robot("scara")
    log = tmp_path / "run.npz"
    names = list(robot.joint_names)
    poses = [np.array([0.2, -0.4, 0.1, 0.01]), np.array([-0.5, 0.8, -0.3, 0.03]), np.array([1.0, 0.2, 0.6, 0.02])]
    with LiveView(robot, log=log) as view:
        browser = Browser(view, robot, sync_api)
        try:
            runlog = RunLog(log, log_columns(names), flush_every=1)
            for k, q in enumerate(poses[:-1]):
                runlog.append(row(names, 0.001 * (k + 1), q, -q))
                poll(lambda q=q: browser.shows(fk(robot, q)), f"pose {k} on the page")
                poll(lambda q=q: browser.shows(fk(robot, -q), "reference"), f"reference {k} on the page")
            runlog.append(row(names, 0.003, poses[-1], -poses[-1]))
            runlog.close()
            poll(lambda: browser.shows(fk(robot, poses[-1])), "the final pose on the page")
            assert view.drawn()[0] == 0.003
            assert browser.errors == []
        finally:
            browser.close()


@pytest.mark.slow
def test_the_page_follows_a_lockstep_run(tmp_path, monkeypatch):
    """During a lock-step closed-loop run, the page shows pinocchio's placements at the pose the
    view last drew, at every checkpoint of the run (distinct poses); at the end, the log's last pose.

    Lock-step on both sides: at each checkpoint the run's log waits (rows flushed) until the test has
    seen the view draw a row from it and the page show that pose, so the outcome does not depend on
    how fast the run goes against the view's 30 Hz."""
    sync_api = browser_api()
    robot = load_robot("scara")
    log = tmp_path / "run.npz"
    traj = quintic_rest_to_rest(np.array([[0, 0, 0, 0], [1.2, -1.0, 0.8, 0.05]]), [2.0], 1000.0, robot.joint_names)
    checkpoint, resume = queue.Queue(), threading.Event()

    class HandshakeLog(RunLog):
        def append(self, row: np.ndarray) -> None:
            super().append(row)
            if self.rows % 500 == 0:  # every 0.5 s of the run (a multiple of flush_every: the row is on disk)
                resume.clear()
                checkpoint.put(float(row[self.columns.index("t")]))
                assert resume.wait(TIMEOUT_S), "the test did not release the run"

    monkeypatch.setattr(session, "RunLog", HandshakeLog)
    with LiveView(robot, log=log) as view:
        browser = Browser(view, robot, sync_api)
        try:
            poll(lambda: browser.placements() is not None, "the scene on the page")
            result: dict = {}
            runner = threading.Thread(target=lambda: result.update(summary=run_session(robot, traj, SessionOptions(lockstep=True), log)))
            runner.start()
            matched: list[tuple[float, np.ndarray]] = []
            while runner.is_alive() or not checkpoint.empty():
                try:
                    t = checkpoint.get(timeout=0.05)
                except queue.Empty:
                    continue
                drawn = poll(lambda: (d := view.drawn()) is not None and d[0] >= t and d, f"the view at t = {t:g} s")
                poll(lambda: browser.shows(fk(robot, drawn[1])), f"the pose of t = {drawn[0]:g} s on the page")
                matched.append(drawn)
                resume.set()
            runner.join()
            assert result["summary"].completed
            last = np.load(log)["q"][-1]
            poll(lambda: browser.shows(fk(robot, last)), "the run's last pose on the page")
        finally:
            resume.set()
            browser.close()
    # the page moved with the run: a pose at every checkpoint, the first and last 0.01 rad apart at least
    assert len(matched) >= 3 and np.abs(matched[-1][1] - matched[0][1]).max() > 0.01, [t for t, _ in matched]
    assert browser.errors == []


class Terminal(io.StringIO):
    """A standard input that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_run_and_simulate_take_view(cli, configs, tmp_path, monkeypatch):
    """`mbctl run --view` and `mbctl simulate --view` print the view's URL and finish without a
    terminal to wait on; on a terminal, the command waits for Enter before closing the view; a
    run log of a robot with passive DOF is refused naming --view."""
    robot = load_robot("scara")
    traj = tmp_path / "traj.csv"
    write_trajectory(traj, quintic_rest_to_rest(np.array([[0, 0, 0, 0], [0.2, 0.3, -0.2, 0.01]]), [0.2], 1000.0, robot.joint_names))
    r = cli("run", configs / "scara.toml", "--trajectory", traj, "--lockstep", "--log", tmp_path / "run.npz", "--summary", tmp_path / "s.json", "--view")
    assert r.code == 0, r.err
    assert "live view: http://127.0.0.1:" in r.out
    terminal = Terminal("\n")
    monkeypatch.setattr(sys, "stdin", terminal)
    r = cli("simulate", "fourbar", "--duration", "0.05", "--out", tmp_path / "sim.npz", "--view")
    assert r.code == 0, r.err
    assert "live view: http://127.0.0.1:" in r.out and "press Enter to close it" in r.out
    assert terminal.tell() == 1  # the Enter was read
    monkeypatch.undo()
    r = cli("run", "fourbar", "--trajectory", traj, "--lockstep", "--log", tmp_path / "f.npz", "--summary", tmp_path / "f.json", "--view")
    lines = r.err.strip().splitlines()
    assert r.code == 2 and len(lines) == 1 and "--view" in lines[0] and "passive" in lines[0], r.err
    assert not (tmp_path / "f.npz").exists()


def test_simulate_shows_every_recorded_sample_to_watch():
    """The ``watch`` hook of a simulation sees each recorded ``(t, q)`` once, in order, equal to the
    run's records, on the compiled and the interpreted backend."""
    from mbctl.dynamics.simulation.setup import build_dynamics, initial_state, simulate_setup, simulation_setup

    robot = load_robot("fourbar")
    setup = dataclasses.replace(simulation_setup(robot), duration=0.02)
    system = build_dynamics(robot, setup)
    q0, dq0 = initial_state(robot, setup, system)
    for backend in ("compiled", "python"):
        seen: list[tuple[float, np.ndarray]] = []
        result = simulate_setup(system, q0, dq0, setup, backend=backend, watch=lambda t, q: seen.append((t, q.copy())))
        assert np.array_equal([t for t, _ in seen], result.t)
        assert np.array_equal(np.array([q for _, q in seen]), result.q)
