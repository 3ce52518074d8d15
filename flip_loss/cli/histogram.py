"""The weighted FLIP histograms of ``flip-loss --histogram``, drawn with matplotlib (an optional
dependency, imported only when a histogram is asked for)."""

import math
from typing import Callable, Optional, Sequence

from .console import readable
from .errors import UsageError
from .evaluate import Result
from .pairs import stem

# The bins of the weighted histograms: those drawn into PNG files and those of the HTML report.
HISTOGRAM_BINS = 100


def import_matplotlib():
    """matplotlib's Figure and FigureCanvasAgg; a UsageError when matplotlib is missing (the run
    checks this before it computes anything)."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise UsageError(
            f"--histogram needs matplotlib, which could not be imported ({exc}); "
            "install it with 'pip install matplotlib'"
        ) from None
    return Figure, FigureCanvasAgg


def draw_histogram(path: str, series, log: bool, y_max: Optional[float], include_values: bool) -> None:
    """Draws the weighted histogram(s) of ``series`` = [(label, error map, pooled values[, its
    weighted histogram, or None: computed here]), ...] (one, or two overlapped) into the PNG file
    ``path``."""
    import numpy as np

    from ..pooling import weighted_histogram

    Figure, FigureCanvasAgg = import_matplotlib()
    fig = Figure(figsize=(25 / 2.54, 15 / 2.54), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    width = 1.0 / HISTOGRAM_BINS
    if len(series) == 1:
        styles = [dict(fill="lightblue", edge="blue", mean="red")]
    else:
        styles = [
            dict(fill=(118 / 255, 185 / 255, 0.0), edge="green", mean=(107 / 255, 168 / 255, 0.0)),
            dict(fill="lightblue", edge="blue", mean=(113 / 255, 171 / 255, 189 / 255)),
        ]
    top = 0.0
    positive_min = math.inf
    # A label is a file name: shown as it is (no mathtext: a '$' in a name is a dollar sign), its
    # bytes that are not UTF-8 as \xNN.
    series = [(readable(label), error, pooled, (*given, None)[0]) for label, error, pooled, *given in series]
    for (label, error, pooled, histogram), style in zip(series, styles):
        edges, counts = histogram if histogram is not None else weighted_histogram(error, HISTOGRAM_BINS)
        centres = 0.5 * (edges[:-1] + edges[1:])
        keep = counts > 0 if log else np.ones_like(counts, dtype=bool)
        ax.bar(
            centres[keep],
            counts[keep],
            width=width,
            color=style["fill"],
            edgecolor=style["edge"],
            alpha=0.6 if len(series) > 1 else 1.0,
            label=f"{label} (mean {pooled.mean:.4f})" if len(series) > 1 else None,
        )
        if counts.size and counts.max() > 0:
            top = max(top, float(counts.max()))
            positive_min = min(positive_min, float(counts[counts > 0].min()))
        if include_values:
            ax.axvline(pooled.mean, color=style["mean"], linewidth=1.5)
            if len(series) == 1:
                ax.axvline(pooled.weighted_median, color="gray", linewidth=1.5)
                for q in (pooled.weighted_quartile_1, pooled.weighted_quartile_3):
                    ax.axvline(q, color="purple", linewidth=1.5)
                for v in (pooled.min, pooled.max):
                    ax.axvline(v, color="black", linestyle=":", linewidth=1.5)
    if include_values and len(series) == 1:
        pooled = series[0][2]
        lines = [
            (f"Mean: {pooled.mean:.4f}", "red"),
            (f"Weighted median: {pooled.weighted_median:.4f}", "gray"),
            (f"1st weighted quartile: {pooled.weighted_quartile_1:.4f}", "purple"),
            (f"3rd weighted quartile: {pooled.weighted_quartile_3:.4f}", "purple"),
            (f"Min: {pooled.min:.4f}", "black"),
            (f"Max: {pooled.max:.4f}", "black"),
        ]
        for i, (text, colour) in enumerate(lines):
            ax.text(0.99, 0.97 - 0.06 * i, text, ha="right", va="top", transform=ax.transAxes, color=colour)
    if len(series) > 1:
        for text in ax.legend(loc="upper right").get_texts():
            text.set_parse_math(False)
    ax.set_xlim(0.0, 1.0)
    if log:
        ax.set_yscale("log")
        lo = positive_min * 0.5 if math.isfinite(positive_min) else 1e-3
        hi = y_max if y_max is not None else (top * 2.0 if top > 0 else 1.0)
        ax.set_ylim(min(lo, hi * 0.1), hi)
    else:
        ax.set_ylim(0.0, y_max if y_max is not None else (top * 1.05 if top > 0 else 1.0))
    ax.set_title("Weighted FLIP histogram" + (f": {series[0][0]}" if len(series) == 1 else ""), parse_math=False)
    ax.set_xlabel("FLIP error")
    ax.set_ylabel("Weighted FLIP sum per megapixel" + (" (log scale)" if log else ""))
    fig.tight_layout()
    fig.savefig(path, format="png")


def histogram_writer(args, results: Sequence[Result]) -> Callable[[str], None]:
    """The writer (``writer(path)``) of the histogram of evaluated ``results`` (one, or two
    overlapped), each labelled with its test image's name, drawn as the histogram options of
    ``args`` say."""
    series = [(stem(r.test), r.error, r.pooled, r.histogram) for r in results]
    return lambda path: draw_histogram(path, series, args.log, args.y_max, not args.exclude_pooled_values)
