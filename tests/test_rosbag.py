"""ROS 2 bags in (mbctl.rosbag through the log readers) and MCAP out (mbctl.hardware.mcap_log).

Bags are written here with rosbags (SQLite 3 and MCAP storage) from a slice of the shared
Panda log; the MCAP files mbctl writes are decoded with mcap-ros2-support's own CDR decoder.
No ROS installation is used.
"""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from rosbags.rosbag2 import StoragePlugin, Writer

from mbctl.fileio import read_csv, read_npz_blocks, write_csv, write_npz
from mbctl.identification.arm_log import condition_log, read_arm_log
from mbctl.rosbag import BagOptions, read_joint_states, typestore

ROOT = Path(__file__).resolve().parents[1]
PANDA_LOG = ROOT / "data" / "panda-excitation" / "train.csv"
ARM = tuple(f"panda_joint{i}" for i in range(1, 8))
FINGERS = ("panda_finger_joint1", "panda_finger_joint2")
SLICE_ROWS = 3000  # 3.2 s of the 12.6 s log: enough for a fit, quick to write and read
STORE = typestore()
JointState = STORE.types["sensor_msgs/msg/JointState"]
Header = STORE.types["std_msgs/msg/Header"]
Time = STORE.types["builtin_interfaces/msg/Time"]


def panda_slice(rows: int | None = SLICE_ROWS) -> dict[str, np.ndarray]:
    """t (s) and the q, dq, tau columns (rows, 7) of the first ``rows`` rows of the Panda log (None: all)."""
    table = read_csv(PANDA_LOG)
    pick = lambda g: table.data[:rows, [table.header.index(f"{g}.{j}") for j in ARM]]  # noqa: E731
    return {"t": table.data[:rows, 0], "q": pick("q"), "dq": pick("dq"), "tau": pick("tau")}


def write_slice_csv(path: Path, log: dict[str, np.ndarray], groups=("q", "dq", "tau")) -> Path:
    write_csv(path, ["t", *(f"{g}.{j}" for g in groups for j in ARM)], np.column_stack([log["t"], *(log[g] for g in groups)]))
    return path


def stamp(ns: int):
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def write_bag(path: Path, messages, storage=StoragePlugin.MCAP, topics=("/joint_states",)) -> Path:
    """A bag of JointState ``messages``: (topic, header ns, receive ns, names, position, velocity, effort)."""
    with Writer(path, version=9, storage_plugin=storage) as w:
        conns = {t: w.add_connection(t, JointState.__msgtype__, typestore=STORE) for t in topics}
        for topic, header_ns, receive_ns, names, q, dq, tau in messages:
            msg = JointState(header=Header(stamp=stamp(header_ns), frame_id=""), name=list(names), position=np.asarray(q, float),
                             velocity=np.asarray(dq, float), effort=np.asarray(tau, float))
            w.write(conns[topic], receive_ns, STORE.serialize_cdr(msg, JointState.__msgtype__))
    return path


def panda_messages(log, *, fields=("q", "dq", "tau"), joints=ARM + FINGERS, topic="/joint_states", seed=1, receive_offset_ns=1_000_000):
    """One message per row at the log's own times: ``joints`` in a shuffled order (the fingers at
    0.02 m, effort 0), the ``fields`` given (the others empty)."""
    order = np.random.default_rng(seed).permutation(len(joints))
    names = [joints[k] for k in order]
    for i, t in enumerate(log["t"]):
        ns = int(round(t * 1e9))
        values = {g: np.array([log[g][i, ARM.index(j)] if j in ARM else (0.02 if g == "q" else 0.0) for j in names]) for g in fields}
        yield (topic, ns, ns + receive_offset_ns + 7919 * (i % 13), names, values.get("q", []), values.get("dq", []), values.get("tau", []))


@pytest.fixture(scope="module")
def panda(tmp_path_factory):
    """The slice as CSV and as a bag of each storage (and the MCAP file alone)."""
    d = tmp_path_factory.mktemp("panda")
    log = panda_slice()
    return {
        "log": log,
        "csv": write_slice_csv(d / "slice.csv", log),
        "mcap": write_bag(d / "bag_mcap", panda_messages(log)),
        "sqlite3": write_bag(d / "bag_sqlite3", panda_messages(log), StoragePlugin.SQLITE3),
    }


def one_error_line(r) -> str:
    """The single error line of a refused command (exit 2, one line on stderr)."""
    assert r.code == 2, r.out + r.err
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mbctl: error: "), r.err
    return lines[0]


# --- reading -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["mcap", "sqlite3", "mcap file"])
def test_a_bag_reads_as_the_csv_it_was_written_from(panda, kind):
    """Shuffled joints matched by name, fingers ignored, header stamps: the bag's table is the
    CSV's (t to the nanosecond the stamps keep, q, dq, tau exactly), from either storage and from
    the bare .mcap file."""
    path = panda["sqlite3"] if kind == "sqlite3" else panda["mcap"]
    if kind == "mcap file":
        path = next(path.glob("*.mcap"))
    bag, csv = read_arm_log(path, ARM), read_arm_log(panda["csv"], ARM)
    assert np.abs(bag.t - csv.t).max() < 1e-9
    for field in ("q", "dq", "tau"):
        assert np.array_equal(getattr(bag, field), getattr(csv, field)), field
    assert any("ignored: panda_finger_joint1, panda_finger_joint2" in n for n in bag.notes)


def test_receive_stamps_are_the_bags_times(panda):
    """``--stamps receive``: t is the bag's receive time since the first message (1 ms after the
    header plus jitter, as written)."""
    states = read_joint_states(panda["mcap"], ARM, BagOptions(stamps="receive"))
    ns = np.array([m[2] for m in panda_messages(panda["log"])])
    assert np.array_equal(np.rint(states.t * 1e9).astype(np.int64), ns - ns[0])


def test_identify_dynamics_on_the_bag_is_the_fit_of_the_csv(cli, panda, tmp_path):
    """``mbctl identify dynamics panda_arm BAG`` writes the fit the CSV gives (every number of
    --out but the wall time, to 1e-9 relative), and the two fits predict the same torques to
    1e-6 N·m on the log."""
    from mbctl.dynamics.model.robot import load_robot
    from mbctl.identification.arm_fit import fit_arm, predict_torques

    fits = {}
    for kind in ("csv", "mcap"):
        r = cli("identify", "dynamics", "panda_arm", panda[kind], "--out", tmp_path / f"{kind}.json")
        assert r.code == 0, r.err
        fits[kind] = json.loads((tmp_path / f"{kind}.json").read_text())
        fits[kind].pop("seconds")
    flat = lambda x: [v for k in sorted(x) for v in flat(x[k])] if isinstance(x, dict) else [v for e in x for v in flat(e)] if isinstance(x, list) else [x] if isinstance(x, float) else []  # noqa: E731
    a, b = np.array(flat(fits["csv"])), np.array(flat(fits["mcap"]))
    assert len(a) > 200 and np.allclose(a, b, rtol=1e-9, atol=1e-12)
    robot = load_robot("panda_arm")
    logs = {kind: condition_log(read_arm_log(panda[kind], robot.joint_names)) for kind in ("csv", "mcap")}
    fit = {kind: fit_arm(robot, [logs[kind]]) for kind in logs}
    tau = {kind: predict_torques(robot, fit[kind].theta, fit[kind].friction, logs["csv"]) for kind in fit}
    assert np.abs(tau["csv"] - tau["mcap"]).max() < 1e-6


def test_feedforward_on_the_bag_gives_the_csvs_rms_table(cli, panda, tmp_path):
    """``mbctl feedforward --trajectory BAG``: the printed RMS tables equal those of the CSV, and
    the torque table to 1e-9 (its times come through nanosecond stamps)."""
    out = {}
    for kind in ("csv", "sqlite3"):
        r = cli("feedforward", "panda_arm_identified", "--trajectory", panda[kind], "--out", tmp_path / f"{kind}.csv")
        assert r.code == 0, r.err
        lines = r.out.splitlines()
        start = next(i for i, line in enumerate(lines) if "computed in" in line)
        out[kind] = (lines[start + 1 : -1], read_csv(tmp_path / f"{kind}.csv").data)
    assert out["csv"][0] == out["sqlite3"][0] and any("against the log's measured tau" in line for line in out["csv"][0])
    assert np.abs(out["csv"][1] - out["sqlite3"][1]).max() < 1e-9


def test_observe_on_the_bag_is_the_observer_on_the_csv(cli, panda, tmp_path):
    """``mbctl observe ROBOT BAG``: the external-torque table equals the one of the CSV it was
    written from (times through nanosecond stamps: 1e-9)."""
    tables = {}
    for kind in ("csv", "mcap"):
        r = cli("observe", "panda_arm_identified", panda[kind], "--out", tmp_path / f"{kind}.csv")
        assert r.code == 0, r.err
        tables[kind] = read_csv(tmp_path / f"{kind}.csv")
    assert tables["csv"].header == tables["mcap"].header and "tau_ext.panda_joint1" in tables["csv"].header
    assert np.abs(tables["csv"].data - tables["mcap"].data).max() < 1e-9


@pytest.mark.slow
def test_the_whole_panda_log_as_a_bag_identifies_and_feeds_forward_as_the_csv(cli, tmp_path):
    """The shared Panda log (12.6 s) as a SQLite 3 bag, nine joints shuffled: the fitted torques
    of identify dynamics equal the CSV's to 1e-6 N·m, and feedforward prints the same RMS table."""
    from mbctl.dynamics.model.robot import load_robot
    from mbctl.identification.arm_fit import fit_arm, predict_torques

    log = panda_slice(rows=None)
    bag = write_bag(tmp_path / "panda", panda_messages(log), StoragePlugin.SQLITE3)
    robot = load_robot("panda_arm")
    logs = {"csv": condition_log(read_arm_log(PANDA_LOG, robot.joint_names)), "bag": condition_log(read_arm_log(bag, robot.joint_names))}
    fit = {kind: fit_arm(robot, [logs[kind]]) for kind in logs}
    tau = {kind: predict_torques(robot, fit[kind].theta, fit[kind].friction, logs["csv"]) for kind in fit}
    assert np.abs(tau["csv"] - tau["bag"]).max() < 1e-6
    tables = []
    for path in (PANDA_LOG, bag):
        r = cli("feedforward", "panda_arm_identified", "--trajectory", path, "--out", tmp_path / "tau.csv")
        assert r.code == 0, r.err
        lines = r.out.splitlines()
        tables.append(lines[next(i for i, line in enumerate(lines) if "computed in" in line) + 1 : -1])
    assert tables[0] == tables[1]


def test_position_only_messages_differentiate_as_a_csv_without_dq(cli, panda, tmp_path):
    """A bag of positions only: dq comes from q as for a CSV of t and q (the same conditioned
    samples, to the round-off of nanosecond stamps), feedforward says so, and identify dynamics refuses it in one line (no efforts)."""
    bag = write_bag(tmp_path / "positions", panda_messages(panda["log"], fields=("q",)))
    csv = write_slice_csv(tmp_path / "q.csv", panda["log"], groups=("q",))
    raw = read_arm_log(bag, ARM, need_torque=False)
    assert raw.dq is None and raw.tau is None
    a, b = condition_log(raw), condition_log(read_arm_log(csv, ARM, need_torque=False))
    assert np.abs(a.dq - b.dq).max() < 1e-9 and np.abs(a.ddq - b.ddq).max() < 1e-9
    r = cli("feedforward", "panda_arm", "--trajectory", bag, "--out", tmp_path / "tau.csv")
    assert r.code == 0 and "derivative of the filtered q" in r.out
    assert "no effort" in one_error_line(cli("identify", "dynamics", "panda_arm", bag))


def test_two_publishers_with_the_same_stamps_merge_exactly(panda, tmp_path):
    """Joints 1-4 from one publisher and 5-7 with the fingers from another, at the same stamps:
    the table is the CSV's."""
    log = panda["log"]
    first = [m for m in panda_messages(log, joints=ARM[:4])]
    second = [m for m in panda_messages(log, joints=ARM[4:] + FINGERS, seed=2)]
    bag = write_bag(tmp_path / "two", [m for pair in zip(first, second) for m in pair])
    states = read_joint_states(bag, ARM)
    csv = read_arm_log(panda["csv"], ARM)
    assert np.array_equal(states.q, csv.q) and np.array_equal(states.tau, csv.tau)
    assert any("2 publishers" in n for n in states.notes)


def test_a_second_publisher_at_other_stamps_is_interpolated(panda, tmp_path):
    """The second publisher's messages half a sample later: its joints are the linear
    interpolation of its own samples at the first publisher's stamps."""
    log = panda["log"]
    late = dict(log, t=log["t"] + 0.0005)
    bag = write_bag(tmp_path / "late", [*panda_messages(log, joints=ARM[:4]), *panda_messages(late, joints=ARM[4:], seed=3)])
    states = read_joint_states(bag, ARM)
    t0 = log["t"][0] + 0.0005  # the span both cover starts at the late publisher's first stamp
    keep = log["t"] >= t0 - 1e-12
    assert np.allclose(states.t, log["t"][keep] - log["t"][keep][0], atol=1e-9)
    assert np.array_equal(states.q[:, :4], log["q"][keep, :4])
    expected = np.column_stack([np.interp(log["t"][keep], late["t"], log["q"][:, k]) for k in range(4, 7)])
    assert np.abs(states.q[:, 4:] - expected).max() < 1e-12


def test_a_publisher_of_the_fingers_alone_is_ignored(panda, tmp_path):
    """An arm driver with every joint and a gripper driver with the fingers: the arm's messages
    alone make the table."""
    log = panda["log"]
    bag = write_bag(tmp_path / "gripper", [*panda_messages(log, joints=ARM), *panda_messages(log, joints=FINGERS)])
    states = read_joint_states(bag, ARM)
    assert np.array_equal(states.q, read_arm_log(panda["csv"], ARM).q)
    assert any("other joint sets ignored" in n for n in states.notes)


def test_a_gap_of_50_ms_is_bridged_and_reported(cli, panda, tmp_path):
    """50 ms of messages missing: the log is resampled across the gap (linear), the report names
    the gap, and the fit runs."""
    messages = list(panda_messages(panda["log"]))
    t = panda["log"]["t"]
    bag = write_bag(tmp_path / "gap", [m for m, ti in zip(messages, t) if not 1.5 < ti < 1.55])
    r = cli("identify", "dynamics", "panda_arm", bag)
    assert r.code == 0, r.err
    note = next(line for line in r.out.splitlines() if "median steps" in line)
    longest = float(note.split("the longest ")[1].split(" ms")[0])
    assert 50 <= longest < 53 and "at t = 1.5" in note and "bridged by linear interpolation" in note


def test_a_bag_truncated_mid_chunk_is_refused_in_one_line(cli, panda, tmp_path):
    """An MCAP bag cut in the middle of its first chunk, and a SQLite 3 bag cut in half: one line
    each, exit 2, for every command that reads a log."""
    import shutil

    from mcap.reader import make_reader

    cut = shutil.copytree(panda["mcap"], tmp_path / "cut")
    data = next(cut.glob("*.mcap"))
    with open(data, "rb") as f:
        chunk = make_reader(f).get_summary().chunk_indexes[0]
    os.truncate(data, chunk.chunk_start_offset + chunk.chunk_length // 2)
    line = one_error_line(cli("identify", "dynamics", "panda_arm", cut))
    assert str(cut) in line and "mcap recover" in line
    one_error_line(cli("feedforward", "panda_arm", "--trajectory", cut, "--out", tmp_path / "tau.csv"))
    one_error_line(cli("plot", cut, "--out", tmp_path / "tau.png"))
    assert not (tmp_path / "tau.csv").exists() and not (tmp_path / "tau.png").exists()
    cut_db = shutil.copytree(panda["sqlite3"], tmp_path / "cut_db")
    db = next(cut_db.glob("*.db3"))
    os.truncate(db, db.stat().st_size // 2)
    assert "cannot read the bag" in one_error_line(cli("identify", "dynamics", "panda_arm", cut_db))


def test_topics_and_joints_are_checked_in_one_line(cli, panda, tmp_path):
    """Two JointState topics, neither /joint_states: one line listing both, and --topic picks one;
    a missing joint is named; header stamps that never advance point to --stamps receive."""
    log = panda_slice(200)
    two = write_bag(tmp_path / "two_topics", [*panda_messages(log, topic="/left/joint_states"), *panda_messages(log, topic="/right/joint_states")],
                    topics=("/left/joint_states", "/right/joint_states"))
    line = one_error_line(cli("feedforward", "panda_arm", "--trajectory", two, "--out", tmp_path / "tau.csv"))
    assert "/left/joint_states, /right/joint_states" in line and "--topic" in line
    assert cli("feedforward", "panda_arm", "--trajectory", two, "--topic", "/right/joint_states", "--out", tmp_path / "tau.csv").code == 0
    no7 = write_bag(tmp_path / "no7", panda_messages(log, joints=ARM[:6]))
    assert "no message carries joint panda_joint7" in one_error_line(cli("identify", "dynamics", "panda_arm", no7))
    frozen = write_bag(tmp_path / "frozen", [(m[0], 0, *m[2:]) for m in panda_messages(log)])
    assert "--stamps receive" in one_error_line(cli("identify", "dynamics", "panda_arm", frozen))
    assert cli("feedforward", "panda_arm", "--trajectory", frozen, "--stamps", "receive", "--out", tmp_path / "tau.csv").code == 0


def test_plot_and_convert_take_a_bag(cli, panda, tmp_path):
    """``mbctl plot BAG`` draws the efforts; ``mbctl convert BAG X.csv --robot`` writes the log CSV
    the bag reads as."""
    assert cli("plot", panda["mcap"], panda["csv"], "--out", tmp_path / "tau.png").code == 0
    assert cli("convert", panda["mcap"], tmp_path / "log.csv", "--robot", "panda_arm").code == 0
    written = read_arm_log(tmp_path / "log.csv", ARM)
    assert np.array_equal(written.q, read_arm_log(panda["csv"], ARM).q)
    assert "--robot" in one_error_line(cli("convert", panda["mcap"], tmp_path / "log2.csv"))


def test_a_servo_log_from_a_bag_is_the_run_logs(tmp_path):
    """A position-mode run log written as MCAP (/joint_states measured, /joint_commands the goals)
    reads back as the same servo log as the NPZ (uneven steps resampled alike)."""
    from mbctl.bundled import bundled_servo_logs
    from mbctl.dynamics.model.robot import load_robot
    from mbctl.hardware.loop import log_columns
    from mbctl.hardware.mcap_log import write_mcap
    from mbctl.hardware.runlog import RunLog
    from mbctl.identification.servo_log import bench_model, read_bag_servo_log, read_run_log, read_servo_logs

    t = np.arange(40) * 0.01 + np.tile([0.0, 0.002, -0.001, 0.001], 10)
    log = RunLog(tmp_path / "run.npz", log_columns(["servo"]))
    for ti in t:
        row = np.zeros(len(log.columns))
        row[[0, 3, 4, 6]] = (ti, 1.0, 0.5 * ti, np.floor(ti / 0.1))  # t, read_ok, q.servo, q_ref.servo
        log.append(row)
    log.close()
    write_mcap(tmp_path / "run.npz", tmp_path / "run.mcap")
    model = bench_model(load_robot(bundled_servo_logs("xl330-pendulum")[0].parent / "bench.toml"), "servo")
    a, b = read_run_log(tmp_path / "run.npz", "servo", model), read_bag_servo_log(tmp_path / "run.mcap", "servo", model)
    assert np.allclose(a.t, b.t, atol=1e-9) and np.allclose(a.position, b.position, atol=1e-12) and np.array_equal(a.goal, b.goal)
    (c,) = read_servo_logs([str(tmp_path / "run.mcap")], "LOG", model, "servo")  # what identify logs calls
    assert np.array_equal(c.position, b.position) and np.array_equal(c.goal, b.goal)


# --- writing -------------------------------------------------------------------------------------


def decoded(path: Path) -> dict[str, list]:
    """Every message of an MCAP file by topic: (log time ns, decoded message), with
    mcap-ros2-support's decoder."""
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    out: dict[str, list] = {}
    with open(path, "rb") as f:
        for _, channel, message, msg in make_reader(f, decoder_factories=[DecoderFactory()]).iter_decoded_messages():
            out.setdefault(channel.topic, []).append((message.log_time, msg))
    return out


@pytest.fixture(scope="module")
def ur5_run(tmp_path_factory):
    """A 0.3 s lock-step UR5 run (300 cycles) logged as NPZ (and converted to conv.mcap), and
    run again logged as MCAP (lock-step: the same samples, other wall-clock timings)."""
    from mbctl.cli import main

    d = tmp_path_factory.mktemp("ur5")
    assert main(["trajectory", "quintic", "ur5", "--waypoints", "0,-1.5,1.5,0,0,0; 0.4,-1.1,1.2,0.3,0.2,0.1", "--durations", "0.3", "--out", str(d / "traj.csv")]) == 0
    for log in ("run.npz", "run.mcap"):
        assert main(["run", "ur5", "--trajectory", str(d / "traj.csv"), "--lockstep", "--log", str(d / log), "--summary", str(d / f"{log}.json")]) in (0, 3)
    assert main(["convert", str(d / "run.npz"), str(d / "conv.mcap"), "--robot", "ur5"]) == 0
    return d


def test_the_mcap_of_a_run_has_a_message_per_cycle_at_the_logs_times(ur5_run):
    """``mbctl convert LOG.npz X.mcap``: one /joint_states, /joint_commands, /diagnostics and /tf
    per cycle, stamped (header and log time) with the run log's t, holding its measured q, dq,
    effort, reference, commanded torque and loop period."""
    with np.load(ur5_run / "run.npz") as z:
        log = {k: z[k] for k in z.files}
    topics = decoded(ur5_run / "conv.mcap")
    ns = np.rint(log["t"] * 1e9).astype(np.int64)
    for topic in ("/joint_states", "/joint_commands", "/diagnostics", "/tf"):
        assert [m[0] for m in topics[topic]] == ns.tolist(), topic
    states, commands = topics["/joint_states"], topics["/joint_commands"]
    assert [s.header.stamp.sec * 10**9 + s.header.stamp.nanosec for _, s in states] == ns.tolist()
    for field, key in (("position", "q"), ("velocity", "dq"), ("effort", "effort")):
        assert np.array_equal(np.array([getattr(s, field) for _, s in states]), log[key])
    for field, key in (("position", "q_ref"), ("velocity", "dq_ref"), ("effort", "tau")):
        assert np.array_equal(np.array([getattr(s, field) for _, s in commands]), log[key])
    period = [float(next(v.value for v in d.status[0].values if v.key == "period")) for _, d in topics["/diagnostics"]]
    assert np.array_equal(period[1:], log["period"][1:])


def test_run_writes_the_mcap_after_the_loop(ur5_run):
    """``mbctl run --log X.mcap``: the lock-step run's samples at its times, and no NPZ left beside it."""
    with np.load(ur5_run / "run.npz") as z:
        t, q = z["t"], z["q"]
    states = decoded(ur5_run / "run.mcap")["/joint_states"]
    assert [m[0] for m in states] == np.rint(t * 1e9).astype(np.int64).tolist()
    assert np.array_equal(np.array([s.position for _, s in states]), q)
    assert not list(ur5_run.glob(".run.mcap.*"))


def test_tf_holds_every_link_and_composes_to_the_models_poses(ur5_run):
    """/tf (per cycle) and /tf_static (once) together name every link of the URDF but the root,
    each with its URDF parent; composed from the root they give pinocchio's link placements at
    the logged q."""
    import pinocchio as pin

    from mbctl.dynamics.model.robot import load_robot

    robot = load_robot("ur5")
    data = robot.create_data()
    topics = decoded(ur5_run / "conv.mcap")
    links = {f.name for f in robot.model.frames if f.type == pin.FrameType.BODY}
    static = {tr.child_frame_id: tr for tr in topics["/tf_static"][0][1].transforms}
    assert len(topics["/tf_static"]) == 1
    with np.load(ur5_run / "run.npz") as z:
        q = z["q"]
    for k in (0, len(q) // 2, len(q) - 1):
        moving = {tr.child_frame_id: tr for tr in topics["/tf"][k][1].transforms}
        tree = {**static, **moving}
        roots = links - set(tree)
        assert roots == {"world"} and not set(static) & set(moving)
        pin.framesForwardKinematics(robot.model, data, robot.configuration(q[k]))
        for link in links - roots:
            pose, frame = pin.SE3.Identity(), link
            while frame in tree:
                tr = tree[frame].transform
                xyzquat = np.array([tr.translation.x, tr.translation.y, tr.translation.z, tr.rotation.x, tr.rotation.y, tr.rotation.z, tr.rotation.w])
                pose = pin.XYZQUATToSE3(xyzquat) * pose
                frame = tree[frame].header.frame_id
            assert np.allclose(pose.homogeneous, data.oMf[robot.model.getFrameId(link, pin.FrameType.BODY)].homogeneous, atol=1e-12), link


def test_the_mcap_reads_back_as_a_bag(ur5_run):
    """Our own MCAP through the bag reader: /joint_states (the default among its two JointState
    topics) is the run log's q, dq and effort."""
    states = read_joint_states(ur5_run / "conv.mcap")
    with np.load(ur5_run / "run.npz") as z:
        assert np.array_equal(states.q, z["q"]) and np.array_equal(states.tau, z["effort"])
        assert np.allclose(states.t, z["t"] - z["t"][0], atol=1e-9)


def test_simulate_writes_an_mcap_of_its_samples(cli, tmp_path):
    """``mbctl simulate --log X.mcap``: one /joint_states per sample with every joint's q, dq and
    the drive forces as effort, and /tf of the links."""
    r = cli("simulate", "fourbar", "--duration", "0.05", "--out", tmp_path / "fb.npz", "--log", tmp_path / "fb.mcap")
    assert r.code == 0, r.err
    topics = decoded(tmp_path / "fb.mcap")
    with np.load(tmp_path / "fb.npz") as z:
        assert np.array_equal(np.array([s.position for _, s in topics["/joint_states"]]), z["q"])
        assert np.array_equal(np.array([s.effort for _, s in topics["/joint_states"]]), z["tau_programmed"])
        assert len(topics["/tf"]) == len(z["t"])


def test_convert_refuses_what_is_not_a_log_in_one_line(cli, tmp_path):
    """Not an NPZ of mbctl, or a wrong suffix: one line, exit 2, nothing written."""
    (tmp_path / "x.npz").write_bytes(b"not a zip")
    assert "not a run log or simulation" in one_error_line(cli("convert", tmp_path / "x.npz", tmp_path / "x.mcap"))
    write_npz(tmp_path / "y.npz", {"a": np.zeros(3)})
    one_error_line(cli("convert", tmp_path / "y.npz", tmp_path / "y.mcap"))
    one_error_line(cli("convert", tmp_path / "y.npz", tmp_path / "y.bag"))
    assert not list(tmp_path.glob("*.mcap"))


def test_npz_blocks_hold_one_block_in_memory(tmp_path):
    """Reading an NPZ by blocks (what the MCAP writer does) peaks at a few blocks, not the
    array: 200 000 rows of 40 columns (64 MB) read 4096 rows at a time stay under 8 MB."""
    rows = 200_000
    write_npz(tmp_path / "big.npz", {"t": np.arange(rows, dtype=float), "q": np.ones((rows, 40))})
    tracemalloc.start()
    total = 0.0
    for block in read_npz_blocks(tmp_path / "big.npz", ["t", "q"], 4096):
        total += block["q"][:, 0].sum()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert total == rows and peak < 8e6


def test_block_encoding_is_byte_for_byte_what_rosbags_writes():
    """JointState and TFMessage encoded a block at a time (numbers written at the sentinels'
    offsets) are the bytes rosbags serializes for each row, for random numbers, NaN and stamps."""
    from mbctl.ros2msg import Messages

    rng = np.random.default_rng(4)
    messages = Messages()
    names = ["b", "joint_a", "c3"]
    frames = [("world", "base_link"), ("base_link", "shoulder_link")]
    stamps = np.array([0, 999_999_999, 1_000_000_000, 1_712_345_678_901_234_567], dtype=np.int64)
    Stamped, Transform, Vector3, Quaternion = (STORE.types[f"geometry_msgs/msg/{n}"] for n in ("TransformStamped", "Transform", "Vector3", "Quaternion"))
    states, tf = messages.joint_states(names), messages.transforms(frames)
    x = rng.normal(size=(len(stamps), 9))
    x[1, 4] = np.nan
    p = rng.normal(size=(len(stamps), 14))
    got_states, got_tf = states.encode(x, stamps), tf.encode(p, stamps)
    for i, ns in enumerate(stamps.tolist()):
        header = lambda frame="": Header(stamp=stamp(ns), frame_id=frame)  # noqa: E731
        js = JointState(header=header(), name=names, position=x[i, :3], velocity=x[i, 3:6], effort=x[i, 6:])
        assert got_states[i].tobytes() == bytes(STORE.serialize_cdr(js, JointState.__msgtype__))
        v = p[i].reshape(2, 7)
        msg = STORE.types["tf2_msgs/msg/TFMessage"](transforms=[
            Stamped(header=header(parent), child_frame_id=child, transform=Transform(translation=Vector3(*v[k, :3]), rotation=Quaternion(*v[k, 3:])))
            for k, (parent, child) in enumerate(frames)
        ])  # fmt: skip
        assert got_tf[i].tobytes() == bytes(STORE.serialize_cdr(msg, "tf2_msgs/msg/TFMessage"))


def test_identify_fit_on_a_bag_is_the_fit_of_its_csv(cli, tmp_path):
    """A constant-speed test of j1 (synthetic rig, Stribeck truth) as a bag with another joint:
    ``identify fit BAG --joint j1`` prints the report and table of the CSV of t, q, dq, tau."""
    from mbctl.dynamics.friction.laws import Stribeck
    from mbctl.identification.plan import ConstantSpeedPlan, speed_grid
    from mbctl.identification.synthetic import SyntheticRig, synthetic_log

    plan = ConstantSpeedPlan("j1", tuple(speed_grid(0.01, 1.0, 8, 0.05)), (-0.6, 0.6), settle_s=0.2, acceleration=20.0, max_leg_s=2.0, transit_speed=1.0)
    log = synthetic_log(SyntheticRig(Stribeck(fc=0.8, fs=1.1, vs=0.05, fv=0.12, delta=2.0), gravity=6.0, torque_noise=0.016), plan, np.random.default_rng(0))
    ns = np.rint((log.t - log.t[0]) * 1e9).astype(np.int64)  # the CSV gets the bag's times exactly: segment edges are knife-edges
    write_csv(tmp_path / "LOG.csv", ["t", "q", "dq", "tau"], np.column_stack([ns * 1e-9, log.q, log.dq, log.tau]))
    write_bag(tmp_path / "bag", [("/joint_states", k, k, ["j2", "j1"], [0.1, q], [0.0, dq], [0.0, tau]) for k, q, dq, tau in zip(ns.tolist(), log.q, log.dq, log.tau)])
    outs = [cli("identify", "fit", path, "--law", "stribeck", "--joint", "j1") for path in (tmp_path / "LOG.csv", tmp_path / "bag")]
    assert all(r.code == 0 for r in outs), [r.err for r in outs]
    body = [r.out[r.out.index("stribeck fit") : r.out.index("# identified by")] for r in outs]
    assert body[0] == body[1] and "fc" in body[0]
    assert "no message carries joint j3" in one_error_line(cli("identify", "fit", tmp_path / "bag", "--law", "stribeck", "--joint", "j3"))


def test_a_failed_read_keeps_the_last_pose_in_tf_and_is_an_error_in_diagnostics(tmp_path):
    """A run log whose third cycle failed to read (NaN measurements, read_ok 0): /joint_states
    carries the NaN, /diagnostics level ERROR at that cycle only, and /tf repeats the previous
    cycle's link poses (a pose of NaN would blank the 3D panel)."""
    from mbctl.dynamics.model.robot import load_robot
    from mbctl.hardware.loop import log_columns
    from mbctl.hardware.mcap_log import write_mcap
    from mbctl.hardware.runlog import RunLog

    robot = load_robot("ur5")
    log = RunLog(tmp_path / "run.npz", log_columns(robot.actuated_names))
    n = len(robot.actuated_names)
    for k in range(5):
        row = np.zeros(len(log.columns))
        row[:4] = (k * 1e-3, 1e-3, 1e-4, 1.0)
        row[4 : 4 + 6 * n] = 0.1 * (k + 1)
        if k == 2:
            row[3], row[4 : 4 + 2 * n], row[4 + 5 * n : 4 + 6 * n] = 0.0, np.nan, np.nan  # q, dq, effort unknown
        log.append(row)
    log.close()
    write_mcap(tmp_path / "run.npz", tmp_path / "run.mcap", robot)
    topics = decoded(tmp_path / "run.mcap")
    assert np.isnan(topics["/joint_states"][2][1].position).all()
    assert [d.status[0].level for _, d in topics["/diagnostics"]] == [0, 0, 2, 0, 0]
    pose = lambda k: [(tr.transform.translation.x, tr.transform.rotation.w) for tr in topics["/tf"][k][1].transforms]  # noqa: E731
    assert pose(2) == pose(1) != pose(3) and np.isfinite(pose(2)).all()
