"""``[flexible.<link>]``: a flexible link, as rigid finite elements or floating-frame beam elements (SI units).

```toml
[flexible.upper_arm]
method = "rfe"
elements = 4                 # spring-damping elements m (1..200)
axis = "x"                   # beam axis in the link frame
length = 0.6                 # m
E = 70e9                     # Pa
G = 26e9                     # Pa
section = { A = 6e-4, Iy = 2e-8, Iz = 8e-8, J = 5e-8 }   # m², m⁴
density = 2700.0             # kg/m³ (or mass_per_length, kg/m)
damping = { ratio = 0.02 }   # or explicit { twist = ..., bend_y = ..., bend_z = ... } N·m·s/rad

[flexible.proximal1]         # a planar floating-frame Euler–Bernoulli beam (mbctl.dynamics.flexible.fem)
method = "fem"
elements = 3                 # 2-node beam elements (1..200), clamped to the link frame at its joint
length = 0.2                 # m, along the link's x axis
E = 70e9                     # Pa
section = { A = 1.5e-4, Iz = 4.5e-10 }   # m², m⁴ (Iz: bending in the mechanism's x-y plane;
                                         # Iy, J and G may stay, so one table serves both methods)
density = 2700.0             # kg/m³ (or mass_per_length, kg/m)
damping = { ratio = 0.01 }   # or Rayleigh { alpha = ..., beta = ... } (1/s, s); default none
geometric_stiffness = true   # centrifugal stiffening of the lever's own rotation (default true)
```
"""

from __future__ import annotations

from dataclasses import dataclass

from mbctl.tomlfields import Table

__all__ = ["AXES", "FEMSpec", "FlexibleSpec", "METHODS", "RFESpec", "parse_flexible"]

AXES = ("x", "y", "z")
METHODS = ("rfe", "fem")
FLEXIBLE_KEYS = ("method", "elements", "axis", "length", "E", "G", "section", "density", "mass_per_length", "damping")
FEM_KEYS = (*FLEXIBLE_KEYS, "geometric_stiffness")
RAYLEIGH_KEYS = ("alpha", "beta")
SECTION_KEYS = ("A", "Iy", "Iz", "J")
DAMPING_KEYS = ("twist", "bend_y", "bend_z")


@dataclass(frozen=True)
class RFESpec:
    """One ``[flexible.<link>]`` table, parsed (SI units).

    Attributes:
        link: URDF link name.
        elements: Number m of spring-damping elements (>= 1).
        axis: Link axis in the link frame: "x", "y" or "z".
        length: L (m).
        E, G: Young's and shear moduli (Pa).
        A, Iy, Iz, J: Section area (m²), second moments about y', z' and torsion constant (m⁴).
        mass_per_length: mu (kg/m).
        damping_ratio: zeta, or None when explicit values are given.
        damping: Explicit (twist, bend_y, bend_z) damping per sde (N·m·s/rad), or None.
    """

    link: str
    elements: int
    axis: str
    length: float
    E: float
    G: float
    A: float
    Iy: float
    Iz: float
    J: float
    mass_per_length: float
    damping_ratio: float | None = None
    damping: tuple[float, float, float] | None = None

    @property
    def segment(self) -> float:
        """Primary segment length D = L/m (m)."""
        return self.length / self.elements

    @property
    def density(self) -> float:
        """rho = mu/A (kg/m³)."""
        return self.mass_per_length / self.A


@dataclass(frozen=True)
class FEMSpec:
    """One ``[flexible.<link>]`` table with ``method = "fem"``, parsed (SI units): a planar
    floating-frame Euler–Bernoulli beam along the link's x axis, bending in the x-y plane.

    Attributes:
        link: URDF link name.
        elements: Number of 2-node beam elements (>= 1).
        length: L (m).
        E: Young's modulus (Pa).
        A: Section area (m²).
        Iz: Second moment of the section for bending in the x-y plane (m⁴).
        mass_per_length: mu (kg/m).
        damping_ratio: zeta of the first clamped-free bending mode (stiffness-proportional
            damping), or None.
        rayleigh: Explicit Rayleigh coefficients (alpha 1/s, beta s), or None.
        geometric_stiffness: Include the centrifugal stiffening of the lever's rotation.
        G, Iy, J: Shear modulus (Pa), out-of-plane second moment and torsion constant (m⁴) when
            given (unused by the planar beam; they let the lever be rebuilt as RFE, :meth:`as_rfe`).
    """

    link: str
    elements: int
    length: float
    E: float
    A: float
    Iz: float
    mass_per_length: float
    damping_ratio: float | None = None
    rayleigh: tuple[float, float] | None = None
    geometric_stiffness: bool = True
    G: float | None = None
    Iy: float | None = None
    J: float | None = None

    def as_rfe(self, elements: int) -> RFESpec:
        """The same lever as a chain of ``elements`` rigid finite elements (axis x), damped with the
        same ratio (a Rayleigh pair becomes explicit stiffness-proportional damping ``beta S``).

        Raises:
            ValueError: If G, Iy or J were not given.
        """
        if self.G is None or self.Iy is None or self.J is None:
            raise ValueError(f"[flexible.{self.link}] needs G and section Iy, J to be rebuilt as rigid finite elements")
        explicit = None
        if self.rayleigh is not None:
            D = self.length / elements
            beta = self.rayleigh[1]
            explicit = (beta * self.G * self.J / D, beta * self.E * self.Iy / D, beta * self.E * self.Iz / D)
        return RFESpec(
            link=self.link,
            elements=elements,
            axis="x",
            length=self.length,
            E=self.E,
            G=self.G,
            A=self.A,
            Iy=self.Iy,
            Iz=self.Iz,
            J=self.J,
            mass_per_length=self.mass_per_length,
            damping_ratio=None if explicit else (self.damping_ratio or 0.0),
            damping=explicit,
        )


FlexibleSpec = RFESpec | FEMSpec


def _positive(t: Table, key: str) -> float:
    value = t.number(key)
    if not value > 0:
        raise t.error(key, f"must be > 0, got {value:g}")
    return value


def _elements(t: Table) -> int:
    elements = t.number("elements")
    if elements != int(elements) or not 1 <= elements <= 200:
        raise t.error("elements", f"must be a whole number from 1 to 200, got {elements:g}")
    return int(elements)


def _mass_per_length(t: Table, area: float) -> float:
    if ("density" in t) == ("mass_per_length" in t):
        raise t.error(None, "give either density (kg/m^3) or mass_per_length (kg/m)")
    return _positive(t, "density") * area if "density" in t else _positive(t, "mass_per_length")


def _parse_fem(t: Table, link: str) -> FEMSpec:
    t.only(FEM_KEYS)
    elements = _elements(t)
    t.string("axis", "x", choices=["x"])  # the planar beam lies along the link's x axis
    st = t.table("section")
    st.only(SECTION_KEYS)
    A, Iz = _positive(st, "A"), _positive(st, "Iz")
    # used by the RFE method only; checked and kept so the lever can be rebuilt as RFE
    Iy = _positive(st, "Iy") if "Iy" in st else None
    J = _positive(st, "J") if "J" in st else None
    G = _positive(t, "G") if "G" in t else None
    ratio, rayleigh = _damping(t.table("damping"), RAYLEIGH_KEYS) if "damping" in t else (None, None)
    return FEMSpec(
        link=link,
        elements=elements,
        length=_positive(t, "length"),
        E=_positive(t, "E"),
        A=A,
        Iz=Iz,
        mass_per_length=_mass_per_length(t, A),
        damping_ratio=ratio,
        rayleigh=rayleigh,
        geometric_stiffness=t.boolean("geometric_stiffness", True),
        G=G,
        Iy=Iy,
        J=J,
    )


def _damping(dt: Table, keys: tuple[str, ...]) -> tuple[float | None, tuple[float, ...] | None]:
    """A ``damping`` table: either ``ratio`` (of critical, stiffness-proportional) or every
    one of ``keys`` (explicit coefficients); each >= 0. Returns ``(ratio, coefficients)``."""
    if "ratio" in dt:
        dt.only(["ratio"])
        ratio = dt.number("ratio")
        if ratio < 0:
            raise dt.error("ratio", f"must be >= 0, got {ratio:g}")
        return ratio, None
    dt.only(["ratio", *keys])
    values = tuple(dt.number(key) for key in keys)
    for key, value in zip(keys, values):
        if value < 0:
            raise dt.error(key, f"must be >= 0, got {value:g}")
    return None, values


def parse_flexible(t: Table, link: str) -> FlexibleSpec:
    """Parse one ``[flexible.<link>]`` table (``method = "rfe"`` or ``"fem"``).

    Raises:
        ConfigError: Naming file and field, for unknown or missing fields and
            non-physical values.
    """
    if t.string("method", choices=list(METHODS)) == "fem":
        return _parse_fem(t, link)
    t.only(FLEXIBLE_KEYS)
    elements = _elements(t)
    axis = t.string("axis", choices=list(AXES))
    st = t.table("section")
    st.only(SECTION_KEYS)
    section = {key: _positive(st, key) for key in SECTION_KEYS}
    mu = _mass_per_length(t, section["A"])
    ratio, explicit = _damping(t.table("damping"), DAMPING_KEYS)
    return RFESpec(
        link=link,
        elements=elements,
        axis=axis,
        length=_positive(t, "length"),
        E=_positive(t, "E"),
        G=_positive(t, "G"),
        mass_per_length=mu,
        damping_ratio=ratio,
        damping=explicit,
        **section,
    )
