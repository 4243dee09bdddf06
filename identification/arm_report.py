"""Whole-arm identification results as text, JSON and a written-back robot TOML.

The robot copy keeps the original text line for line, except each identified joint's
``inertial``, ``armature`` and ``friction`` (replaced in place or added), with a comment at
the top naming the logs; it must parse to the original document with only those changed and
load as a robot, or nothing is written (as every write-back of :mod:`mbctl.identification.report`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mbctl.dynamics.regressor import about_com
from mbctl.identification.arm_fit import ArmFit
from mbctl.identification.report import (
    _ANY_HEADER,
    _fmt,
    _header_pattern,
    _inline,
    _key,
    _replace_subtable,
    _write_edited_copy,
    check_copy_target,
    friction_table,
)

__all__ = ["arm_fit_json", "format_arm_fit", "inertial_values", "write_arm_robot_copy"]


def inertial_values(theta_body: np.ndarray) -> dict[str, float | list[float]]:
    """A body's ``inertial`` table from its ten parameters: mass (kg), com (m) and the inertia
    ``[ixx, iyy, izz, ixy, ixz, iyz]`` about the centre of mass (kg·m²), joint frame."""
    m, c, ic = about_com(theta_body)
    six = [ic[0, 0], ic[1, 1], ic[2, 2], ic[0, 1], ic[0, 2], ic[1, 2]]
    return {"mass": float(_fmt(m)), "com": [float(_fmt(x)) for x in c], "inertia": [float(_fmt(x)) for x in six]}


def _vector(xs: Sequence[float]) -> str:
    return "[" + ", ".join(_fmt(x) for x in xs) + "]"


def _inertial_lines(values: dict) -> list[str]:
    return [f"mass = {_fmt(values['mass'])}\n", f"com = {_vector(values['com'])}\n", f"inertia = {_vector(values['inertia'])}\n"]


def _set_joint_value(text: str, joint: str, key: str, value: str) -> str:
    """The TOML text with ``key = value`` in ``[joints.<joint>]`` (replaced in place, added at the
    table's end, or a new table at the end of the file)."""
    lines = text.splitlines(keepends=True)
    header = _header_pattern("joints", joint)
    for i, line in enumerate(lines):
        if header.match(line):
            end = next((k for k in range(i + 1, len(lines)) if _ANY_HEADER.match(lines[k])), len(lines))
            for k in range(i + 1, end):
                if re.match(rf"^\s*{re.escape(key)}\s*=", lines[k]):
                    indent = lines[k][: len(lines[k]) - len(lines[k].lstrip())]
                    lines[k] = f"{indent}{key} = {value}\n"
                    return "".join(lines)
            insert = end
            while insert > i + 1 and (not lines[insert - 1].strip() or lines[insert - 1].lstrip().startswith("#")):
                insert -= 1
            lines.insert(insert, f"{key} = {value}\n")
            return "".join(lines)
    # no [joints.<joint>] table: one just before the joint's first subtable, else at the end
    for i, line in enumerate(lines):
        header = re.match(r"^\s*\[([^\[\]]*)\]", line)
        parts = [part.strip().strip("\"'") for part in header.group(1).split(".")] if header else []
        if len(parts) > 2 and parts[:2] == ["joints", joint]:
            return "".join(lines[:i] + [f"[joints.{_key(joint)}]\n", f"{key} = {value}\n"] + lines[i:])
    tail = "" if text.endswith("\n") or not text else "\n"
    return text + tail + f"\n[joints.{_key(joint)}]\n{key} = {value}\n"


def write_arm_robot_copy(config: Path, out: Path, fit: ArmFit, logs: Sequence[Path], *, force: bool = False) -> None:
    """Write ``config`` with the fit's inertials, armature (where it identified it) and friction
    to ``out`` (module docstring).

    Raises:
        InputError: If ``out`` is ``config`` itself, exists (without ``force``), or the copy
            would not be valid.
    """
    check_copy_target(config, out, force)
    text = config.read_text()
    inertials = {c.body: inertial_values(fit.body(c.body)) for c in fit.changes}
    new = text
    for joint, values in inertials.items():
        inline = "{ " + ", ".join(line.strip() for line in _inertial_lines(values)) + " }"
        new = _replace_subtable(new, joint, "inertial", _inertial_lines(values), inline)
    for joint, law in fit.friction.items():
        if law is not None:
            new = _replace_subtable(new, joint, "friction", friction_table(joint, law).splitlines(keepends=True)[1:], _inline(law))
    armature = fit.armature_by_joint if fit.settings.fits_armature else {}
    for joint, value in armature.items():
        new = _set_joint_value(new, joint, "armature", _fmt(value))
    names = ", ".join(Path(p).name for p in logs)
    what = "Inertials, armature and friction" if armature else "Inertials and friction"
    header = (
        f"# {what} identified by `mbctl identify dynamics` from {names}\n"
        f"# ({fit.settings.friction} friction, physically consistent, pull toward the prior lambda = {fit.settings.regularisation:g}).\n"
    )

    def edit(document: dict) -> None:
        joints = document.setdefault("joints", {})
        for joint, values in inertials.items():
            joints.setdefault(joint, {})["inertial"] = values
        for joint, law in fit.friction.items():
            if law is not None:
                joints.setdefault(joint, {})["friction"] = {"law": law.name, **{k: float(_fmt(v)) for k, v in law.parameters().items()}}
        for joint, value in armature.items():
            joints.setdefault(joint, {})["armature"] = float(_fmt(value))

    _write_edited_copy(config, out, text, header + new, edit, what.lower(), f"the identified {what.lower()}")


def format_arm_fit(fit: ArmFit) -> str:
    """The report ``mbctl identify dynamics`` prints."""
    s = fit.settings
    unit = lambda j: "N·m"  # noqa: E731
    lines = [
        f"{len(fit.joint_names)} joints, {fit.samples} samples; {len(fit.base)} base parameters"
        + ("" if s.free_bodies is None else f" of {', '.join(s.free_bodies)}")
        + f", condition number {fit.condition_number:.4g}; {s.friction} friction; fitted in {fit.seconds:.2f} s (IPOPT: {fit.solver_status})",
        f"  {'joint':<16}{'noise sigma':>12}{'rms consistent':>16}{'rms unconstrained':>19}{'  sensor offset' if s.offsets != 'none' else ''}   friction (consistent)",
    ]
    for c, j in enumerate(fit.joint_names):
        law = fit.friction.get(j)
        text = "none" if law is None else ", ".join(f"{k} {v:.4g}" for k, v in law.parameters().items() if k != "delta")
        offset = (f"{fit.offsets[c]:>10.4g} {unit(j):<4}" if j in fit.offset_joints else f"{'-':>10}     ") if s.offsets != "none" else ""
        lines.append(f"  {j:<16}{fit.sigma[c]:>8.4g} {unit(j):<4}{fit.rms_consistent[c]:>11.4g} {unit(j):<4}{fit.rms_ols[c]:>14.4g} {unit(j):<4}{offset}   {text}")
    lines += _armature_lines(fit)
    lines.append(f"  bodies moved from the prior (pull lambda = {s.regularisation:g}; mass kg, centre-of-mass shift mm, inertia change relative):")
    for ch in sorted(fit.changes, key=lambda c: -abs(c.mass - c.mass_prior) / max(c.mass_prior, 1e-9)):
        lines.append(
            f"    {ch.body:<16} mass {ch.mass_prior:.4g} -> {ch.mass:.4g} ({(ch.mass - ch.mass_prior) / ch.mass_prior:+.0%}), "
            f"com {ch.com_shift * 1e3:.3g} mm, inertia {ch.inertia_change:.2g}"
        )
    if fit.payload_mass is not None:
        com = ", ".join(f"{x * 1e3:.4g}" for x in fit.payload_com)  # type: ignore[union-attr]
        lines.append(f"  payload on {s.free_bodies[0]}: {fit.payload_mass:.4g} kg at [{com}] mm (joint frame)")  # type: ignore[index]
    return "\n".join(lines)


def _armature_lines(fit: ArmFit) -> list[str]:
    """Each joint's identified armature, with its unconstrained estimate where it is a base parameter
    of its own, else the base parameter it is part of."""
    if not fit.settings.fits_armature:
        return []
    lines = ["  armature (reflected rotor inertia, kg·m²): consistent; unconstrained ± standard error"]
    first = 10 * len(fit.bodies)
    for c, j in enumerate(fit.joint_names):
        col = first + int(fit.dof_of_joint[c])
        where = np.flatnonzero(fit.base.columns == col)
        if where.size:
            i = where[0]
            how = f"{fit.beta_ols[i]:.4g} ± {fit.beta_ols_stderr[i]:.2g}"
        else:
            rows = np.flatnonzero(fit.base.K[:, col])
            how = f"in {fit.base.names[rows[0]]} (one base parameter: the log sees their sum)" if rows.size else "not excited"
        lines.append(f"    {j:<16}{fit.armature[c]:>10.4g}   {how}")
    return lines


def arm_fit_json(fit: ArmFit, validation: dict[str, dict[str, list[float]]] | None = None) -> dict:
    """Everything of the fit as plain JSON types (SI units)."""
    return {
        "joints": list(fit.joint_names),
        "bodies": list(fit.bodies),
        "settings": {"friction": fit.settings.friction, "regularisation": fit.settings.regularisation, "weighting": fit.settings.weighting,
                     "free_bodies": None if fit.settings.free_bodies is None else list(fit.settings.free_bodies), "payload": fit.settings.payload, "offsets": fit.settings.offsets,
                     "armature": fit.settings.fits_armature},
        "samples": fit.samples,
        "seconds": fit.seconds,
        "solver_status": fit.solver_status,
        "condition_number": fit.condition_number,
        "noise_sigma": fit.sigma.tolist(),
        "rms_consistent": fit.rms_consistent.tolist(),
        "rms_unconstrained": fit.rms_ols.tolist(),
        "base_parameters": {
            "names": list(fit.base.names),
            "consistent": fit.beta.tolist(),
            "unconstrained": fit.beta_ols.tolist(),
            "unconstrained_stderr": fit.beta_ols_stderr.tolist(),
        },
        "inertials": {c.body: inertial_values(fit.body(c.body)) for c in fit.changes},
        "armature": fit.armature_by_joint if fit.settings.fits_armature else None,
        "armature_prior": dict(zip(fit.joint_names, fit.armature_prior.tolist())),
        "friction": {j: None if law is None else {"law": law.name, **law.parameters()} for j, law in fit.friction.items()},
        "friction_unconstrained": fit.friction_ols,
        "body_changes": [vars(c) for c in fit.changes],
        "sensor_offsets": {j: float(fit.offsets[fit.joint_names.index(j)]) for j in fit.offset_joints},
        "payload": None if fit.payload_mass is None else {"mass": fit.payload_mass, "com": fit.payload_com.tolist()},  # type: ignore[union-attr]
        "validation": validation or {},
    }
