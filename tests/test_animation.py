"""3-D animation pages: the transforms written into the page against pinocchio's forward
kinematics, every bundled robot, the commands, and the page playing in headless Chromium."""

from __future__ import annotations

import base64
import re
import shutil
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
import umsgpack

from mbctl.ctrl.trajectory import quintic_rest_to_rest, write_trajectory
from mbctl.dynamics.model.robot import load_robot
from mbctl.viz.animation import FPS, animation_html

BUNDLED = ["scara", "fourbar", "rrr3", "olkc5", "rpsup", "tree5", "parallelogram", "friction_rig", "ur5", "panda", "threeloop", "mobile"]


def commands(page: str) -> list[dict]:
    """The MeshCat commands inlined in a page."""
    return [umsgpack.unpackb(base64.b64decode(b)) for b in re.findall(r"data:application/octet-binary;base64,([A-Za-z0-9+/=]+)", page)]


def keyframes(page: str) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per animated body path: key times (s), positions (k, 3) and quaternions (k, 4; x y z w)."""
    (animation,) = [c for c in commands(page) if c["type"] == "set_animation"]
    out = {}
    for item in animation["animations"]:
        clip = item["clip"]
        tracks = {track["name"]: track["keys"] for track in clip["tracks"]}
        times = np.array([k["time"] for k in tracks[".position"]]) / clip["fps"]
        out[item["path"]] = (times, np.array([k["value"] for k in tracks[".position"]]), np.array([k["value"] for k in tracks[".quaternion"]]))
    return out


def motion(robot, seconds: float = 1.0):
    """A smooth motion of every DOF, sampled exactly at the clip's frames."""
    t = np.arange(0, round(seconds * FPS) + 1) / FPS
    q = 0.3 * np.sin(np.outer(t, 1.0 + np.arange(robot.nv)))
    return t, q


def fk(robot, q: np.ndarray, joint: int) -> pin.SE3:
    data = robot.model.createData()
    pin.forwardKinematics(robot.model, data, robot.configuration(q))
    return data.oMi[joint]


@pytest.mark.parametrize("name", BUNDLED)
def test_every_body_follows_pinocchio_forward_kinematics(name):
    """For every bundled robot, each body's keyframes are its joint's world placement ``oMi``
    at that time: positions to 1e-12 m, orientations to 1e-12."""
    robot = load_robot(name)
    t, q = motion(robot)
    page = animation_html(robot, t, q, title=name)
    assert "MeshCat.Viewer" in page and "<script>" in page and "http" not in page.split("<script>")[-1]  # plays offline
    frames = keyframes(page)
    assert len(frames) == robot.model.njoints - 1
    for j in range(1, robot.model.njoints):
        (path,) = [p for p in frames if p.startswith(f"/meshcat/robot/body{j:02d}_")]
        times, positions, quaternions = frames[path]
        assert np.allclose(times, t)
        for k in (0, len(t) // 3, len(t) - 1):
            M = fk(robot, q[k], j)
            assert np.allclose(positions[k], M.translation, atol=1e-12)
            x, y, z, w = quaternions[k]
            assert np.allclose(pin.Quaternion(w, x, y, z).toRotationMatrix(), M.rotation, atol=1e-12)


def test_urdf_visuals_are_drawn_where_present_else_the_skeleton():
    """The UR5's URDF meshes (example-robot-data) are in its page, one per visual element,
    each on its body; the SCARA's URDF has no visuals and is drawn as cylinders."""
    robot = load_robot("ur5")
    t, q = motion(robot, 0.1)
    geometry = pin.buildGeomFromUrdf(robot.model, str(robot.urdf), pin.GeometryType.VISUAL, package_dirs=[str(p) for p in Path(robot.urdf).parents[:6]])
    meshes = [c for c in commands(animation_html(robot, t, q)) if c["type"] == "set_object" and c["object"]["geometries"][0]["type"] == "_meshfile"]
    assert len(meshes) == len(geometry.geometryObjects) > 0
    scara = load_robot("scara")
    objects = [c["object"]["geometries"][0]["type"] for c in commands(animation_html(scara, *motion(scara, 0.1))) if c["type"] == "set_object"]
    assert "_meshfile" not in objects and "CylinderGeometry" in objects


def test_elastic_deflections_are_magnified_as_stated():
    """The flexible chain's segment and base deflections are drawn x10 and the page says so;
    the rigid joints are drawn as they are."""
    robot = load_robot("olkc5")
    t, q = motion(robot, 0.2)
    page = animation_html(robot, t, q, magnification=10.0)
    assert "elastic deflections drawn x10" in page
    elastic = [robot.joint(n).idx_v for n in robot.elastic_names]
    drawn = q.copy()
    drawn[:, elastic] *= 10.0
    frames = keyframes(page)
    last = robot.model.njoints - 1
    (path,) = [p for p in frames if p.startswith(f"/meshcat/robot/body{last:02d}_")]
    assert np.allclose(frames[path][1][-1], fk(robot, drawn[-1], last).translation, atol=1e-12)
    assert not np.allclose(frames[path][1][-1], fk(robot, q[-1], last).translation, atol=1e-3)


def test_simulate_then_animate_the_run(cli, tmp_path):
    """`mbctl simulate --animate` and `mbctl animate` on its NPZ: the same scene, the loop point traced."""
    npz, first, second = tmp_path / "run.npz", tmp_path / "a.html", tmp_path / "b.html"
    r = cli("simulate", "fourbar", "--duration", "0.2", "--out", npz, "--animate", first)
    assert r.code == 0, r.err
    assert cli("animate", npz, "--out", second).code == 0
    a, b = commands(first.read_text()), commands(second.read_text())
    assert [c["type"] for c in a] == [c["type"] for c in b]
    assert any(c["type"] == "set_object" and c["path"].startswith("/meshcat/traces/") for c in a)  # the loop-closure point


def test_runs_and_feedforward_are_drawn_the_run_with_its_reference_as_a_ghost(cli, configs, tmp_path):
    """`mbctl run --animate` and `mbctl animate LOG` give the same page; `mbctl feedforward
    --animate` draws the trajectory; a robot with passive DOF is refused before a run."""
    robot = load_robot("scara")
    traj = tmp_path / "traj.csv"
    write_trajectory(traj, quintic_rest_to_rest(np.array([[0, 0, 0, 0], [0.2, 0.3, -0.2, 0.01]]), [0.4], 1000.0, robot.joint_names))
    log, during, after, ff = tmp_path / "run.npz", tmp_path / "during.html", tmp_path / "after.html", tmp_path / "ff.html"
    r = cli("run", configs / "scara.toml", "--trajectory", traj, "--lockstep", "--log", log, "--summary", tmp_path / "s.json", "--animate", during)
    assert r.code == 0, r.err
    assert cli("animate", log, "--robot", "scara", "--out", after).code == 0
    a, b = keyframes(during.read_text()), keyframes(after.read_text())
    assert a.keys() == b.keys() and all(np.array_equal(x, y) for p in a for x, y in zip(a[p], b[p]))
    paths = list(keyframes(after.read_text()))
    assert any(p.startswith("/meshcat/reference/") for p in paths) and any(p.startswith("/meshcat/robot/") for p in paths)
    assert cli("feedforward", "scara", "--trajectory", traj, "--out", tmp_path / "tau.csv", "--animate", ff).code == 0
    assert len(keyframes(ff.read_text())) == robot.model.njoints - 1
    r = cli("run", "fourbar", "--trajectory", traj, "--lockstep", "--log", log, "--summary", tmp_path / "s.json", "--animate", during)
    assert r.code == 2 and "--animate" in r.err and "passive" in r.err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--out", "{tmp}/a.png"], ["a.png", "file type"]),
        (["--out", "{tmp}/no/a.html"], ["output directory does not exist"]),
        (["--out", "{tmp}/a.html", "--magnify", "0"], ["--magnify", "must be > 0"]),
        (["--out", "{tmp}/a.html", "--trace", "nowhere"], ["--trace", "nowhere"]),
    ],
)
def test_bad_animate_input_is_one_line(cli, tmp_path, args, words):
    npz = tmp_path / "run.npz"
    assert cli("simulate", "fourbar", "--duration", "0.05", "--out", npz).code == 0
    r = cli("animate", npz, *[a.format(tmp=tmp_path) for a in args])
    lines = r.err.strip().splitlines()
    assert r.code == 2 and len(lines) == 1 and all(w in lines[0] for w in words), r.err
    assert not (tmp_path / "a.html").exists()


def test_a_run_without_its_robot_asks_for_one(cli, tmp_path):
    npz = tmp_path / "bare.npz"
    np.savez(npz, t=np.zeros(2), q=np.zeros((2, 3)), joint_names=np.array(["a", "b", "c"]))
    r = cli("animate", npz, "--out", tmp_path / "a.html")
    assert r.code == 2 and "--robot" in r.err and "bare.npz" in r.err


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def test_the_page_plays_in_a_browser(cli, tmp_path):
    """Headless Chromium loads the four-bar's page without console errors; moving the time
    slider moves the coupler to pinocchio's placement at that time."""
    if CHROMIUM is None:
        pytest.skip("no Chromium on this machine (apt-get install chromium; .ci/run installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")
    robot = load_robot("fourbar")
    t, q = motion(robot)
    page_file = tmp_path / "fourbar.html"
    page_file.write_text(animation_html(robot, t, q, title="four-bar"))
    flags = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"]
    errors: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=flags)
        try:
            page = browser.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(page_file.as_uri())
            page.wait_for_function("document.body.dataset.ready === '1'", timeout=60_000)
            path = [p for p in keyframes(page_file.read_text()) if p.startswith("/meshcat/robot/body02_")][0].strip("/").split("/")
            scrub = """([time, path]) => { viewer.animator.pause(); viewer.animator.time_scrubber.setValue(time);
                viewer.scene.updateMatrixWorld(true); return Array.from(viewer.scene_tree.find(path).object.matrix.elements); }"""
            poses = {k: np.array(page.evaluate(scrub, [float(t[k]), path])).reshape(4, 4).T for k in (6, 24)}
        finally:
            browser.close()
    assert errors == []
    assert not np.allclose(poses[6], poses[24], atol=1e-3)  # the slider moved the coupler
    for k, pose in poses.items():
        assert np.allclose(pose, fk(robot, q[k], 2).homogeneous, atol=1e-6)  # single precision in the browser
