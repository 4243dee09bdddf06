"""The run log: every value stored once in the NPZ, written a block of rows at a time, the table read back whole."""

from __future__ import annotations

import tracemalloc
import zipfile

import numpy as np
import pytest

from mbctl.hardware.runlog import RunLog, log_table

COLUMNS = ["t", "period", "q.a", "q.b", "dq.a", "dq.b", "phase.read", "phase.log"]


def write_log(path, rows: np.ndarray):
    log = RunLog(path, COLUMNS)
    for row in rows:
        log.append(row)
    return log


def test_every_value_is_stored_once_and_the_table_reads_back(tmp_path):
    """The NPZ holds the names and one array per group, no copy of the table; log_table gives the rows appended, in column order."""
    rows = np.random.default_rng(1).normal(size=(300, len(COLUMNS)))
    write_log(tmp_path / "run.npz", rows).close()
    with np.load(tmp_path / "run.npz") as log:
        assert sorted(log.files) == ["columns", "dq", "period", "phase", "q", "t"]
        assert log["q"].shape == (300, 2) and log["t"].shape == (300,)
        assert sum(log[k].size for k in log.files if k != "columns") == rows.size
        columns, table = log_table(log)
    assert columns == COLUMNS and np.array_equal(table, rows)
    with zipfile.ZipFile(tmp_path / "run.npz") as archive:  # the numbers once, 8 bytes each (and headers)
        assert sum(i.file_size for i in archive.infolist()) < rows.size * 8 + 4096


def test_a_log_written_with_its_table_twice_still_reads(tmp_path):
    """Logs from before hold the whole table as ``data`` too: log_table takes it."""
    rows = np.arange(24.0).reshape(3, 8)
    np.savez(tmp_path / "old.npz", columns=np.array(COLUMNS), data=rows, t=rows[:, 0])
    with np.load(tmp_path / "old.npz") as log:
        assert np.array_equal(log_table(log)[1], rows)


def closing_peak(path, cycles: int) -> int:
    """tracemalloc's peak while a log of ``cycles`` rows is turned into its NPZ."""
    log = write_log(path, np.ones((cycles, len(COLUMNS))))
    tracemalloc.start()
    try:
        log.close()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_closing_a_long_log_holds_a_block_of_rows(tmp_path, monkeypatch):
    """Blocks of 1000 rows: closing a log 10x longer (both several blocks) peaks at about the same memory, below its table's size."""
    monkeypatch.setattr("mbctl.hardware.runlog.BLOCK_ROWS", 1000)
    short, long = closing_peak(tmp_path / "short.npz", 4000), closing_peak(tmp_path / "long.npz", 40000)
    assert long < 1.5 * short and long < 40000 * len(COLUMNS) * 8 / 4, (short, long)
    with np.load(tmp_path / "long.npz") as log:
        assert log["q"].shape == (40000, 2) and not list(tmp_path.glob("*.partial*"))


def test_a_run_failing_before_its_loop_leaves_no_partial_files(tmp_path, monkeypatch):
    """A failure between opening the log and the loop (here building the cycle) removes the raw file and its header; the same
    run without the failure writes its NPZ and leaves no raw file either (the valid case)."""
    from mbctl.dynamics.model.robot import load_robot
    from mbctl.hardware.loop import LoopConfig, log_columns
    from mbctl.hardware.session import enable_and_run
    from mbctl.hardware.sim import SimPlant

    robot = load_robot("scara")
    law = lambda t, state: np.zeros(4)  # noqa: E731
    config = LoopConfig(rate_hz=1000.0, duration_s=0.01, paced=False)

    def run(name: str):
        with SimPlant(robot, 1e-3, q0=np.zeros(4)) as plant:
            return enable_and_run(plant, law, robot, config, RunLog(tmp_path / name, log_columns(plant.joint_names)))

    def fails(*args, **kwargs):
        raise RuntimeError("no cycle")

    with monkeypatch.context() as patch:
        patch.setattr("mbctl.hardware.loop._cycle", fails)
        with pytest.raises(RuntimeError, match="no cycle"):
            run("failed.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert run("run.npz").cycles == 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.npz"]
