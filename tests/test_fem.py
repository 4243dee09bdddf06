"""Planar floating-frame Euler–Bernoulli beams: element matrices against beam theory, and the fem TOML."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from mbctl.config.flexible import FEMSpec, RFESpec
from mbctl.config.robot import read_robot_spec
from mbctl.dynamics.flexible.fem import beam_from_spec, make_beam, spinning_frequencies, static_deflection
from mbctl.dynamics.model.robot import load_robot
from mbctl.errors import ConfigError

E, A, IZ, MU, L = 70e9, 1.5e-4, 4.5e-10, 0.405, 0.2  # the 3-RRR's aluminium lever
W0 = math.sqrt(E * IZ / (MU * L**4))


def test_cantilever_tip_deflection_three_elements():
    """A tip load P deflects a 3-element cantilever by P L^3/(3 E IZ) (within 0.1 %), turning its tip by P L^2/(2 E IZ)."""
    beam = make_beam(L, 3, E, A, IZ, MU)
    w = static_deflection(beam, L, [0.0, 2.0])
    assert w[-2] == pytest.approx(2.0 * L**3 / (3 * E * IZ), rel=1e-3)
    assert w[-1] == pytest.approx(2.0 * L**2 / (2 * E * IZ), rel=1e-3)


def test_axial_tip_load_stretches_by_PL_over_EA():
    """An axial tip load stretches the lever by P L/(E A) and does not bend it."""
    beam = make_beam(L, 3, E, A, IZ, MU)
    w = static_deflection(beam, L, [50.0, 0.0])
    assert w[-3] == pytest.approx(50.0 * L / (E * A), rel=1e-12)
    assert np.abs(w[1::3]).max() == 0.0


def test_consistent_mass_equals_quadrature_of_shape_functions():
    """The closed-form consistent mass equals ∫ mu S^T S dx by the Gauss points the mechanism model uses."""
    beam = make_beam(L, 4, E, A, IZ, MU)
    quadrature = np.einsum("k,kai,kaj->ij", beam.weights, beam.S_points, beam.S_points)
    assert np.abs(quadrature - beam.M).max() < 1e-15
    assert beam.weights.sum() == pytest.approx(MU * L, rel=1e-14)


@pytest.mark.parametrize("elements", [4, 6])
def test_first_two_bending_frequencies(elements):
    """The first two bending frequencies are within 1 % of Euler–Bernoulli's 1.8751², 4.6941² sqrt(EI/(mu L^4))."""
    beam = make_beam(L, elements, E, A, IZ, MU)
    f = spinning_frequencies(beam, 0.0, 2)
    exact = np.array([1.875104069**2, 4.694091133**2]) * W0
    assert np.all(np.abs(f / exact - 1) < 1e-2)


def test_spinning_beam_stiffens():
    """With geometric stiffness, the first in-plane frequency rises with the spin rate as w² = w0² + (K_S - 1) Omega²,
    K_S = 1.1933 the first mode's Southwell coefficient; without it, it falls (the floating frame's softening)."""
    beam = make_beam(L, 6, E, A, IZ, MU)
    w0 = spinning_frequencies(beam, 0.0, 1)[0]
    rates = [100.0, 200.0, 400.0]
    stiff = [spinning_frequencies(beam, r, 1)[0] for r in rates]
    soft = [spinning_frequencies(beam, r, 1, geometric_stiffness=False)[0] for r in rates]
    assert w0 < stiff[0] < stiff[1] < stiff[2]
    assert w0 > soft[0] > soft[1] > soft[2]
    slope = (stiff[0] ** 2 - w0**2) / rates[0] ** 2
    assert slope == pytest.approx(1.1933 - 1.0, rel=0.02)


def test_damping_ratio_is_stiffness_proportional():
    """damping ratio zeta gives D = (2 zeta/omega_1) K, so the first mode's damping ratio is zeta (within the FEM error)."""
    beam = make_beam(L, 6, E, A, IZ, MU, damping_ratio=0.02)
    assert np.allclose(beam.D, 2 * 0.02 / beam.first_frequency * beam.K)
    lam, vec = np.linalg.eig(np.linalg.solve(beam.M, beam.K))
    k = int(np.argmin(np.where(lam.real > 0, lam.real, np.inf)))
    phi = vec[:, k].real
    zeta = (phi @ beam.D @ phi) / (2 * math.sqrt(lam[k].real) * (phi @ beam.M @ phi))
    assert zeta == pytest.approx(0.02, rel=2e-3)


def test_fem_table_parses_and_converts_to_rfe(configs):
    """The bundled flexible 3-RRR parses into FEM levers that rebuild as RFE chains with the same section."""
    spec = read_robot_spec(configs / "rrr3_flexible.toml")
    fem = spec.flexible[0]
    assert isinstance(fem, FEMSpec) and fem.elements == 3 and fem.Iz == 4.5e-10
    beam = beam_from_spec(fem)
    assert beam.mu * beam.length == pytest.approx(0.081, rel=1e-12)
    rfe = fem.as_rfe(8)
    assert isinstance(rfe, RFESpec) and rfe.elements == 8 and rfe.Iz == fem.Iz and rfe.damping_ratio == 0.01


def test_pinocchio_model_refuses_fem_links(configs):
    """Loading a config with FEM levers as a pinocchio model fails naming the field, unless the links are rigid."""
    with pytest.raises(ConfigError) as err:
        load_robot(configs / "rrr3_flexible.toml")
    assert err.value.field == "flexible.proximal1.method"
    assert load_robot(configs / "rrr3_flexible.toml", rigid_links=True).nv == 6


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("elements = 0", "flexible.proximal1.elements"),
        ('axis = "y"', "flexible.proximal1.axis"),
        ("geometric_stiffness = 1", "flexible.proximal1.geometric_stiffness"),
        ("damping = { alpha = -1.0, beta = 0.0 }", "flexible.proximal1.damping.alpha"),
        ("shear = 1", "flexible.proximal1"),
    ],
)
def test_bad_fem_fields_name_the_field(configs, tmp_path: Path, line, field):
    """A bad field of a fem table raises a ConfigError naming it."""
    text = (configs / "rrr3_flexible.toml").read_text().replace('urdf = "rrr3.urdf"', f'urdf = "{configs / "rrr3.urdf"}"')
    key = line.split("=")[0].strip()
    lines = text.splitlines()
    start = lines.index("[flexible.proximal1]")
    block = [i for i in range(start, start + 12) if lines[i].startswith(key + " ")]
    if block:
        lines[block[0]] = line
    else:
        lines.insert(start + 1, line)
    (tmp_path / "r.toml").write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as err:
        read_robot_spec(tmp_path / "r.toml")
    assert (err.value.field or "").startswith(field)
