"""Identification results as text, JSON and a ``[joints.<name>.friction]`` TOML table.

The table goes into a *copy* of the robot TOML (:func:`write_robot_copy`): the
original text is kept line for line except the joint's friction, which is replaced
in place (an inline ``friction = {...}`` line, or the body of a
``[joints.<name>.friction]`` table) or appended as a new table; a relative ``urdf``
path is rewritten for the copy's directory. The result is parsed again and must
equal the original document with only that friction changed, and it must load as a
robot; otherwise nothing is written.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mbctl.config.actuator import OPTIONAL, REQUIRED, SERVO_FRICTION_LAWS
from mbctl.dynamics.actuator import SMOOTHING, STALL_PARAMETERS, ServoFirmware
from mbctl.dynamics.friction.laws import CoulombViscous, LuGre, Stribeck
from mbctl.dynamics.model.robot import RobotModel, load_robot
from mbctl.errors import ConfigError, InputError, MbctlError
from mbctl.fileio import atomic_output
from mbctl.identification.fitting import FrictionFit
from mbctl.identification.presliding import PreslidingFit
from mbctl.identification.processing import ProcessedLog
from mbctl.identification.servo import PARAMETERS, ServoFit
from mbctl.identification.servo_datasheet import MotorDataSheet

__all__ = ["IdentificationResult", "actuator_table", "check_copy_target", "friction_table", "format_report", "result_json", "servo_fit_lines", "servo_table_values", "write_robot_copy", "write_friction_file", "write_servo_robot_copy"]

ORDER = ("fc", "fs", "vs", "delta", "fv", "sigma0", "sigma1")


@dataclass(frozen=True)
class IdentificationResult:
    """Everything ``identify fit`` found for one joint.

    Attributes:
        joint: Joint name.
        law: The law written back (LuGre combines the static fit and the presliding one).
        fit: The static fit (symmetric).
        processed: The processed constant-speed log.
        forward, reverse: Per-direction fits (asymmetric option), else None.
        presliding: The presliding analysis, or None.
        sigma1_source: ``"identified"``, ``"critical damping prior"`` or ``"given"``.
        notes: Warnings for the user.
    """

    joint: str
    law: CoulombViscous | Stribeck | LuGre
    fit: FrictionFit
    processed: ProcessedLog
    forward: FrictionFit | None = None
    reverse: FrictionFit | None = None
    presliding: PreslidingFit | None = None
    sigma1_source: str = ""
    notes: tuple[str, ...] = ()


def _fmt(x: float) -> str:
    return repr(float(f"{x:.6g}"))


def friction_table(joint: str, law: CoulombViscous | Stribeck | LuGre, comment: str = "") -> str:
    """``[joints.<joint>.friction]`` with the law's parameters (6 significant digits)."""
    lines = [f"# {line}" for line in comment.splitlines()] if comment else []
    lines.append(f"[joints.{_key(joint)}.friction]")
    lines.append(f'law = "{law.name}"')
    params = law.parameters()
    for name in ORDER:
        if name in params:
            lines.append(f"{name} = {_fmt(params[name])}")
    return "\n".join(lines) + "\n"


def _inline(law: CoulombViscous | Stribeck | LuGre) -> str:
    params = law.parameters()
    body = ", ".join([f'law = "{law.name}"'] + [f"{k} = {_fmt(params[k])}" for k in ORDER if k in params])
    return "{ " + body + " }"


def _key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else '"' + name.replace('"', '\\"') + '"'


def _header_pattern(*parts: str) -> re.Pattern:
    keys = [rf"(?:{re.escape(p)}|\"{re.escape(p)}\"|'{re.escape(p)}')" for p in parts]
    return re.compile(r"^\s*\[\s*" + r"\s*\.\s*".join(keys) + r"\s*\]\s*(#.*)?$")


_ANY_HEADER = re.compile(r"^\s*\[")


def _replace_friction(text: str, joint: str, law: CoulombViscous | Stribeck | LuGre) -> str:
    """The TOML text with the joint's friction replaced (or added)."""
    return _replace_subtable(text, joint, "friction", friction_table(joint, law).splitlines(keepends=True)[1:], _inline(law))


def _replace_subtable(text: str, joint: str, key: str, body: list[str], inline: str) -> str:
    """The TOML text with ``joints.<joint>.<key>`` replaced (or added): ``body`` (lines) for a
    ``[joints.<joint>.<key>]`` table, ``inline`` for ``key = {...}`` in ``[joints.<joint>]``."""
    lines = text.splitlines(keepends=True)
    table_hdr = _header_pattern("joints", joint, key)
    joint_hdr = _header_pattern("joints", joint)
    for i, line in enumerate(lines):
        if table_hdr.match(line):
            end = next((k for k in range(i + 1, len(lines)) if _ANY_HEADER.match(lines[k])), len(lines))
            # keep trailing blank and comment lines of the old table for the next one
            body_end = end
            while body_end > i + 1 and (not lines[body_end - 1].strip() or lines[body_end - 1].lstrip().startswith("#")):
                body_end -= 1
            return "".join(lines[: i + 1] + body + lines[body_end:])
    for i, line in enumerate(lines):
        if joint_hdr.match(line):
            end = next((k for k in range(i + 1, len(lines)) if _ANY_HEADER.match(lines[k])), len(lines))
            for k in range(i + 1, end):
                if re.match(rf"^\s*{re.escape(key)}\s*=", lines[k]):
                    indent = lines[k][: len(lines[k]) - len(lines[k].lstrip())]
                    lines[k] = f"{indent}{key} = {inline}\n"
                    return "".join(lines)
            insert = end
            while insert > i + 1 and not lines[insert - 1].strip():
                insert -= 1
            lines.insert(insert, f"{key} = {inline}\n")
            return "".join(lines)
    tail = "" if text.endswith("\n") or not text else "\n"
    return text + tail + "\n" + f"[joints.{_key(joint)}.{key}]\n" + "".join(body)


def _rewrite_urdf(text: str, source: Path, target: Path) -> str:
    data = tomllib.loads(text)
    urdf = data.get("urdf")
    if not isinstance(urdf, str) or urdf.startswith("example-robot-data:") or Path(urdf).is_absolute():
        return text
    new = os.path.relpath((source.parent / urdf).resolve(), target.parent.resolve())
    if Path(new) == Path(urdf):
        return text
    pattern = re.compile(r"^(\s*urdf\s*=\s*)(\"[^\"]*\"|'[^']*')(.*)$", re.MULTILINE)
    if len(pattern.findall(text)) != 1:
        raise MbctlError("cannot locate the urdf line to rewrite for the copy")
    return pattern.sub(lambda m: f'{m.group(1)}"{new}"{m.group(3)}', text, count=1)


def write_robot_copy(config: Path, out: Path, joint: str, law: CoulombViscous | Stribeck | LuGre, *, force: bool = False) -> list[str]:
    """Write ``config`` with the joint's friction replaced by ``law`` to ``out``; returns warnings.

    Raises:
        InputError: If ``out`` is ``config`` itself, exists (without ``force``), or the
            copy would not be valid.
    """
    check_copy_target(config, out, force)
    text = config.read_text()
    original = tomllib.loads(text)
    warnings = []
    old = original.get("joints", {}).get(joint, {}).get("friction")
    if isinstance(old, dict) and "load" in old:
        warnings.append(f"joints.{joint}.friction.load dropped: the identified parameters are torques at the test's load, not coefficients")

    def edit(document: dict) -> None:
        document.setdefault("joints", {}).setdefault(joint, {})["friction"] = {"law": law.name, **{k: float(_fmt(v)) for k, v in law.parameters().items()}}

    _write_edited_copy(config, out, text, _replace_friction(text, joint, law), edit, f"friction of {joint}", "the identified friction")
    return warnings


def check_copy_target(config: Path, out: Path, force: bool) -> None:
    """Refuse to write a robot TOML's copy ``out``: if it is ``config`` itself, or if it exists
    (without ``force``).

    Raises:
        InputError: Naming ``out``.
    """
    if out.exists() and out.resolve() == config.resolve():
        raise InputError("will not overwrite the robot's own TOML; write the copy elsewhere", file=out)
    if out.exists() and not force:
        raise InputError("exists; choose another file or pass --force", file=out)


def _write_edited_copy(config: Path, out: Path, text: str, new_text: str, edit, what: str, new: str) -> None:
    """Write ``new_text`` (``text`` edited) to ``out`` atomically, if it parses to the document
    ``edit`` makes of ``text`` (nothing else changed) and the robot it describes loads."""
    new_text = _rewrite_urdf(new_text, config, out)
    try:
        parsed = tomllib.loads(new_text)
    except tomllib.TOMLDecodeError as exc:
        raise MbctlError(f"the edited copy of {config} is not valid TOML ({exc}); table not written") from None
    expected = tomllib.loads(text)
    edit(expected)
    expected["urdf"] = parsed.get("urdf")
    if parsed != expected:
        raise MbctlError(f"could not edit {config} safely ({what} defined in an unusual way); use the printed table instead")
    with atomic_output(out) as tmp:
        tmp.write_text(new_text)
        try:
            load_robot(tmp)
        except ConfigError as exc:
            raise InputError(f"the copy with {new} does not load: {exc.reason}", file=out, field=exc.field) from None


# the order of the fields of a written [joints.<name>.actuator] table: the order the config lists them
ACTUATOR_ORDER = (*REQUIRED, *OPTIONAL)
SERVO_FRICTION_ORDER = tuple(dict.fromkeys(name for names in SERVO_FRICTION_LAWS.values() for name in names))


def actuator_table(joint: str, values: dict[str, float], law: str, friction: dict[str, float], comment: str = "") -> str:
    """``[joints.<joint>.actuator]`` with the servo's ``values`` (motor, firmware, armature) and
    its friction ``law`` with parameters (6 significant digits)."""
    lines = [f"# {line}" for line in comment.splitlines()] if comment else []
    lines.append(f"[joints.{_key(joint)}.actuator]")
    lines += [f"{name} = {_fmt(values[name])}" for name in ACTUATOR_ORDER if name in values]
    lines.append(f"friction = {_servo_friction_inline(law, friction)}")
    return "\n".join(lines) + "\n"


def _servo_friction(friction: dict[str, float]) -> dict[str, float]:
    """The friction parameters a written table holds (other keys dropped), in table order."""
    return {k: friction[k] for k in SERVO_FRICTION_ORDER if k in friction}


def _servo_friction_inline(law: str, friction: dict[str, float]) -> str:
    return "{ " + ", ".join([f'law = "{law}"'] + [f"{k} = {_fmt(v)}" for k, v in _servo_friction(friction).items()]) + " }"


def write_servo_robot_copy(config: Path, out: Path, joint: str, values: dict[str, float], law: str, friction: dict[str, float], *, force: bool = False) -> None:
    """Write ``config`` with ``[joints.<joint>.actuator]`` replaced (or added) to ``out``: the
    table of :func:`actuator_table`; every other line unchanged.

    Raises:
        InputError: If ``out`` is ``config`` itself, exists (without ``force``), or the copy
            would not be valid.
    """
    check_copy_target(config, out, force)
    text = config.read_text()
    body = actuator_table(joint, values, law, friction).splitlines(keepends=True)[1:]
    inline = "{ " + ", ".join([f"{k} = {_fmt(values[k])}" for k in ACTUATOR_ORDER if k in values] + [f"friction = {_servo_friction_inline(law, friction)}"]) + " }"

    def edit(document: dict) -> None:
        table = {k: float(_fmt(values[k])) for k in ACTUATOR_ORDER if k in values}
        table["friction"] = {"law": law, **{k: float(_fmt(v)) for k, v in _servo_friction(friction).items()}}
        document.setdefault("joints", {}).setdefault(joint, {})["actuator"] = table

    _write_edited_copy(config, out, text, _replace_subtable(text, joint, "actuator", body, inline), edit, f"actuator of {joint}", "the identified servo")


def write_friction_file(out: Path, text: str, *, force: bool = False) -> None:
    """Write a standalone friction table (refuses to overwrite without ``force``)."""
    if out.exists() and not force:
        raise InputError("exists; choose another file or pass --force", file=out)
    with atomic_output(out) as tmp:
        tmp.write_text(text)


def _param_lines(fit: FrictionFit) -> list[str]:
    out = []
    for name in fit.names:
        lo, hi = fit.ci[name]
        out.append(f"  {name:6s} = {fit.values[name]:.6g}  +- {fit.stderr[name]:.3g}  ({100 * fit.confidence:.0f} % CI {lo:.6g} .. {hi:.6g})")
    for name, value in fit.fixed.items():
        out.append(f"  {name:6s} = {value:.6g}  (fixed)")
    return out


def format_report(r: IdentificationResult) -> str:
    """The text summary ``identify fit`` prints."""
    p = r.processed
    lines = [f"joint {r.joint}: {len(p.points)} speeds ({p.points.speed.min():.4g} .. {p.points.speed.max():.4g}), "
             f"{len(p.segments)} constant-speed segments, encoder resolution {p.resolution:.3g}"]
    for d in p.dropped:
        lines.append(f"  dropped: t = {d.t0:.3f} .. {d.t1:.3f} s at {d.speed:+.4g}: {d.reason}")
    f = r.fit
    down = int((f.weights < 1).sum())
    lines.append(f"{f.law.name} fit: residual rms {f.residual_rms:.3g}, chi2/dof {f.chi2_red:.3g} ({f.dof} dof), "
                 f"{down} point{'' if down == 1 else 's'} down-weighted{'' if f.found else ', NOT CONVERGED: ' + f.message}")
    lines += _param_lines(f)
    if f.at_bound:
        lines.append(f"  on a bound: {', '.join(f.at_bound)} (its uncertainty is not reliable)")
    for label, fd in (("forward", r.forward), ("reverse", r.reverse)):
        if fd is not None:
            lines.append(f"{label} direction ({fd.law.name}):")
            lines += _param_lines(fd)
    if len(p.gravity.q):
        lines.append(f"gravity profile: {len(p.gravity.q)} points over {p.gravity.q.min():.4g} .. {p.gravity.q.max():.4g}, "
                     f"{p.gravity.tau.min():.4g} .. {p.gravity.tau.max():.4g}")
    if r.presliding is not None:
        ps = r.presliding
        if ps.breakaway is not None and math.isfinite(ps.breakaway.value):
            b = ps.breakaway
            se = f" +- {b.stderr:.3g}" if math.isfinite(b.stderr) else ""
            lines.append(f"break-away torque {b.value:.6g}{se} (ramps at {', '.join(f'{x:.3g}' for x in b.rates)}/s, extrapolated to rate 0)")
        if math.isfinite(ps.sigma0):
            lines.append(f"sigma0 = {ps.sigma0:.6g} +- {ps.sigma0_stderr:.3g} (slow cycle, {ps.cycle.counts:.0f} encoder counts)")
        if ps.sigma1_identified:
            lines.append(f"sigma1 = {ps.sigma1:.6g} +- {ps.sigma1_stderr:.3g} (torque steps; presliding inertia {ps.inertia:.4g})")
        for note in ps.notes:
            lines.append(f"  {note}")
    if isinstance(r.law, LuGre):
        lines.append(f"sigma1 written: {r.law.sigma1:.6g} ({r.sigma1_source})")
    for note in r.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def result_json(r: IdentificationResult) -> dict:
    """The JSON summary."""
    p = r.processed
    out = {
        "joint": r.joint,
        "law": r.law.name,
        "parameters": r.law.parameters(),
        "fit": r.fit.summary(),
        "points": {
            "speed": p.points.speed.tolist(),
            "friction": p.points.friction.tolist(),
            "stderr": p.points.stderr.tolist(),
            "spread": p.points.spread.tolist(),
            "bins": p.points.bins.tolist(),
        },
        "dropped": [{"t0": d.t0, "t1": d.t1, "speed": d.speed, "reason": d.reason} for d in p.dropped],
        "gravity_profile": {"q": p.gravity.q.tolist(), "tau": p.gravity.tau.tolist()},
        "encoder_resolution": p.resolution,
        "sigma1_source": r.sigma1_source,
        "notes": list(r.notes),
    }
    if r.forward is not None and r.reverse is not None:
        out["forward"] = r.forward.summary()
        out["reverse"] = r.reverse.summary()
    if r.presliding is not None:
        out["presliding"] = r.presliding.summary()
    return _finite(out)


def _finite(x: object) -> object:
    """NaN and inf become null (JSON has neither)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def servo_table_values(robot: RobotModel, joint: str, parameters: Mapping[str, float], firmware: ServoFirmware) -> dict[str, float]:
    """The numbers of ``joint``'s ``[joints.<name>.actuator]`` table after a servo fit: the fitted
    motor, armature and stall ``parameters`` (SI: N·m/A, ohm, kg·m², A, ohm, N·m) over the firmware
    settings of the robot's existing table, else of ``firmware`` (the logs' servo)."""
    spec = robot.spec.joints.get(joint) if robot.spec is not None else None
    if spec is not None and spec.actuator is not None:
        firmware = {k: v for k, v in spec.actuator.values.items() if k not in ("kt", "R", "armature")}
    else:
        m = firmware
        firmware = {"vin": m.vin, "kp": m.kp, "divisor": m.divisor, "pwm_limit": m.pwm_limit, "pwm_max": m.pwm_max, "counts": float(m.counts)}
        if m.current_limit is not None:
            firmware["current_limit"] = m.current_limit
        if m.supply_resistance:
            firmware["supply_resistance"] = m.supply_resistance
        if m.torque_saturation is not None:
            firmware["torque_saturation"] = m.torque_saturation
        if m.friction_smoothing != SMOOTHING:
            firmware["friction_smoothing"] = m.friction_smoothing
    return {**firmware, **{k: parameters[k] for k in ("kt", "R", "armature", *STALL_PARAMETERS) if k in parameters}}


def servo_fit_lines(fit: ServoFit, stall: str, datasheet: MotorDataSheet | None, bounds: Mapping[str, tuple[float, float]]) -> list[str]:
    """The report of a servo fit, a line each: the stall model chosen (``stall``, the reason), the
    data sheet's checks, every parameter with its standard error and whether it is held or at a
    bound, the current limit, and the mean position errors (mrad) of the fitted and held-out logs."""
    lines = [f"  stall: {stall}"] if stall else []
    if datasheet is not None:
        low, high = datasheet.torque_constant_range
        inside = "inside" if low <= fit.parameters["kt"] <= high else "OUTSIDE"
        lines.append(
            f"  {datasheet.name} data sheet: R held at its stall resistance {datasheet.resistance:.3g} ohm "
            f"(V/I {datasheet.resistances.min():.3g}-{datasheet.resistances.max():.3g}); kt {fit.parameters['kt']:.3g} N m/A is {inside} its {low:.3g}-{high:.3g} N m/A"
        )
    for name, value in fit.parameters.items():
        lo, hi = bounds.get(name, PARAMETERS[name][:2]) if name != "R" or datasheet is None else (value, value)
        where = "held" if lo == hi else "AT ITS BOUND" if value in (lo, hi) else ""
        lines.append(f"  {name:<17} = {value:<10.5g} +- {fit.standard_errors[name]:.2g} {PARAMETERS[name][3]}" + (f" ({where})" if where else ""))
    if "current_limit" in fit.unidentified:
        lines.append(f"  current_limit not reached in the logs (largest simulated current {fit.unidentified['current_limit']:.3g} A): "
                     "not identified, fitted without it; a log where the servo stalls below its goal shows it")  # fmt: skip
    elif fit.limited:
        lines.append("  at the current limit: " + ", ".join(f"{name} {100 * share:.0f} %" for name, share in fit.limited.items()))
    for label, errors in (("fitted", fit.train_mae), ("held out", fit.validation_mae)):
        lines += [f"  {label:<8} {name}: mean |error| {mae * 1e3:.1f} mrad" for name, mae in errors.items()]
        if errors:
            lines.append(f"  {label:<8} mean: {sum(errors.values()) / len(errors) * 1e3:.1f} mrad")
    return lines
