"""From logs to a friction law: processing, fits, presliding and the LuGre assembly."""

from __future__ import annotations

import math

from mbctl.dynamics.friction.laws import LuGre
from mbctl.errors import DataError, InputError
from mbctl.identification.fitting import fit_friction
from mbctl.identification.logs import ConstantSpeedLog, PreslidingLog
from mbctl.identification.presliding import fit_presliding
from mbctl.identification.processing import process_constant_speed
from mbctl.identification.report import IdentificationResult

__all__ = ["identify"]


def identify(
    log: ConstantSpeedLog,
    joint: str,
    law: str,
    *,
    delta: float | None = 2.0,
    settle_s: float = 0.2,
    asymmetric: bool = False,
    presliding: PreslidingLog | None = None,
    sigma1: float | None = None,
    robust: bool = True,
) -> IdentificationResult:
    """Identify the friction law ``law`` of ``joint`` from a constant-speed log (and a presliding log).

    For ``lugre`` the static part is the Stribeck fit with ``delta = 2``; ``sigma0``
    comes from the presliding cycle; ``sigma1`` from the presliding steps, else the
    value given, else the critical-damping prior ``2*sqrt(sigma0*J) - fv`` when the
    steps at least gave the presliding inertia ``J``.

    Raises:
        DataError: For logs that cannot give the law (too few speeds, no reverse runs, ...).
        InputError: For ``lugre`` without a usable presliding log.
    """
    processed = process_constant_speed(log, settle_s=settle_s, asymmetric=asymmetric)
    notes: list[str] = []
    try:
        fit = fit_friction(processed.points, law, delta=delta, robust=robust)
        forward = reverse = None
        if asymmetric:
            forward = fit_friction(processed.forward, law, delta=delta, robust=robust)
            reverse = fit_friction(processed.reverse, law, delta=delta, robust=robust)
            notes.append("mbctl's friction laws are symmetric: the table holds the fit of (u_f - u_r)/2; the per-direction fits are in the report")
    except DataError as exc:
        raise exc.located(file=log.source) from None
    if fit.at_bound:
        notes.append(f"{', '.join(fit.at_bound)} ended on a bound; consider a simpler law")
    pre = None
    if presliding is not None:
        pre = fit_presliding(presliding, fs=getattr(fit.law, "fs", fit.law.fc), fv=fit.law.fv)
    result_law = fit.law
    source = ""
    if law == "lugre":
        if pre is None:
            raise InputError("the lugre law needs sigma0 from a presliding test: give --presliding PRE.csv", field="--presliding")
        if not math.isfinite(pre.sigma0):
            raise DataError(f"sigma0 is not identifiable: {pre.notes[0] if pre.notes else 'no usable slow cycle'}", file=presliding.source)
        if pre.sigma1_identified:
            s1, source = pre.sigma1, "identified from the torque steps"
        elif sigma1 is not None:
            s1, source = sigma1, "given (--sigma1)"
        elif math.isfinite(pre.inertia) and pre.inertia > 0:
            s1 = max(2 * math.sqrt(pre.sigma0 * pre.inertia) - fit.law.fv, 0.0)
            source = "critical damping prior 2*sqrt(sigma0*J) - fv, NOT identified"
            notes.append(f"sigma1 not identifiable ({pre.sigma1_reason}); wrote the critical-damping prior")
        else:
            raise DataError(f"sigma1 is not identifiable ({pre.sigma1_reason}); give it with --sigma1", file=presliding.source)
        if s1 < 0:
            notes.append(f"sigma1 came out negative ({s1:.4g}); wrote 0")
            s1 = 0.0
        f = fit.law
        result_law = LuGre(fc=f.fc, fs=f.fs, vs=f.vs, fv=f.fv, sigma0=pre.sigma0, sigma1=s1)
    return IdentificationResult(
        joint=joint,
        law=result_law,
        fit=fit,
        processed=processed,
        forward=forward,
        reverse=reverse,
        presliding=pre,
        sigma1_source=source,
        notes=tuple(notes),
    )
