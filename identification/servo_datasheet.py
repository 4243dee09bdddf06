"""What a servo's data sheet says of its motor, and what a fit of position logs takes from it.

A data sheet gives stall points: at supply ``V_k`` (V) the motor stalls at current ``I_k`` (A)
with torque ``tau_k`` (N m). From them:

- the stall resistance ``V_k / I_k`` (ohm): winding, bridge and wiring, the ``R`` of
  ``i = (d vin - kt omega) / R``; its mean is :attr:`MotorDataSheet.resistance`;
- the torque per ampere at stall ``tau_k / I_k`` (N m/A), and the torque saturation
  ``tau = c i / (1 + c i / tau_sat)`` through the points (least squares on
  ``i / tau = 1/c + i / tau_sat``): ``c`` the slope at small current, ``tau_sat`` (N m);
  ``kt`` is physical between the least torque per ampere at stall and ``c``
  (:attr:`MotorDataSheet.torque_constant_range`).

Position logs of a pendulum do not separate ``kt`` from ``R``: they show the torque per volt
``kt / R`` and the damping ``kt^2 / R`` (which viscous friction mimics), and a fit left free
ends ``R`` on whatever bound it is given. :func:`datasheet_of` finds the data sheet of the
motor the logs name; the fit then holds ``R`` at the stall resistance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["DATASHEETS", "MotorDataSheet", "datasheet_of"]


@dataclass(frozen=True)
class MotorDataSheet:
    """Stall points of a servo's motor at several supply voltages (SI units).

    Attributes:
        name: The servo, e.g. ``"XL330-M288-T"``.
        stall_volts: Supply voltages (V).
        stall_current: Stall current at each (A).
        stall_torque: Stall torque at each (N m).
        source: Where the numbers come from.
    """

    name: str
    stall_volts: tuple[float, ...]
    stall_current: tuple[float, ...]
    stall_torque: tuple[float, ...]
    source: str

    @property
    def resistances(self) -> np.ndarray:
        """``V / I`` at each stall point (ohm)."""
        return np.asarray(self.stall_volts) / np.asarray(self.stall_current)

    @property
    def resistance(self) -> float:
        """The mean stall resistance (ohm): the ``R`` a fit holds."""
        return float(self.resistances.mean())

    def saturation(self) -> tuple[float, float]:
        """``(c, tau_sat)`` of ``tau = c i / (1 + c i / tau_sat)`` through the stall points (N m/A, N m)."""
        i, tau = np.asarray(self.stall_current), np.asarray(self.stall_torque)
        coef, *_ = np.linalg.lstsq(np.column_stack([np.ones(len(i)), i]), i / tau, rcond=None)
        return float(1 / coef[0]), float(1 / coef[1])

    @property
    def torque_constant_range(self) -> tuple[float, float]:
        """``kt`` (N m/A) from the least torque per ampere at stall to the slope at small current."""
        per_amp = np.asarray(self.stall_torque) / np.asarray(self.stall_current)
        return float(per_amp.min()), max(float(per_amp.max()), self.saturation()[0])


DATASHEETS: dict[str, MotorDataSheet] = {
    "xl330": MotorDataSheet(
        name="XL330-M288-T",
        stall_volts=(3.7, 5.0, 6.0),
        stall_current=(1.11, 1.47, 1.74),
        stall_torque=(0.42, 0.52, 0.60),
        source="ROBOTIS e-manual, XL330-M288-T specifications",
    ),
}


def datasheet_of(motors: Sequence[str | None]) -> MotorDataSheet | None:
    """The data sheet of the motor every log names (``motor`` of BAM's logs, e.g. ``"xl330"``), if
    all name the same known one; else None (run logs name none)."""
    names = {(m or "").strip().lower() for m in motors}
    if len(names) != 1:
        return None
    return DATASHEETS.get(names.pop())
