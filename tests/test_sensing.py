"""The simulated plant's encoders: from the drive table, from [plant], and what the summary says."""

from __future__ import annotations

import math

import numpy as np

from mbctl.dynamics.model.robot import load_robot
from mbctl.hardware.sim import SimPlant, truth_model


def _plant(robot) -> SimPlant:
    truth, config = truth_model(robot)
    return SimPlant(truth, 1e-3, config, q0=np.array([0.1234567, -1.2, 1.4, -1.6, -1.57, 0.3]), compiled=False)


def test_ur5_encoders_come_from_its_drive_table():
    """524288 counts per motor turn behind a 101:1 gear: positions are whole multiples of
    2 pi / (524288 * 101), and the summary line says where that came from."""
    plant = _plant(load_robot("ur5"))
    quantum = 2 * math.pi / (524288 * 101)
    with plant:
        q = plant.read().q
    counts = q / quantum
    assert np.allclose(counts, np.round(counts), atol=1e-6) and abs(q[0] - 0.1234567) <= quantum / 2
    assert "drive table" in plant.sensing and f"{quantum:.3g} on every joint" in plant.sensing


def test_a_plant_table_overrides_the_drive_table_per_joint(tmp_path):
    """[plant] encoder_counts = { elbow_joint = 1000 }: that joint reads 1000 counts per turn, the
    others keep their drives' resolution."""
    path = tmp_path / "ur5.toml"
    path.write_text(load_robot("ur5").source.read_text() + "\n[plant]\nencoder_counts = { elbow_joint = 1000 }\n")
    plant = _plant(load_robot(path))
    with plant:
        q = plant.read().q
    assert q[2] == round(1.4 / (2 * math.pi / 1000)) * 2 * math.pi / 1000
    fine = 2 * math.pi / (524288 * 101)
    assert abs(q[0] - 0.1234567) <= fine / 2 and "elbow_joint 0.00628" in plant.sensing
