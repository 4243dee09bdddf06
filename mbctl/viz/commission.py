"""The commissioning report as a page: ``report.html`` with three figures beside it.

- ``friction.png``: per joint, the measured friction points (±2 standard errors), the fitted law with
  its 95 % band and the nominal law (dashed), friction (N·m, N) against speed (rad/s, m/s);
- ``base_parameters.png``: the base parameters of the nominal model, of the identified one (the
  physically consistent fit) and of the unconstrained fit with ±2 standard errors, each relative to
  the larger magnitude of nominal and identified;
- ``validation.png``: torque prediction RMS (N·m, N) and tracking RMS (rad, m) per joint, nominal
  and identified model, on the validation run.

Everything is drawn from ``report.json`` (:func:`mbctl.identification.commission.report.report_data`),
so a resumed report needs no earlier Python objects.
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from mbctl.fileio import atomic_output
from mbctl.viz.figures import new_figure, panels, save_figure

__all__ = ["draw_report"]


def draw_report(out: Path, report: dict) -> list[Path]:
    """Write ``out/report.html`` and its figures; returns the files written."""
    steps = report["steps"]
    figures = []
    if "friction" in steps:
        figures.append(_friction(out / "friction.png", steps["friction"]))
    if "identify" in steps:
        figures.append(_base(out / "base_parameters.png", steps["identify"]))
    if "verify" in steps:
        figures.append(_validation(out / "validation.png", steps["verify"]))
    page = out / "report.html"
    with atomic_output(page) as tmp:
        tmp.write_text(_page(report, figures))
    return [*figures, page]


def _law(entry: dict | None, v: np.ndarray) -> np.ndarray | None:
    """Steady friction of a law's JSON parameters at speeds ``v`` > 0 (Stribeck form; Coulomb-viscous without ``fs``)."""
    if entry is None:
        return None
    fc, fv = entry.get("fc", 0.0), entry.get("fv", 0.0)
    fs, vs, delta = entry.get("fs", fc), entry.get("vs", 1.0), entry.get("delta", 2.0)
    return fc + (fs - fc) * np.exp(-np.abs(v / vs) ** delta) + fv * v


def _friction(path: Path, friction: dict) -> Path:
    joints = friction["joints"]
    fig, axes = panels(len(joints), f"friction ({friction['law']}), measured on each joint")
    for ax, (name, j) in zip(axes, joints.items()):
        c, p = j["curve"], j["points"]
        v = np.array(c["speed"])
        F, band = np.array(c["friction"]), np.array(c["band"])
        ax.fill_between(v, F - band, F + band, color="C0", alpha=0.25, lw=0, label=f"{100 * c['confidence']:.0f} % band")
        ax.plot(v, F, color="C0", label="fit")
        nominal = _law(j.get("nominal"), v)
        if nominal is not None:
            ax.plot(v, nominal, "--", color="C3", label="nominal")
        ax.errorbar(p["speed"], p["friction"], yerr=2 * np.array(p["stderr"]), fmt="o", ms=3, color="k", label="measured ±2 se")
        ax.set_xscale("log")
        ax.set_title(name)
        ax.set_xlabel("speed [rad/s, m/s]")
        ax.set_ylabel("friction [N·m, N]")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    return save_figure(fig, path)


def _base(path: Path, identify: dict) -> Path:
    fit = identify["fit"]
    b = fit["base_parameters"]
    names = b["names"]
    num = lambda xs: np.array([np.nan if x is None else x for x in xs], dtype=float)  # noqa: E731
    cons, ols, se = (num(b[k]) for k in ("consistent", "unconstrained", "unconstrained_stderr"))
    nominal = num(identify.get("base_parameters_nominal", [np.nan] * len(names)))
    scale = np.maximum(np.fmax(np.abs(nominal), np.abs(cons)), 1e-12)
    fig = new_figure((max(6.0, 0.32 * len(names) + 2), 3.8))
    ax = fig.subplots()
    x = np.arange(len(names))
    ax.bar(x - 0.27, nominal / scale, 0.27, label="nominal", color="C3")
    ax.bar(x, cons / scale, 0.27, label="identified (consistent, written)", color="C0")
    ax.bar(x + 0.27, ols / scale, 0.27, yerr=2 * se / scale, label="unconstrained ±2 se", color="C7", error_kw={"lw": 0.8})
    ax.set_xticks(x, names, rotation=90, fontsize="x-small")
    ax.set_ylabel("relative to the larger of nominal, identified")
    ax.set_title(f"base parameters ({len(names)}), condition number {fit['condition_number']:.3g}")
    ax.axhline(0, color="k", lw=0.6)
    ax.legend(fontsize="small")
    return save_figure(fig, path)


def _validation(path: Path, verify: dict) -> Path:
    names = list(verify["joints"])
    rows = verify["joints"]
    fig = new_figure((max(7.0, 1.2 * len(names) + 3), 3.6))
    ax_t, ax_q = fig.subplots(1, 2)
    x = np.arange(len(names))
    for ax, key, unit in ((ax_t, "torque_rms", "N·m, N"), (ax_q, "tracking_rms", "rad, m")):
        ax.bar(x - 0.2, [rows[n][f"{key}_nominal"] for n in names], 0.4, label="nominal", color="C3")
        ax.bar(x + 0.2, [rows[n][f"{key}_identified"] for n in names], 0.4, label="identified", color="C0")
        ax.set_xticks(x, names, rotation=30, ha="right", fontsize="small")
        ax.set_yscale("log")
        ax.set_ylabel(f"{key.replace('_', ' ')} [{unit}]")
        ax.grid(alpha=0.3, axis="y")
    ax_t.set_title("torque prediction")
    ax_q.set_title("computed-torque tracking")
    ax_t.legend(fontsize="small")
    fig.suptitle(verify["verdict"], fontsize="small")
    return save_figure(fig, path)


def _cell(x: object) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return html.escape(str(x))


def _table(header: list[str], rows: list[list[object]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _page(report: dict, figures: list[Path]) -> str:
    steps = report["steps"]
    parts = [f"<h1>Commissioning of {html.escape(report['robot'])}</h1>",
             f"<p>{html.escape(report['config'])}; backend {html.escape(str(report['backend'].get('drives', '')))}; "
             f"arm time {report['arm_time_s']:.1f} s</p>",
             f"<p><b>{html.escape(report['verdict'])}</b></p>",
             f"<p>Use it: <code>{html.escape(report['use'])}</code></p>"]
    if "verify" in steps:
        rows = [[n, r["torque_rms_nominal"], r["torque_rms_identified"], r["torque_ratio"], r["tracking_rms_nominal"], r["tracking_rms_identified"], r["tracking_ratio"]]
                for n, r in steps["verify"]["joints"].items()]
        parts += ["<h2>Validation (a trajectory not used for fitting)</h2>",
                  _table(["joint", "torque RMS nominal", "identified", "ratio", "tracking RMS nominal", "identified", "ratio"], rows)]
    if "friction" in steps:
        rows = []
        for n, j in steps["friction"]["joints"].items():
            ci = j["fit"]["ci"]
            rows.append([n, j["law"], ", ".join(f"{k} {v:.4g}" + (f" [{ci[k][0]:.4g}, {ci[k][1]:.4g}]" if k in ci and None not in ci[k] else "")
                                                 for k, v in j["parameters"].items() if k != "delta")])
        parts += ["<h2>Friction (95 % confidence intervals)</h2>", _table(["joint", "law", "parameters"], rows)]
    if "identify" in steps:
        fit = steps["identify"]["fit"]
        rows = [[c["body"], c["mass_prior"], c["mass"], 1e3 * c["com_shift"], c["inertia_change"]] for c in fit["body_changes"]]
        parts += [f"<h2>Inertials ({html.escape(steps['identify']['friction'])})</h2>",
                  _table(["body", "mass nominal [kg]", "identified [kg]", "com shift [mm]", "inertia change"], rows)]
    if "preflight" in steps:
        pre = steps["preflight"]
        hold, backend = pre["hold"], pre["backend"]
        parts += ["<h2>Pre-flight</h2>",
                  f"<p>rate {backend.get('rate_hz', 0):g} Hz ({html.escape(str(backend.get('rate_from', '')))}); start pose from "
                  f"{html.escape(str(pre.get('start_from', '')))}; hold test: {html.escape(hold['summary']['stop_reason'])}, bound {hold['bound']:g}; "
                  f"sensing: {html.escape(str(backend.get('sensing', '')))}</p>",
                  _table(["joint", "start", "max drift"], [[n, pre["start"].get(n, ""), d] for n, d in hold["max_drift"].items()])]
    parts += [f'<p><img src="{html.escape(p.name)}" alt="{html.escape(p.stem)}"></p>' for p in figures]
    style = "body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}img{max-width:100%}"
    return f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>commissioning {html.escape(report['robot'])}</title><style>{style}</style></head><body>{''.join(parts)}</body></html>\n"
