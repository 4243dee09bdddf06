"""Planar floating-frame Euler–Bernoulli beams (FEM): element matrices and one lever's assembly.

A flexible lever has a body frame (origin ``r_O`` at its joint, angle ``phi``; the beam
along the frame's x axis) and small elastic displacements in that frame. Its length L
is cut into ``n`` equal 2-node elements of length ``le = L/n``; every node has three
coordinates, axial ``u``, transverse ``v`` and the section's rotation ``theta = v'``.
On an element, with ``xi = (x - x_e)/le`` and element coordinates
``e = (u1, v1, theta1, u2, v2, theta2)``::

    axial       N1 = 1 - xi,                     N4 = xi
    transverse  N2 = 1 - 3 xi^2 + 2 xi^3,         N3 = le (xi - 2 xi^2 + xi^3)
                N5 = 3 xi^2 - 2 xi^3,             N6 = le (xi^3 - xi^2)
    [u(x), v(x)] = S_e(xi) e,  S_e = [[N1, 0, 0, N4, 0, 0], [0, N2, N3, 0, N5, N6]]

and a material point of the lever sits at ``r = r_O + R(phi) ([x, 0] + S(x) w)``.

**Reference conditions.** Clamped-free: the first node is clamped to the body frame
(its three coordinates are removed), so ``phi`` is the angle of the root section and
the frame is the one the lever's joint turns — the usual choice for a lever driven at
its root. The elastic coordinates ``w`` are the ``3 n`` coordinates of nodes 1..n.

**Matrices** (assembled over the elements, the clamped node's rows and columns removed):

- stiffness from ``1/2 ∫ E A u'^2 + E Iz v''^2 dx``: ``K_e = E A/le [[1, -1], [-1, 1]]``
  (axial) and the bending matrix ``E Iz/le^3 [[12, 6l, -12, 6l], [6l, 4l^2, -6l, 2l^2],
  [-12, -6l, 12, -6l], [6l, 2l^2, -6l, 4l^2]]``;
- consistent mass ``M_ww = ∫ mu S^T S dx`` (``mu le/6 [[2, 1], [1, 2]]`` axial, the
  classical ``mu le/420 [[156, 22l, 54, -13l], ...]`` bending);
- the rigid–elastic coupling and the quadratic-velocity terms come from the kinetic
  energy ``T = 1/2 ∫ mu |r_dot|^2 dx`` of the whole lever, which the mechanism model
  (:mod:`mbctl.dynamics.flexible.planar`) evaluates by Gauss quadrature of the shape
  functions (4 points per element: exact for their degree) and differentiates
  (Lagrange's equations); the invariants it needs are :attr:`FEMBeam.points`;
- geometric stiffness of the lever's own rotation (centrifugal stiffening, optional):
  the axial force a rotation rate ``omega`` sets up in the undeformed lever,
  ``N(x) = omega^2 mu (L^2 - x^2)/2``, stiffens bending by
  ``omega^2 K_G1``, ``K_G1 = ∫ mu (L^2 - x^2)/2 S_v'^T S_v' dx``. It is the second-order
  foreshortening of the lever (its axial points move in by ``1/2 ∫_0^x v'^2``) in the
  centrifugal field, so it enters the kinetic energy as ``-1/2 omega^2 w^T K_G1 w``;
  without it the floating frame shows the spurious softening ``-omega^2 M_vv`` only.
  Foreshortening under other loads (the axial force a tip joint transmits) is not
  included;
- damping ``D = alpha M_ww + beta K`` (Rayleigh), or from a ratio ``zeta`` the
  stiffness-proportional ``beta = 2 zeta/omega_1`` with ``omega_1 = BETA1^2
  sqrt(E Iz/(mu L^4))`` (``BETA1 = 1.87510...``) the first clamped-free bending frequency (the rule the RFE links
  use, so both discretisations damp the same).

The frame rotation also carries the sections' rotary inertia ``rho Iz L`` (so a stiff
lever has the rigid bar's inertia ``mu L^3/12 + rho Iz L`` about its centre); the
rotary inertia of the elastic slopes is neglected (Euler–Bernoulli).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from mbctl.config.flexible import FEMSpec

__all__ = [
    "BETA1",
    "FEMBeam",
    "beam_from_spec",
    "clamped_free_bending_frequency",
    "element_mass",
    "element_stiffness",
    "make_beam",
    "shape_functions",
    "shape_slopes",
    "spinning_frequencies",
    "static_deflection",
]

BETA1 = 1.8751040687119611  # first root of cos(b) cosh(b) = -1 (clamped-free beam)
_GAUSS = np.polynomial.legendre.leggauss(4)  # exact to degree 7 on an element
_OMEGA = np.array([[0.0, -1.0], [1.0, 0.0]])  # 90 deg rotation in the plane


def clamped_free_bending_frequency(E: float, I: float, mu: float, L: float) -> float:  # noqa: E741 - the beam's I
    """Euler–Bernoulli first clamped-free bending frequency ``BETA1² sqrt(E I/(mu L⁴))`` (rad/s)
    of a uniform beam: modulus ``E`` (Pa), second moment ``I`` (m⁴), mass per length ``mu``
    (kg/m), length ``L`` (m)."""
    return BETA1**2 * math.sqrt(E * I / (mu * L**4))


def shape_functions(xi: float, le: float) -> np.ndarray:
    """``S_e(xi)`` (2 x 6): axial and transverse displacement per element coordinate (m/m, m/rad)."""
    return np.array(
        [
            [1 - xi, 0.0, 0.0, xi, 0.0, 0.0],
            [0.0, 1 - 3 * xi**2 + 2 * xi**3, le * (xi - 2 * xi**2 + xi**3), 0.0, 3 * xi**2 - 2 * xi**3, le * (xi**3 - xi**2)],
        ]
    )


def shape_slopes(xi: float, le: float) -> np.ndarray:
    """``d S_e / dx`` (2 x 6): axial strain (1/m per m of ``u``) and section rotation ``v'``
    (rad per m of ``v``: 1/m; per rad of ``theta``: 1) per element coordinate."""
    return np.array(
        [
            [-1 / le, 0.0, 0.0, 1 / le, 0.0, 0.0],
            [0.0, (-6 * xi + 6 * xi**2) / le, 1 - 4 * xi + 3 * xi**2, 0.0, (6 * xi - 6 * xi**2) / le, 3 * xi**2 - 2 * xi],
        ]
    )


def element_stiffness(E: float, A: float, Iz: float, le: float) -> np.ndarray:
    """Element stiffness (6 x 6, N/m, N, N·m/rad) in ``(u1, v1, theta1, u2, v2, theta2)`` order."""
    K = np.zeros((6, 6))
    a = E * A / le
    K[np.ix_([0, 3], [0, 3])] = a * np.array([[1, -1], [-1, 1]])
    b = E * Iz / le**3
    K[np.ix_([1, 2, 4, 5], [1, 2, 4, 5])] = b * np.array(
        [[12, 6 * le, -12, 6 * le], [6 * le, 4 * le**2, -6 * le, 2 * le**2], [-12, -6 * le, 12, -6 * le], [6 * le, 2 * le**2, -6 * le, 4 * le**2]]
    )
    return K


def element_mass(mu: float, le: float) -> np.ndarray:
    """Consistent element mass ``∫ mu S_e^T S_e dx`` (6 x 6, kg, kg·m, kg·m²), closed form."""
    M = np.zeros((6, 6))
    M[np.ix_([0, 3], [0, 3])] = mu * le / 6 * np.array([[2, 1], [1, 2]])
    M[np.ix_([1, 2, 4, 5], [1, 2, 4, 5])] = (
        mu
        * le
        / 420
        * np.array(
            [[156, 22 * le, 54, -13 * le], [22 * le, 4 * le**2, 13 * le, -3 * le**2], [54, 13 * le, 156, -22 * le], [-13 * le, -3 * le**2, -22 * le, 4 * le**2]]
        )
    )
    return M


@dataclass(frozen=True, eq=False)
class FEMBeam:
    """One clamped-free lever of ``n`` planar beam elements (SI units), its matrices assembled.

    Attributes:
        length: L (m).
        elements: n.
        E, A, Iz: Young's modulus (Pa), area (m²), in-plane second moment (m⁴).
        mu: Mass per length (kg/m).
        K: Stiffness (3n x 3n) on the elastic coordinates ``w`` (u, v in m, theta in rad): N/m,
            N/rad (= N·m/m) and N·m/rad blocks.
        M: Consistent mass ``∫ mu S^T S dx`` (3n x 3n): kg, kg·m and kg·m² blocks.
        K_G1: Geometric stiffness per unit squared rotation rate (3n x 3n; times omega², rad²/s², a stiffness).
        D: Damping (3n x 3n, Rayleigh ``alpha M + beta K``): N·s/m, N·s/rad and N·m·s/rad blocks.
        rayleigh: ``(alpha, beta)`` (1/s, s).
        geometric_stiffness: Whether the mechanism model includes ``K_G1``.
        x_points, weights: Gauss points along the lever (m) and their weights times mu (kg).
        S_points: Shape matrices at the points (k, 2, 3n): ``[u, v](x_k) = S_k w``.
    """

    length: float
    elements: int
    E: float
    A: float
    Iz: float
    mu: float
    K: np.ndarray
    M: np.ndarray
    K_G1: np.ndarray
    D: np.ndarray
    rayleigh: tuple[float, float]
    geometric_stiffness: bool
    x_points: np.ndarray
    weights: np.ndarray
    S_points: np.ndarray

    @property
    def n(self) -> int:
        """Number of elastic coordinates (3 per free node)."""
        return 3 * self.elements

    @property
    def rotary_inertia(self) -> float:
        """``rho Iz L`` (kg·m²): the sections' rotary inertia, carried by the frame rotation."""
        return self.mu / self.A * self.Iz * self.length

    @property
    def first_frequency(self) -> float:
        """Euler–Bernoulli first clamped-free bending frequency (rad/s), :func:`clamped_free_bending_frequency`."""
        return clamped_free_bending_frequency(self.E, self.Iz, self.mu, self.length)

    def _locate(self, x: float) -> tuple[int, float]:
        le = self.length / self.elements
        e = min(max(int(math.floor(x / le)), 0), self.elements - 1)
        return e, x / le - e

    def _scatter(self, e: int, block: np.ndarray) -> np.ndarray:
        """An element row block (r x 6) in the lever's coordinates (r x 3n), clamped node dropped."""
        full = np.zeros((block.shape[0], 3 * (self.elements + 1)))
        full[:, 3 * e : 3 * e + 6] = block
        return full[:, 3:]

    def shape_at(self, x: float) -> np.ndarray:
        """``S(x)`` (2 x 3n): ``[u, v]`` at ``x`` along the lever (m)."""
        e, xi = self._locate(x)
        return self._scatter(e, shape_functions(xi, self.length / self.elements))

    def slope_at(self, x: float) -> np.ndarray:
        """Row (3n,) giving the section rotation ``v'(x) = row @ w`` (rad)."""
        e, xi = self._locate(x)
        return self._scatter(e, shape_slopes(xi, self.length / self.elements))[1]

    @property
    def coupling(self) -> np.ndarray:
        """``S_tilde = ∫ mu S^T Omega^T S dx`` (3n x 3n, skew; kg, kg·m, kg·m² blocks like
        :attr:`M`): the gyroscopic coupling of axial and transverse motion in a rotating frame."""
        return np.einsum("k,kai,ab,kbj->ij", self.weights, self.S_points, _OMEGA.T, self.S_points)


def _assemble(n: int, block) -> np.ndarray:
    full = np.zeros((3 * (n + 1), 3 * (n + 1)))
    for e in range(n):
        full[3 * e : 3 * e + 6, 3 * e : 3 * e + 6] += block(e)
    return full[3:, 3:]


def make_beam(
    length: float,
    elements: int,
    E: float,
    A: float,
    Iz: float,
    mu: float,
    *,
    damping_ratio: float | None = None,
    rayleigh: tuple[float, float] | None = None,
    geometric_stiffness: bool = True,
) -> FEMBeam:
    """A lever from numbers (SI units); the options as :func:`beam_from_spec` takes them from
    TOML: ``damping_ratio``, ``rayleigh = (alpha, beta)``, ``geometric_stiffness``."""
    n, le = elements, length / elements
    K = _assemble(n, lambda e: element_stiffness(E, A, Iz, le))
    M = _assemble(n, lambda e: element_mass(mu, le))

    def geometric(e: int) -> np.ndarray:
        G = np.zeros((6, 6))
        for xg, wg in zip(*_GAUSS):
            xi = 0.5 * (xg + 1)
            x = (e + xi) * le
            Sv = shape_slopes(xi, le)[1]
            G += 0.5 * wg * le * mu * (length**2 - x**2) / 2 * np.outer(Sv, Sv)
        return G

    K_G1 = _assemble(n, geometric)
    xs, ws, Ss = [], [], []
    for e in range(n):
        for xg, wg in zip(*_GAUSS):
            xi = 0.5 * (xg + 1)
            xs.append((e + xi) * le)
            ws.append(0.5 * wg * le * mu)
            full = np.zeros((2, 3 * (n + 1)))
            full[:, 3 * e : 3 * e + 6] = shape_functions(xi, le)
            Ss.append(full[:, 3:])
    if rayleigh is None:
        beta = 0.0 if not damping_ratio else 2.0 * damping_ratio / clamped_free_bending_frequency(E, Iz, mu, length)
        rayleigh = (0.0, beta)
    alpha, beta = rayleigh
    return FEMBeam(
        length=length,
        elements=n,
        E=E,
        A=A,
        Iz=Iz,
        mu=mu,
        K=K,
        M=M,
        K_G1=K_G1,
        D=alpha * M + beta * K,
        rayleigh=(float(alpha), float(beta)),
        geometric_stiffness=geometric_stiffness,
        x_points=np.array(xs),
        weights=np.array(ws),
        S_points=np.array(Ss),
    )


def beam_from_spec(spec: FEMSpec, *, E: float | None = None) -> FEMBeam:
    """The lever a ``[flexible.<link>]`` table with ``method = "fem"`` describes
    (``E`` overrides the modulus, e.g. to stiffen it towards the rigid limit)."""
    return make_beam(
        spec.length,
        spec.elements,
        spec.E if E is None else E,
        spec.A,
        spec.Iz,
        spec.mass_per_length,
        damping_ratio=spec.damping_ratio,
        rayleigh=spec.rayleigh,
        geometric_stiffness=spec.geometric_stiffness,
    )


def static_deflection(beam: FEMBeam, x: float, force: np.ndarray) -> np.ndarray:
    """Elastic coordinates ``w`` (m, rad) of the clamped lever under an in-plane force
    ``[F_axial, F_transverse]`` (N) at ``x`` along it: ``K w = S(x)^T F``."""
    return np.linalg.solve(beam.K, beam.shape_at(x).T @ np.asarray(force, dtype=float))


def spinning_frequencies(beam: FEMBeam, omega: float, count: int = 2, *, geometric_stiffness: bool | None = None) -> np.ndarray:
    """Lowest ``count`` natural frequencies (rad/s) of the lever clamped to a hub turning at
    a prescribed constant rate ``omega`` (rad/s), undamped.

    Lagrange's equations of the elastic coordinates in the rotating frame, linearized
    about the undeformed lever (the steady axial stretch is second order)::

        M w'' - 2 omega S_tilde w' + (K + omega^2 (K_G1 - M)) w = 0

    solved as a first-order eigenproblem (the gyroscopic term couples axial and
    transverse motion). ``geometric_stiffness`` defaults to the beam's setting.
    """
    use = beam.geometric_stiffness if geometric_stiffness is None else geometric_stiffness
    n = beam.n
    Ke = beam.K + omega**2 * ((beam.K_G1 if use else 0.0) - beam.M)
    G = -2.0 * omega * beam.coupling
    A = np.block([[np.zeros((n, n)), np.eye(n)], [-np.linalg.solve(beam.M, Ke), -np.linalg.solve(beam.M, G)]])
    lam = scipy.linalg.eigvals(A)
    freqs = np.sort(np.abs(lam.imag[lam.imag > 1e-9]))
    return freqs[:count]
