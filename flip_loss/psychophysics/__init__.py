"""Low-level-vision validation of image metrics (Hammou et al., arXiv:2503.16264).

Calibrated synthetic stimuli (Gabors, band-limited noise, gratings, square waves in DKL around a
D65 background, shown on a modelled display), the reference thresholds and matches they are
scored against (castleCSF and human data, bundled in ``data/``), and the scores: the alignment
score of detection and masking, and the RMSE of contrast matching. Any callable
``metric(test, reference, ppd) -> per-image tensor`` (a difference: larger = more different) can be
evaluated::

    from flip_loss import psychophysics as pp
    result = pp.run_suite({"mine": my_metric}, pp.PRESETS["quick"])
    pp.write_report(result, "out/")

Command line: ``flip-loss psychophysics --out DIR [--metrics ...] [--quick] [--device ...]``
(``python -m flip_loss.psychophysics``).
"""

from . import colour, data, scoring, stimuli
from .metrics import DEFAULT_METRICS, METRIC_NAMES, Metric, as_metric, build_metrics
from .report import score_table, write_report
from .scoring import alignment_score, log_rmse, solve_matching_contrast
from .suite import PRESETS, Settings, all_tests, run_suite, select_tests

__all__ = [
    "colour",
    "data",
    "scoring",
    "stimuli",
    "Metric",
    "as_metric",
    "build_metrics",
    "METRIC_NAMES",
    "DEFAULT_METRICS",
    "PRESETS",
    "Settings",
    "all_tests",
    "run_suite",
    "select_tests",
    "write_report",
    "score_table",
    "alignment_score",
    "log_rmse",
    "solve_matching_contrast",
]
