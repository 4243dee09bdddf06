"""``[flexible.<link>]``: a link modelled by rigid finite elements (SI units).

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
```
"""

from __future__ import annotations

from dataclasses import dataclass

from mbctl.tomlfields import Table

__all__ = ["AXES", "RFESpec", "parse_flexible"]

AXES = ("x", "y", "z")
FLEXIBLE_KEYS = ("method", "elements", "axis", "length", "E", "G", "section", "density", "mass_per_length", "damping")
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


def _positive(t: Table, key: str) -> float:
    value = t.number(key)
    if not value > 0:
        raise t.error(key, f"must be > 0, got {value:g}")
    return value


def parse_flexible(t: Table, link: str) -> RFESpec:
    """Parse one ``[flexible.<link>]`` table.

    Raises:
        ConfigError: Naming file and field, for unknown or missing fields and
            non-physical values.
    """
    t.only(FLEXIBLE_KEYS)
    t.string("method", choices=["rfe"])
    elements = t.number("elements")
    if elements != int(elements) or not 1 <= elements <= 200:
        raise t.error("elements", f"must be a whole number from 1 to 200, got {elements:g}")
    axis = t.string("axis", choices=list(AXES))
    st = t.table("section")
    st.only(SECTION_KEYS)
    section = {key: _positive(st, key) for key in SECTION_KEYS}
    if ("density" in t) == ("mass_per_length" in t):
        raise t.error(None, "give either density (kg/m^3) or mass_per_length (kg/m)")
    mu = _positive(t, "density") * section["A"] if "density" in t else _positive(t, "mass_per_length")
    dt = t.table("damping")
    ratio = None
    explicit = None
    if "ratio" in dt:
        dt.only(["ratio"])
        ratio = dt.number("ratio")
        if ratio < 0:
            raise dt.error("ratio", f"must be >= 0, got {ratio:g}")
    else:
        dt.only(["ratio", *DAMPING_KEYS])
        values = []
        for key in DAMPING_KEYS:
            value = dt.number(key)
            if value < 0:
                raise dt.error(key, f"must be >= 0, got {value:g}")
            values.append(value)
        explicit = (values[0], values[1], values[2])
    return RFESpec(
        link=link,
        elements=int(elements),
        axis=axis,
        length=_positive(t, "length"),
        E=_positive(t, "E"),
        G=_positive(t, "G"),
        mass_per_length=mu,
        damping_ratio=ratio,
        damping=explicit,
        **section,
    )
