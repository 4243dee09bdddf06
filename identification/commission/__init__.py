"""Commissioning an arm on the arm itself: pre-flight, friction experiments, excitation, whole-arm
identification, verification and a report, step by step and resumable (``mbctl commission``).

Each step is a function ``(Commission, results so far) -> JSON result``; :func:`run_commission` runs
them in order from any step and keeps each result in ``DIR/<step>/``.
"""

from mbctl.identification.commission.context import STEPS, Commission, CommissionSettings, StepStopped
from mbctl.identification.commission.envelope import Envelope, Margins, envelope_robot
from mbctl.identification.commission.runner import run_commission

__all__ = ["STEPS", "Commission", "CommissionSettings", "Envelope", "Margins", "StepStopped", "envelope_robot", "run_commission"]
