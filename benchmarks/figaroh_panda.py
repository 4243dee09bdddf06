"""FIGAROH on the real Panda log, on exactly the samples mbctl's own whole-arm fit sees.

    pip install figaroh          # in a separate environment; not an mbctl dependency
    python benchmarks/figaroh_panda.py

FIGAROH (github.com/thanhndv212/figaroh, Apache-2.0) is the identification toolbox a Panda
user would otherwise pick. Only the data is shared with mbctl: ``data/panda-excitation/
train.csv`` read and conditioned by :mod:`mbctl.identification.arm_log` (1 kHz, zero-phase
filtered, logged velocity), the first 70 % to fit, the last 30 % to judge. Everything else
is FIGAROH's own:

- ``figaroh.tools.regressor.build_regressor_basic``: pinocchio's joint-torque regressor
  plus, per joint, FIGAROH's viscous (dq), Coulomb (sign dq) and constant-offset columns;
- ``figaroh.identification.parameter.get_standard_parameters`` and
  ``add_standard_additional_parameters``: column names and their URDF values;
- ``figaroh.tools.regressor.get_index_eliminate`` / ``build_regressor_reduced``: drop
  unexcited columns (FIGAROH's default tolerance 1e-3 on the squared column norm);
- ``figaroh.tools.qrdecomposition.QRDecomposer.double_decomposition``: base parameters by
  pivoted QR and their ordinary least-squares values (what ``BaseIdentification.solve``
  does, without its default 10x decimation, so both tools fit the same samples);
- ``consistent=True``: ``figaroh.identification.physical_fit.build_problem`` and
  ``solve_direct_effort_fit``: the effort fit with each link's pseudo-inertia constrained
  positive semidefinite (LMI, picos + cvxopt), pulled toward the URDF with FIGAROH's
  default weight 1e-6.

The error is the RMS of measured minus predicted joint torque on the held-out part, per
joint (N·m), at the conditioned 1 kHz rate: the numbers mbctl's own fit reports.
"""

from __future__ import annotations

import time
import warnings
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from mbctl.dynamics.model.robot import RobotModel
    from mbctl.identification.arm_log import ConditionedLog

__all__ = ["figaroh_fit"]

# FIGAROH's defaults (BaseIdentification.solve, QRDecomposer in its fit stage)
ZERO_COLUMN_TOL = 1e-3
QR_TOL = 1e-6


def figaroh_fit(robot: RobotModel, train: ConditionedLog, test: ConditionedLog, *, consistent: bool = False) -> dict[str, Any]:
    """Identify ``robot`` with FIGAROH on ``train`` and judge the prediction on ``test``.

    Model: tau = Y(q, dq, ddq) theta + fv * dq + fc * sign(dq) + off (N·m per joint), with
    theta the 10 inertial parameters per link in pinocchio's order; fitted either as OLS on
    FIGAROH's base parameters or, with ``consistent``, as FIGAROH's LMI effort fit.

    Returns:
        ``rms``: per-joint RMS torque error on ``test`` (N·m, shape (nv,)); ``seconds``:
        wall time of FIGAROH's fit (regressor, reduction, solve); ``method``: one line;
        ``consistent``: whether every link's identified inertia is physically feasible
        (always False for the OLS base parameters, which are not link inertias).

    Raises:
        ImportError: FIGAROH (or, for ``consistent``, picos/cvxopt) is not installed.
        RuntimeError: The LMI solve found no optimal solution.
    """
    try:
        with warnings.catch_warnings():  # its ndcurves import warns of a converter already registered (harmless)
            warnings.filterwarnings("ignore", "to-Python converter", RuntimeWarning)
            from figaroh.identification.parameter import add_standard_additional_parameters, get_standard_parameters
            from figaroh.tools.qrdecomposition import QRDecomposer
            from figaroh.tools.regressor import build_regressor_basic, build_regressor_reduced, get_index_eliminate
    except ImportError as exc:
        raise ImportError(f"this benchmark needs FIGAROH: pip install figaroh ({exc})") from exc
    if train.tau is None or test.tau is None:
        raise ValueError("both parts of the log need measured torques")
    if tuple(train.joint_names) != tuple(robot.model.names[1:]) or test.joint_names != train.joint_names:
        raise ValueError(f"the logs' columns must be the model's joints in order: {', '.join(robot.model.names[1:])}")

    model = robot.model
    nv = model.nv
    # FIGAROH's regressor reads robot.model and robot.data (a pinocchio RobotWrapper's fields)
    fig_robot = SimpleNamespace(model=model, data=model.createData())
    config: dict[str, Any] = {
        "is_joint_torques": True,
        "has_friction": True,
        "has_joint_offset": True,
        "act_idxv": list(range(nv)),
        **{key: [0.0] * nv for key in ("fv", "fs", "off")},  # friction priors: none
    }

    def regressor(part: ConditionedLog) -> np.ndarray:
        # rows joint-major: joint j, sample i at row j * N + i
        return build_regressor_basic(fig_robot, part.q, part.dq, part.ddq, config)

    start = time.perf_counter()
    params = get_standard_parameters(model, config)
    params.update(add_standard_additional_parameters(model, config))
    W = regressor(train)
    tau = train.tau.T.ravel()
    if consistent:
        try:
            from figaroh.identification import physical_fit as pf
        except ImportError as exc:
            raise ImportError(f"FIGAROH's consistent fit needs picos and cvxopt ({exc})") from exc
        problem = pf.build_problem(W, tau, list(params), list(model.names[1:]), prior=np.array(list(params.values())), policy=pf.PhysicalPolicy())
        record = pf.solve_direct_effort_fit(problem, solver="cvxopt")
        seconds = time.perf_counter() - start
        if record.theta is None:
            raise RuntimeError(f"FIGAROH's LMI fit: {record.solver_status} {record.exception or ''}".strip())
        predicted = regressor(test) @ record.theta
        feasible = bool(record.accepted)
        method = "FIGAROH LMI effort fit (pseudo-inertia PSD, cvxopt, prior weight 1e-6 to the URDF), its viscous+Coulomb+offset columns"
    else:
        eliminated, remaining = get_index_eliminate(W, params, tol_e=ZERO_COLUMN_TOL)
        decomposer = QRDecomposer(tolerance=QR_TOL)
        _, _, _, phi_base, _ = decomposer.double_decomposition(tau, build_regressor_reduced(W, eliminated), remaining, params)
        base = decomposer.get_base_indices()
        seconds = time.perf_counter() - start
        predicted = build_regressor_reduced(regressor(test), eliminated)[:, base] @ phi_base
        feasible = False
        method = f"FIGAROH double-QR base parameters ({len(phi_base)}) + OLS, its viscous+Coulomb+offset columns"
    error = test.tau - predicted.reshape(nv, -1).T
    return {"rms": np.sqrt(np.mean(error**2, axis=0)), "seconds": seconds, "method": method, "consistent": feasible}


if __name__ == "__main__":
    import sys
    from pathlib import Path

    ROOT = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(ROOT))

    from mbctl.dynamics.model.robot import load_robot
    from mbctl.identification.arm_log import condition_log, read_arm_log

    robot = load_robot("panda_arm")
    log = condition_log(read_arm_log(ROOT / "data" / "panda-excitation" / "train.csv", robot.joint_names))
    train, test = log.split(0.7)
    print(f"Panda log: fit on {len(train)} samples, judged on {len(test)} (RMS torque error, N·m)")
    print(f"{'':14}" + "".join(f"{f'j{i + 1}':>7}" for i in range(robot.nv)) + "  fit (s)  consistent")
    for label, flag in (("FIGAROH OLS", False), ("FIGAROH LMI", True)):
        row = figaroh_fit(robot, train, test, consistent=flag)
        print(f"{label:14}" + "".join(f"{v:7.2f}" for v in row["rms"]) + f"  {row['seconds']:7.2f}  {row['consistent']!s:>10}   {row['method']}")
