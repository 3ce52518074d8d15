"""Writes a :class:`~.suite.SuiteResult` as ``report.md``, PNG plots and ``results.json``.

matplotlib is imported lazily (only when plots are written); without it the report is written
with the tables alone and says so.
"""

import datetime
import json
import math
import os
import platform
from typing import Dict, List, Optional

import numpy as np

from .suite import AlignmentResult, ColourMatchingResult, FrequencyMatchingResult, SuiteResult

__all__ = ["write_report", "score_table", "to_json"]

_DPI = 80


def _save(fig, path: str, plt) -> None:
    """Save a figure as a PNG with a 256-colour palette (about a third of the size)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, dpi=_DPI, format="png")
    plt.close(fig)
    try:
        from PIL import Image
    except ImportError:
        with open(path, "wb") as f:
            f.write(buf.getvalue())
        return
    buf.seek(0)
    with Image.open(buf) as im:
        im.convert("RGB").quantize(colors=256).save(path, optimize=True)


def _fmt(v: float, digits: int = 3) -> str:
    return "n/a" if v is None or not np.isfinite(v) else f"{v:.{digits}f}"


class _Plots:
    """The three pyplot calls the plots use, on matplotlib's object-oriented API: figures drawn by
    the Agg canvas directly, so that nothing here changes matplotlib's process-wide backend or
    pyplot's figure registry (the report may be written from a program that plots itself)."""

    def __init__(self):
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self._colormaps, self._figure, self._canvas = matplotlib.colormaps, Figure, FigureCanvasAgg

    def subplots(self, nrows, ncols, figsize, squeeze=True):
        fig = self._figure(figsize=figsize)
        self._canvas(fig)
        return fig, fig.subplots(nrows, ncols, squeeze=squeeze)

    def get_cmap(self, name):
        return self._colormaps[name]

    def close(self, fig):
        pass  # not registered with pyplot: nothing to release


def _load_pyplot():
    try:
        return _Plots()
    except ImportError:
        return None


# --------------------------------------------------------------------------------------------
# Plots


def _log_ticks(ax, axis: str, lo: float, hi: float):
    """Label a log10-coordinate axis with the values themselves."""
    import matplotlib.ticker as mt

    def fmt(v, _pos):
        x = 10.0**v
        return f"{x:.3g}"

    span = hi - lo
    step = 1.0 if span > 2.5 else (0.5 if span > 1.2 else 0.25)
    ticks = np.arange(math.floor(lo / step) * step, hi + 1e-9, step)
    ticks = ticks[(ticks >= lo - 1e-9) & (ticks <= hi + 1e-9)]
    getattr(ax, f"set_{axis}ticks")(ticks)
    getattr(ax, f"{axis}axis").set_major_formatter(mt.FuncFormatter(fmt))


def _percentile_field(d: np.ndarray) -> np.ndarray:
    """The responses as their rank percentile in [0, 1] (contours of it are iso-response lines of
    the metric, whatever its scale)."""
    from .scoring import rankdata

    flat = d.ravel()
    ok = np.isfinite(flat)
    out = np.full(flat.shape, np.nan)
    if ok.sum() > 1:
        out[ok] = (rankdata(flat[ok]) - 1.0) / (ok.sum() - 1.0)
    return out.reshape(d.shape)


def plot_alignment(res: AlignmentResult, path: str, plt) -> None:
    names = list(res.responses)
    n = max(1, len(names))
    masking = res.key.startswith("masking")
    fig, axes = plt.subplots(2, n, figsize=(3.1 * n, 5.6), squeeze=False)
    lx = np.log10(res.x)
    X = np.broadcast_to(lx[:, None], res.contrast.shape)
    # Detection: sensitivity 1/c on the y axis (as in the paper); masking: target contrast.
    yval = (lambda c: np.log10(c)) if masking else (lambda c: -np.log10(c))
    Y = yval(res.contrast)
    keep = (res.curve_x >= res.x.min() * 0.999) & (res.curve_x <= res.x.max() * 1.001)
    cx, cy = np.log10(res.curve_x[keep]), yval(res.curve_c[keep])
    t_at = np.interp(lx, np.log10(res.curve_x), np.log10(res.curve_c))
    for j, name in enumerate(names):
        ax = axes[0, j]
        d = res.responses[name]
        field = _percentile_field(d)
        if np.isfinite(field).sum() >= 4 and res.contrast.shape[0] >= 2 and res.contrast.shape[1] >= 2:
            ax.contourf(X, Y, field, levels=np.linspace(0, 1, 11), cmap="magma", alpha=0.9)
            ax.contour(X, Y, field, levels=np.linspace(0.1, 0.9, 9), colors="white", linewidths=0.6)
        ax.plot(cx, cy, color="#00c000", lw=2.0, label=res.reference_label)
        for kk, ls in ((res.k.min(), ":"), (res.k.max(), ":")):
            ax.plot(lx, yval(10.0**t_at / kk), color="#00c000", lw=1.0, ls=ls)
        ax.set_title(f"{name}  AS = {_fmt(res.scores[name])}", fontsize=9)
        ax.set_xlim(lx.min(), lx.max())
        y_lo, y_hi = min(Y.min(), cy.min()), max(Y.max(), cy.max())
        ax.set_ylim(y_lo, y_hi)
        _log_ticks(ax, "x", lx.min(), lx.max())
        _log_ticks(ax, "y", y_lo, y_hi)
        ax.tick_params(labelsize=7)
        ax.set_xlabel(res.x_label, fontsize=8)
        if j == 0:
            ax.set_ylabel("target contrast" if masking else "sensitivity 1/c", fontsize=8)
            ax.legend(fontsize=6, loc="lower left" if not masking else "upper left")
        # Bottom row: response vs x, one line per k (ideal: flat, ordered by k).
        ax2 = axes[1, j]
        cmap = plt.get_cmap("viridis")
        positive = np.all(d[np.isfinite(d)] > 0)
        for i_k, kk in enumerate(res.k):
            col = cmap(i_k / max(1, len(res.k) - 1))
            ax2.plot(lx, d[:, i_k], color=col, lw=1.0, label=f"k={kk:.2g}" if i_k in (0, len(res.k) - 1) else None)
        if positive:
            ax2.set_yscale("log")
        _log_ticks(ax2, "x", lx.min(), lx.max())
        ax2.tick_params(labelsize=7)
        ax2.set_xlabel(res.x_label, fontsize=8)
        if j == 0:
            ax2.set_ylabel("metric response D", fontsize=8)
            ax2.legend(fontsize=6)
    fig.suptitle(
        res.title
        + (
            "  (contours: iso-response of the metric; green: "
            + res.reference_label
            + " threshold, dotted: k = 0.5 and 2)"
        ),
        fontsize=8,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    _save(fig, path, plt)


def plot_frequency_matching(res: FrequencyMatchingResult, path: str, plt) -> None:
    names = list(res.matches)
    n = max(1, len(names))
    fig, axes = plt.subplots(1, n, figsize=(3.1 * n, 3.3), squeeze=False)
    cmap = plt.get_cmap("plasma")
    for j, name in enumerate(names):
        ax = axes[0, j]
        for i in range(len(res.reference_contrasts)):
            col = cmap(i / max(1, len(res.reference_contrasts)))
            ax.plot(res.frequencies, res.human[i], ls="--", marker="o", ms=2.5, color=col, lw=0.8)
            ax.plot(res.frequencies, res.matches[name][i], ls="-", marker="s", ms=2.5, color=col, lw=1.2, mfc="none")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(8e-4, 1.2)
        ax.set_title(f"{name}  RMSE = {_fmt(res.scores[name])}  (no root: {res.no_root[name]})", fontsize=8)
        ax.set_xlabel("test frequency (cpd)", fontsize=8)
        ax.tick_params(labelsize=7)
        if j == 0:
            ax.set_ylabel("matching contrast", fontsize=8)
            ax.plot([], [], "k--o", ms=2.5, label="human")
            ax.plot([], [], "k-s", ms=2.5, mfc="none", label="metric")
            ax.legend(fontsize=6, loc="lower left")
    fig.suptitle(res.title + " — one colour per reference contrast", fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    _save(fig, path, plt)


def plot_colour_matching(res: ColourMatchingResult, path: str, plt) -> None:
    names = list(res.equivalents)
    n = max(1, len(names))
    fig, axes = plt.subplots(1, n, figsize=(3.1 * n, 3.3), squeeze=False)
    colours = {"rg": "#d62728", "yv": "#7b3fb8"}
    for j, name in enumerate(names):
        ax = axes[0, j]
        ax.plot(res.contrasts, res.contrasts, "k--", lw=0.8, label="equal response (target)")
        for d in ("rg", "yv"):
            ax.plot(res.contrasts, res.equivalents[name][d], "-o", ms=3, color=colours[d], label=d.upper())
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(8e-4, 1.2)
        ax.set_title(f"{name}  RMSE = {_fmt(res.scores[name])}  (no root: {res.no_root[name]})", fontsize=8)
        ax.set_xlabel("chromatic contrast (scaled DKL)", fontsize=8)
        ax.tick_params(labelsize=7)
        if j == 0:
            ax.set_ylabel("achromatic contrast, same response", fontsize=8)
            ax.legend(fontsize=6, loc="upper left")
    fig.suptitle(res.title, fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    _save(fig, path, plt)


_PLOTTERS = {
    "alignment": plot_alignment,
    "frequency_matching": plot_frequency_matching,
    "colour_matching": plot_colour_matching,
}


# --------------------------------------------------------------------------------------------
# Tables and text


def _metric_names(suite: SuiteResult) -> List[str]:
    return [name for name, _ in suite.metrics]


def score_table(suite: SuiteResult) -> str:
    """The markdown table of scores: one row per test, one column per metric."""
    names = _metric_names(suite)
    lines = ["| test | score | reference | " + " | ".join(names) + " |", "|---|---|---|" + "---|" * len(names)]
    for res in suite.results:
        if res.kind == "alignment":
            what, ref = "AS ↑", res.reference_label
        elif res.kind == "frequency_matching":
            what, ref = "RMSE ↓", "human matches"
        else:
            what, ref = "RMSE ↓", "equal response"
        best = _best(res, names)
        cells = []
        for n in names:
            v = res.scores.get(n)
            s = _fmt(v)
            if n == best and len(names) > 1:
                s = f"**{s}**"
            if res.kind != "alignment" and res.no_root.get(n):
                s += f" ({res.no_root[n]} nr)"
            cells.append(s)
        lines.append(f"| {res.title} | {what} | {ref} | " + " | ".join(cells) + " |")
    for label, pred in (
        ("mean AS, detection", lambda r: r.kind == "alignment" and r.key.startswith("detection")),
        ("mean AS, masking", lambda r: r.kind == "alignment" and r.key.startswith("masking")),
    ):
        rows = [r for r in suite.results if pred(r)]
        if rows:
            means = [np.nanmean([r.scores[n] for r in rows]) if rows else float("nan") for n in names]
            lines.append(f"| *{label} ({len(rows)} tests)* | AS ↑ | | " + " | ".join(_fmt(m) for m in means) + " |")
    return "\n".join(lines)


def _best(res, names) -> Optional[str]:
    vals = {n: res.scores.get(n) for n in names if res.scores.get(n) is not None and np.isfinite(res.scores.get(n))}
    if not vals:
        return None
    return max(vals, key=vals.get) if res.kind == "alignment" else min(vals, key=vals.get)


def _json_ready(v):
    if isinstance(v, np.ndarray):
        return [_json_ready(x) for x in v.tolist()] if v.dtype != object else [_json_ready(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _json_ready(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_ready(x) for x in v]
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return f if math.isfinite(f) else None
    if isinstance(v, np.integer):
        return int(v)
    return v


def to_json(suite: SuiteResult) -> Dict:
    """Every number of the run (responses, matches, scores) as JSON-ready data."""
    from dataclasses import asdict

    out = {
        "settings": asdict(suite.settings),
        "metrics": suite.metrics,
        "notes": suite.notes,
        "device": suite.device,
        "seconds": suite.seconds,
        "metric_seconds": suite.metric_seconds,
        "metric_calls": suite.metric_calls,
        "tests": [],
    }
    for r in suite.results:
        out["tests"].append({k: getattr(r, k) for k in r.__dataclass_fields__})
    return _json_ready(out)


_INPUT_TEXT = """\
**From absolute luminance to the metric's input** (protocol §1). Each stimulus is built in
absolute units: a D65 background of luminance L_b (cd/m²) in DKL, plus `c · L_b · pattern ·
direction`, converted DKL → LMS (CIE 2006) → XYZ → linear BT.709 RGB in cd/m². The display model
divides by the test's peak luminance Y_peak, clips to [0, 1] and applies the sRGB OETF. LDR-FLIP,
PSNR, SSIM and HyAB receive these display-encoded frames (float32, N×3×H×W, no 8-bit
quantisation), LDR-FLIP with `input_space="srgb"`, `eps=0` and the test's pixels per degree, so
FLIP decodes them back to the same linear values relative to Y_peak: **absolute luminance reaches
LDR-FLIP only as a fraction of the display peak** (L_b = 21.4 cd/m² on a 100 cd/m² display is
linear 0.214). HDR-FLIP (when present) receives the linear BT.709 values divided by Y_peak,
negatives clipped to 0 and no upper clip. The reference is the stimulus without the target (the
uniform background, or the masker alone) and the test adds the target. Each metric's score is
the mean over the image of its map (LDR-FLIP: mean of the error map), −PSNR, 1 − SSIM, or the
mean HyAB distance, so that larger always means more different."""

_SCORE_TEXT = """\
**Scores** (protocol §3). *Alignment score* (detection and masking): for each swept x the
threshold c_T(x) comes from the reference table (castleCSF or human data, log–log interpolation),
stimuli are shown at c = c_T(x)/k for k = logspace(log10 0.5, log10 2, n_k), and
AS = −Spearman(k, D) over all (x, k) cells: 1 when the metric's response depends on k alone (its
iso-response contours follow the human threshold curve), 0 for no relation. *Matching RMSE*
(lower is better): across spatial frequency, the contrast at each test frequency whose response
equals the 5 cpd standard's at each reference contrast (root-found on log10 c in [−3, 0]),
against the human matches, as the RMSE of log10 contrast over all cells; across colour
directions, the achromatic contrast giving the same response as each chromatic contrast,
RMSE of log10(c_ach / c). "nr" counts cells with no root in the bracket (the bracket end is
recorded). Note on the AS ceiling: a metric whose responses are *exactly* a function of k scores
1, but one that equals a function of k up to tiny numerical noise breaks the ties between the x
values at random and scores sqrt(n_x²(n_k² − 1) / (n_x²n_k² − 1)): 0.995 on the 20 × 10 grid,
0.980 on the quick 7 × 5 grid; differences in the third decimal near 1 mean nothing."""


def write_report(
    suite: SuiteResult,
    out_dir: str,
    title: str = "FLIP through the lenses of low-level vision",
    command: Optional[str] = None,
    plots: bool = True,
) -> str:
    """Write ``report.md``, one PNG per test and ``results.json`` into ``out_dir``; returns the
    report's path."""
    os.makedirs(out_dir, exist_ok=True)
    plt = _load_pyplot() if plots else None
    images: Dict[str, str] = {}
    if plt is not None:
        for res in suite.results:
            name = f"{res.key}.png"
            _PLOTTERS[res.kind](res, os.path.join(out_dir, name), plt)
            images[res.key] = name
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(to_json(suite), f, separators=(",", ":"))

    import torch

    s = suite.settings
    lines = [f"# {title}", ""]
    lines.append(
        "Low-level-vision tests of Hammou et al., *Evaluating quality metrics through the lenses "
        "of psychophysical measurements of low-level vision* (arXiv:2503.16264), run by "
        "`flip_loss.psychophysics` (`flip-loss psychophysics`)."
    )
    lines.append("")
    lines.append("## Run")
    lines.append("")
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines.append(
        f"* {when}; device **{suite.device}** ({suite.threads} threads, {platform.processor() or platform.machine()}), "
        f"torch {torch.__version__}; wall time {suite.seconds:.0f} s."
    )
    if command:
        lines.append(f"* Command: `{command}`")
    lines.append(f"* Settings: {s.describe()}.")
    if s.differences():
        lines.append(
            f"* **Reduced settings (`{s.name}`)**, differing from the protocol's in: "
            + "; ".join(s.differences())
            + ". Scores on crops or coarser grids show the trend "
            "but are not the protocol's numbers."
        )
    per = ", ".join(
        f"{n} {suite.metric_seconds.get(n, 0):.0f} s / {suite.metric_calls.get(n, 0)} images"
        for n in _metric_names(suite)
    )
    lines.append(f"* Metric time: {per}.")
    for note in suite.notes:
        lines.append(f"* Note: {note}")
    lines.append("")
    lines.append("Metrics:")
    lines.append("")
    for name, desc in suite.metrics:
        lines.append(f"* **{name}**: {desc}")
    lines += [
        "",
        "## Scores",
        "",
        score_table(suite),
        "",
        "Bold: the best metric of the row. AS: alignment score (1 ideal, 0 none). RMSE: of log10 contrast (0 ideal).",
        "",
        _INPUT_TEXT,
        "",
        _SCORE_TEXT,
        "",
        "## Tests",
        "",
    ]
    for res in suite.results:
        lines.append(f"### {res.title}")
        lines.append("")
        lines.append(f"Stimulus: {res.stimulus}. Key `{res.key}`; {res.seconds:.0f} s.")
        lines.append("")
        if res.kind == "alignment":
            lines.append(
                f"x = {res.x_label}: {len(res.x)} values {res.x.min():.3g} … {res.x.max():.3g}; "
                f"reference: {res.reference_label}. Top row: the metric's iso-response contours "
                "(its responses ranked, deciles) over the band c_T/2 … 2·c_T, with the threshold "
                "curve in green; an aligned metric's contours run parallel to it. Bottom row: "
                "response vs x, one line per k (aligned: flat lines)."
            )
        elif res.kind == "frequency_matching":
            lines.append(
                f"{len(res.reference_contrasts)} reference contrasts × {len(res.frequencies)} test "
                "frequencies; dashed: human matches, solid: the metric's."
            )
        else:
            lines.append(
                f"{len(res.contrasts)} contrasts per direction; a metric that judges colour and "
                "luminance contrast as equally strong would lie on the dashed line."
            )
        lines.append("")
        scores = ", ".join(f"{n} {_fmt(res.scores[n])}" for n in _metric_names(suite) if n in res.scores)
        lines.append(f"Scores: {scores}.")
        lines.append("")
        if res.key in images:
            lines.append(f"![{res.title}]({images[res.key]})")
            lines.append("")
    if plt is None and plots:
        lines.append("*(No plots: matplotlib is not installed; `pip install matplotlib` to get them.)*")
        lines.append("")
    lines.append("All numbers (responses per cell, matched contrasts) are in `results.json`.")
    lines.append("")
    path = os.path.join(out_dir, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return path
