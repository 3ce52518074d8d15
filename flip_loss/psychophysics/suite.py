"""The tests of the suite (protocol §2), their settings, and the runner.

Detection and masking tests (:class:`AlignmentTest`) show a target at ``c = c_T(x) / k`` for each
swept ``x`` and sensitivity multiplier ``k`` and score the metric with the alignment score.
:class:`FrequencyMatchingTest` and :class:`ColourMatchingTest` root-find the contrasts whose
metric responses match. :func:`run_suite` runs any subset for any metrics and returns a
:class:`SuiteResult` that :mod:`.report` renders.
"""

import fnmatch
import time
from dataclasses import dataclass, field, fields
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from . import colour, data, scoring
from .colour import Display
from .metrics import Metric, as_metric
from .stimuli import Component, Geometry, band_limited_noise, compose, gabor, grating, lowpass_noise, square_wave

__all__ = [
    "Settings",
    "PRESETS",
    "AlignmentTest",
    "FrequencyMatchingTest",
    "ColourMatchingTest",
    "all_tests",
    "select_tests",
    "run_suite",
    "SuiteResult",
    "AlignmentResult",
    "FrequencyMatchingResult",
    "ColourMatchingResult",
    "MetricEvaluator",
]


@dataclass(frozen=True)
class Settings:
    """How much of the protocol to run. ``full`` is the protocol as specified (with the central
    1024×1024 crop the spec allows for the Gabor tests whose envelope it holds); ``quick`` and
    ``smoke`` use crops and fewer x values (the scores are then indicative, not comparable)."""

    name: str = "full"
    n_x: int = 20  # swept x values of each detection / masking test
    n_k: int = 10  # sensitivity multipliers k
    gabor_crop: Optional[int] = 1024  # square central crop of the SF and luminance Gabor tests
    size_crop: Optional[int] = None  # crop of the size test (None: the full frame; σ up to 8°)
    noise_size: Optional[int] = None  # square frame of the noise detection tests (None: full)
    masking_crop: Optional[int] = None  # crop of the masking tests (None: as specified)
    matching_crop: Optional[int] = None  # crop of the matching tests (None: 256×256)
    matching_references: Optional[Tuple[int, ...]] = None  # indices of the 8 reference contrasts
    matching_frequencies: Optional[Tuple[int, ...]] = None  # indices of the 9 test frequencies
    match_grid: int = 16  # log-spaced contrasts of the bracket search in [1e-3, 1]
    match_iterations: int = 6  # Illinois (regula falsi) steps after the bracket search
    colour_n: int = 10  # contrasts of the colour-direction matching test
    noise_seed: int = 0
    max_batch_pixels: int = 8_000_000  # images per metric call: max(1, this // (H·W))

    def differences(self) -> List[str]:
        """The settings that differ from the protocol's (``full``), as ``name = value`` strings."""
        ref = Settings()
        return [
            f"{f.name} = {getattr(self, f.name)} (full: {getattr(ref, f.name)})"
            for f in fields(self)
            if f.name not in ("name", "max_batch_pixels") and getattr(self, f.name) != getattr(ref, f.name)
        ]

    def describe(self) -> str:
        def crop(v, default):
            return default if v is None else f"central {v}×{v} crop"

        parts = [
            f"preset `{self.name}`",
            f"{self.n_x} x values × {self.n_k} k values per detection/masking test",
            f"SF/luminance Gabors: {crop(self.gabor_crop, 'full 1920×1080 frame')}",
            f"size Gabors: {crop(self.size_crop, 'full 1920×1080 frame')}",
            f"band-limited noise: {'full 1920×1080 frame' if self.noise_size is None else f'{self.noise_size}×{self.noise_size} frame'}",
            f"masking: {crop(self.masking_crop, 'frames as specified')}",
            f"matching: {crop(self.matching_crop, '256×256')}, bracket grid {self.match_grid} + "
            f"{self.match_iterations} regula-falsi steps",
            f"colour matching: {self.colour_n} contrasts",
            f"noise seed {self.noise_seed}",
        ]
        if self.matching_references is not None or self.matching_frequencies is not None:
            parts.append("matching on a subset of the reference contrasts / frequencies")
        return "; ".join(parts)


PRESETS: Dict[str, Settings] = {
    "full": Settings("full"),
    # The protocol's x and k grids and its 1024×1024 Gabor crop; the noise on 512×512 frames and
    # the size test on the 1024×1024 crop: what two CPU cores finish in ~30-40 min.
    "medium": Settings("medium", size_crop=1024, noise_size=512, match_grid=12, match_iterations=4),
    "quick": Settings(
        "quick",
        n_x=7,
        n_k=5,
        gabor_crop=320,
        size_crop=384,
        noise_size=320,
        matching_crop=128,
        match_grid=6,
        match_iterations=3,
        colour_n=5,
    ),
    # A very small run for the test suite: everything tiny, only to prove the plumbing.
    "smoke": Settings(
        "smoke",
        n_x=3,
        n_k=3,
        gabor_crop=96,
        size_crop=96,
        noise_size=96,
        masking_crop=96,
        matching_crop=64,
        matching_references=(0, 4),
        matching_frequencies=(2, 4, 6),
        match_grid=5,
        match_iterations=3,
        colour_n=3,
    ),
}


# --------------------------------------------------------------------------------------------
# Evaluation of metrics on stimuli


class MetricEvaluator:
    """Evaluates metrics on absolute-luminance stimuli: converts them to each metric's input
    (display-encoded frames or relative linear RGB), moves them to ``device`` as float32, calls
    the metric without autograd and returns a float64 numpy array of N values."""

    def __init__(self, device="cpu"):
        self.device = torch.device(device)
        self.seconds: Dict[str, float] = {}
        self.calls: Dict[str, int] = {}

    @staticmethod
    def frames(kind: str, rgb_abs: torch.Tensor, display: Display) -> torch.Tensor:
        # Relative linear values in float64, then float32 for the (per-pixel) encoding: the
        # frames a metric gets are float32 in any case.
        rel = (rgb_abs / display.y_peak).to(torch.float32)
        if kind == "display":
            return colour.srgb_encode(rel.clamp_(0.0, 1.0))
        return rel.clamp_min_(0.0)

    def __call__(
        self, metrics: Sequence[Metric], test_abs: torch.Tensor, ref_abs: torch.Tensor, display: Display, ppd: float
    ) -> Dict[str, np.ndarray]:
        n = test_abs.shape[0]
        cache = {}
        out = {}
        for m in metrics:
            if m.input not in cache:
                t = self.frames(m.input, test_abs, display).to(self.device)
                r = self.frames(m.input, ref_abs, display).to(self.device)
                cache[m.input] = (t.contiguous(), r.expand_as(t).contiguous())
            t, r = cache[m.input]
            start = time.perf_counter()
            with torch.no_grad():
                v = m(t, r, ppd)
            v = torch.as_tensor(v).detach().to("cpu", torch.float64).reshape(-1).numpy()
            self.seconds[m.name] = self.seconds.get(m.name, 0.0) + time.perf_counter() - start
            self.calls[m.name] = self.calls.get(m.name, 0) + n
            if v.shape[0] != n:
                raise ValueError(f"metric {m.name} returned {v.shape[0]} values for {n} images")
            out[m.name] = v
        return out


def _chunks(n: int, per: int):
    for s in range(0, n, per):
        yield slice(s, min(n, s + per))


def _per_call(settings: Settings, shape) -> int:
    return max(1, settings.max_batch_pixels // (shape[0] * shape[1]))


# --------------------------------------------------------------------------------------------
# Detection and masking


@dataclass
class AlignmentResult:
    key: str
    title: str
    x_label: str
    x: np.ndarray  # (n_x,)
    k: np.ndarray  # (n_k,)
    contrast: np.ndarray  # (n_x, n_k): c_T(x) / k
    responses: Dict[str, np.ndarray]  # metric → (n_x, n_k)
    scores: Dict[str, float]  # metric → AS
    curve_x: np.ndarray  # the reference threshold curve, for plots
    curve_c: np.ndarray
    reference_label: str
    stimulus: str
    seconds: float = 0.0
    kind: str = "alignment"


# A builder maps (x, geometry, settings) to (L_b, masker components, target pattern, target direction).
Builder = Callable[[float, Geometry, Settings], Tuple[float, List[Component], torch.Tensor, Sequence[float]]]


@dataclass
class AlignmentTest:
    key: str
    title: str
    x_label: str
    width: int
    height: int
    ppd: float
    y_peak: float
    table: Callable[[], data.ThresholdTable]
    x_values: Callable[[int], np.ndarray]
    build: Builder
    crop: Callable[[Settings], Optional[Tuple[int, int]]]
    stimulus: str
    kind: str = "alignment"

    def geometry(self, settings: Settings) -> Geometry:
        return Geometry(self.width, self.height, self.ppd, self.crop(settings))

    def conditions(self, settings: Settings, n_metrics: int) -> int:
        return self.x_values(settings.n_x).shape[0]

    def run(
        self, metrics: Sequence[Metric], settings: Settings, evaluator: MetricEvaluator, tick: Callable[[str], None]
    ) -> AlignmentResult:
        start = time.perf_counter()
        table = self.table()
        xs = self.x_values(settings.n_x)
        ks = scoring.sensitivity_multipliers(settings.n_k)
        geom = self.geometry(settings)
        display = Display(self.y_peak)
        contrasts = table.threshold(xs)[:, None] / ks[None, :]
        resp = {m.name: np.full((len(xs), len(ks)), np.nan) for m in metrics}
        per = _per_call(settings, geom.shape)
        for i, x in enumerate(xs):
            l_b, masker, pattern, direction = self.build(float(x), geom, settings)
            ref_abs = compose(l_b, masker, n=1, shape=geom.shape)
            for sl in _chunks(len(ks), per):
                c = torch.from_numpy(contrasts[i, sl].copy())
                test_abs = compose(l_b, masker + [Component(c, pattern, direction)])
                for name, v in evaluator(metrics, test_abs, ref_abs, display, self.ppd).items():
                    resp[name][i, sl] = v
            tick(self.key)
        kk = np.broadcast_to(ks[None, :], contrasts.shape)
        scores = {name: scoring.alignment_score(kk, d) for name, d in resp.items()}
        return AlignmentResult(
            self.key,
            self.title,
            self.x_label,
            xs,
            ks,
            contrasts,
            resp,
            scores,
            table.x,
            table.c,
            table.label,
            self.stimulus,
            time.perf_counter() - start,
        )


def _gabor_detection(frequency_of, sigma_of, l_b_of, direction):
    def build(x, geom, settings):
        return l_b_of(x), [], gabor(geom, frequency_of(x), sigma_of(x), "sine", "vertical"), direction

    return build


def _noise_detection(direction):
    def build(x, geom, settings):
        return 21.4, [], band_limited_noise(geom, x, settings.noise_seed), direction

    return build


def _square(v):
    return None if v is None else (v, v)


_ACH = colour.DIRECTIONS["ach"]
_NAMES = {"ach": "achromatic", "rg": "red-green", "yv": "yellow-violet"}


def _detection_tests() -> List[AlignmentTest]:
    tests = []
    sf = lambda n: 2.0 ** np.linspace(-1.0, 5.0, n)  # noqa: E731
    for d in ("ach", "rg", "yv"):
        tests.append(
            AlignmentTest(
                f"detection_sf_gabor_{d}",
                f"Detection vs spatial frequency, {_NAMES[d]} Gabor",
                "spatial frequency (cpd)",
                1920,
                1080,
                66.0,
                100.0,
                (lambda d=d: data.castle_table(f"spatial_freq_{d}")),
                sf,
                _gabor_detection(lambda x: x, lambda x: 2.0, lambda x: 21.4, colour.DIRECTIONS[d]),
                lambda s: _square(s.gabor_crop),
                f"sine-phase Gabor, vertical, σ = 2°, L_b = 21.4 cd/m², DKL {d.upper()} (unit direction), "
                "1920×1080 at 66 ppd, Y_peak 100",
            )
        )
    for d in ("ach", "rg", "yv"):
        tests.append(
            AlignmentTest(
                f"detection_sf_noise_{d}",
                f"Detection vs spatial frequency, {_NAMES[d]} band-limited noise",
                "spatial frequency (cpd)",
                1920,
                1080,
                66.0,
                100.0,
                (lambda d=d: data.castle_table(f"spatial_freq_{d}_band_limited_noise")),
                sf,
                _noise_detection(colour.DIRECTIONS[d]),
                lambda s: _square(s.noise_size),
                f"seeded white noise, ideal one-octave FFT band-pass around f, unit RMS, L_b = 21.4 cd/m², "
                f"DKL {d.upper()}, 1920×1080 at 66 ppd, Y_peak 100",
            )
        )
    tests.append(
        AlignmentTest(
            "detection_luminance",
            "Detection vs background luminance, achromatic Gabor",
            "background luminance (cd/m²)",
            1920,
            1080,
            60.0,
            100.0,
            lambda: data.castle_table("luminance_ach"),
            lambda n: np.logspace(np.log10(0.1), np.log10(90.0), n),
            _gabor_detection(lambda x: 2.0, lambda x: 2.0, lambda x: x, _ACH),
            lambda s: _square(s.gabor_crop),
            "sine-phase Gabor 2 cpd, σ = 2°, achromatic, 1920×1080 at 60 ppd, Y_peak 100",
        )
    )
    tests.append(
        AlignmentTest(
            "detection_size",
            "Detection vs size, achromatic Gabor",
            "Gabor σ (deg)",
            1920,
            1080,
            60.0,
            100.0,
            lambda: data.castle_table("size_ach"),
            lambda n: 2.0 ** np.linspace(-2.0, 3.0, n),
            _gabor_detection(lambda x: 2.0, lambda x: x, lambda x: 21.4, _ACH),
            lambda s: _square(s.size_crop),
            "sine-phase Gabor 2 cpd, achromatic, L_b = 21.4 cd/m², 1920×1080 at 60 ppd, Y_peak 100",
        )
    )
    return tests


def _masking_tests() -> List[AlignmentTest]:
    def coherent(x, geom, settings):
        masker = Component(x, grating(geom, 2.0, "cosine", "vertical"), _ACH)
        return 32.0, [masker], gabor(geom, 2.0, 0.5, "cosine", "vertical"), _ACH

    def incoherent(x, geom, settings):
        masker = Component(x, lowpass_noise(geom, 12.0, settings.noise_seed), _ACH)
        return 37.0, [masker], gabor(geom, 1.2, 0.8, "cosine", "vertical"), _ACH

    def span(table):
        def xs(n):
            t = table()
            return np.logspace(np.log10(t.x.min()), np.log10(t.x.max()), n)

        return xs

    foley = lambda: data.foley_table(0)  # noqa: E731
    noise = data.noise_masking_table
    return [
        AlignmentTest(
            "masking_phase_coherent",
            "Contrast masking, phase-coherent (grating masker)",
            "masker contrast",
            420,
            300,
            60.0,
            150.0,
            foley,
            span(foley),
            coherent,
            lambda s: _square(s.masking_crop),
            "masker: full-field cosine grating 2 cpd; target: cosine Gabor 2 cpd, σ = 0.5°, in "
            "phase; L_b = 32 cd/m², 420×300 at 60 ppd, Y_peak 150",
        ),
        AlignmentTest(
            "masking_phase_incoherent",
            "Contrast masking, phase-incoherent (noise masker)",
            "masker RMS contrast",
            300,
            300,
            60.0,
            173.0,
            noise,
            span(noise),
            incoherent,
            lambda s: _square(s.masking_crop),
            "masker: white noise low-passed at 12 cpd, unit RMS; target: cosine Gabor 1.2 cpd, "
            "σ = 0.8°; L_b = 37 cd/m², 300×300 at 60 ppd, Y_peak 173",
        ),
    ]


# --------------------------------------------------------------------------------------------
# Contrast matching


@dataclass
class FrequencyMatchingResult:
    key: str
    title: str
    reference_contrasts: np.ndarray  # (n_r,)
    frequencies: np.ndarray  # (n_f,)
    human: np.ndarray  # (n_r, n_f)
    matches: Dict[str, np.ndarray]  # metric → (n_r, n_f) matched contrasts
    no_root: Dict[str, int]  # metric → cells with no root (bracket end recorded)
    scores: Dict[str, float]  # metric → RMSE of log10 contrast
    stimulus: str
    seconds: float = 0.0
    kind: str = "frequency_matching"


class FrequencyMatchingTest:
    key = "matching_sf"
    title = "Contrast matching across spatial frequency (5 cpd standard)"
    kind = "frequency_matching"
    ppd, size, y_peak, l_b, reference_frequency = 50.0, 256, 46.72, 10.0, 5.0
    stimulus = (
        "full-field vertical sine grating vs uniform field, achromatic, L_b = 10 cd/m², 256×256 at "
        "50 ppd, Y_peak 46.72; standard 5 cpd"
    )

    def _subset(self, settings):
        t = data.contrast_matching_table()
        ri = (
            list(range(len(t.reference_contrasts)))
            if settings.matching_references is None
            else list(settings.matching_references)
        )
        fi = (
            list(range(len(t.frequencies)))
            if settings.matching_frequencies is None
            else list(settings.matching_frequencies)
        )
        return t.reference_contrasts[ri], t.frequencies[fi], t.matches[np.ix_(ri, fi)]

    def conditions(self, settings: Settings, n_metrics: int) -> int:
        return n_metrics * len(self._subset(settings)[1])

    def run(self, metrics, settings, evaluator, tick) -> FrequencyMatchingResult:
        start = time.perf_counter()
        refs, freqs, human = self._subset(settings)
        crop = _square(settings.matching_crop)
        geom = Geometry(self.size, self.size, self.ppd, crop)
        display = Display(self.y_peak)
        uniform = compose(self.l_b, [], n=1, shape=geom.shape)
        per = _per_call(settings, geom.shape)
        patterns = {}

        def response(metric, f, cs):
            if f not in patterns:
                patterns[f] = grating(geom, f, "sine", "vertical")
            cs = np.asarray(cs, dtype=np.float64).ravel()
            out = np.empty(len(cs))
            for sl in _chunks(len(cs), per):
                test_abs = compose(self.l_b, [Component(torch.from_numpy(cs[sl].copy()), patterns[f], _ACH)])
                out[sl] = evaluator([metric], test_abs, uniform, display, self.ppd)[metric.name]
            return out

        matches, no_root, scores = {}, {}, {}
        for m in metrics:
            target = response(m, self.reference_frequency, refs)
            mat = np.empty((len(refs), len(freqs)))
            missing = 0
            for j, f in enumerate(freqs):
                r = scoring.solve_matching_contrast(
                    lambda cs, m=m, f=f: response(m, float(f), cs),
                    target,
                    grid=settings.match_grid,
                    iterations=settings.match_iterations,
                )
                mat[:, j] = r.contrast
                missing += int(r.no_root.sum())
                tick(self.key)
            matches[m.name], no_root[m.name] = mat, missing
            scores[m.name] = scoring.log_rmse(mat, human)
        return FrequencyMatchingResult(
            self.key,
            self.title,
            refs,
            freqs,
            human,
            matches,
            no_root,
            scores,
            self.stimulus,
            time.perf_counter() - start,
        )


@dataclass
class ColourMatchingResult:
    key: str
    title: str
    contrasts: np.ndarray  # (n,)
    responses: Dict[str, Dict[str, np.ndarray]]  # metric → direction → (n,)
    equivalents: Dict[str, Dict[str, np.ndarray]]  # metric → "rg"/"yv" → achromatic-equivalent contrast
    no_root: Dict[str, int]
    scores: Dict[str, float]  # RMSE of log10(c_ach_equivalent / c)
    stimulus: str
    seconds: float = 0.0
    kind: str = "colour_matching"


class ColourMatchingTest:
    key = "matching_colour"
    title = "Contrast matching across colour directions (1 cpd square wave)"
    kind = "colour_matching"
    ppd, size, y_peak, l_b, frequency = 60.0, 256, 100.0, 21.4, 1.0
    stimulus = (
        "full-field 1 cpd square wave, horizontal bars, vs uniform field; scaled DKL directions "
        "Ach (1,0,0), RG (0,0.610649,0), YV (0,0,4.203636); L_b = 21.4 cd/m², 256×256 at 60 ppd, "
        "Y_peak 100"
    )

    def conditions(self, settings: Settings, n_metrics: int) -> int:
        return n_metrics * 3

    def run(self, metrics, settings, evaluator, tick) -> ColourMatchingResult:
        start = time.perf_counter()
        geom = Geometry(self.size, self.size, self.ppd, _square(settings.matching_crop))
        display = Display(self.y_peak)
        uniform = compose(self.l_b, [], n=1, shape=geom.shape)
        pattern = square_wave(geom, self.frequency, "horizontal")
        per = _per_call(settings, geom.shape)
        cs = np.logspace(-2.0, np.log10(0.2), settings.colour_n)

        def response(metric, direction, c):
            c = np.asarray(c, dtype=np.float64).ravel()
            out = np.empty(len(c))
            for sl in _chunks(len(c), per):
                test_abs = compose(
                    self.l_b, [Component(torch.from_numpy(c[sl].copy()), pattern, colour.SCALED_DIRECTIONS[direction])]
                )
                out[sl] = evaluator([metric], test_abs, uniform, display, self.ppd)[metric.name]
            return out

        responses, equivalents, no_root, scores = {}, {}, {}, {}
        for m in metrics:
            responses[m.name] = {"ach": response(m, "ach", cs)}
            tick(self.key)
            equivalents[m.name] = {}
            missing = 0
            for d in ("rg", "yv"):
                responses[m.name][d] = response(m, d, cs)
                r = scoring.solve_matching_contrast(
                    lambda c, m=m: response(m, "ach", c),
                    responses[m.name][d],
                    grid=settings.match_grid,
                    iterations=settings.match_iterations,
                )
                equivalents[m.name][d] = r.contrast
                missing += int(r.no_root.sum())
                tick(self.key)
            no_root[m.name] = missing
            eq = np.concatenate([equivalents[m.name]["rg"], equivalents[m.name]["yv"]])
            scores[m.name] = scoring.log_rmse(eq, np.concatenate([cs, cs]))
        return ColourMatchingResult(
            self.key,
            self.title,
            cs,
            responses,
            equivalents,
            no_root,
            scores,
            self.stimulus,
            time.perf_counter() - start,
        )


# --------------------------------------------------------------------------------------------
# The suite


def all_tests() -> list:
    """Every test of the suite, in report order."""
    return _detection_tests() + _masking_tests() + [FrequencyMatchingTest(), ColourMatchingTest()]


def select_tests(patterns: Optional[Sequence[str]] = None) -> list:
    """Tests whose key matches any of the shell-style ``patterns`` (all tests when None)."""
    tests = all_tests()
    if not patterns:
        return tests
    chosen = [t for t in tests if any(fnmatch.fnmatch(t.key, p) or t.key == p for p in patterns)]
    unknown = [p for p in patterns if not any(fnmatch.fnmatch(t.key, p) for t in tests)]
    if unknown:
        raise ValueError(f"no test matches {', '.join(unknown)}; tests: {', '.join(t.key for t in tests)}")
    return chosen


@dataclass
class SuiteResult:
    settings: Settings
    metrics: List[Tuple[str, str]]  # (name, description)
    notes: List[str]
    results: list
    device: str
    seconds: float
    metric_seconds: Dict[str, float] = field(default_factory=dict)
    metric_calls: Dict[str, int] = field(default_factory=dict)
    threads: int = 1


class _Progress:
    """The suite's progress on stderr, by the command line's rule (``flip_loss.cli.console``): a
    bar on a terminal, a plain line now and then in a log."""

    def __init__(self, total: int, enabled: bool):
        import sys

        from ..cli.console import Progress

        self.progress = Progress(total, sys.stderr, label="psychophysics", unit="conditions") if enabled else None

    def __call__(self, key: str):
        if self.progress is not None:
            self.progress.advance()

    def close(self):
        if self.progress is not None:
            self.progress.close()


def run_suite(
    metrics,
    settings: Settings = PRESETS["full"],
    tests: Optional[Sequence] = None,
    device="cpu",
    progress: bool = True,
    notes: Sequence[str] = (),
) -> SuiteResult:
    """Run ``tests`` (default: all) for ``metrics`` (Metric objects or callables
    ``(test, reference, ppd) -> (N,)``, or a dict name → callable)."""
    if isinstance(metrics, dict):
        metrics = [as_metric(fn, name) for name, fn in metrics.items()]
    else:
        metrics = [as_metric(m) for m in metrics]
    names = [m.name for m in metrics]
    if len(set(names)) != len(names):
        raise ValueError(f"metric names must be unique, got {names}")
    tests = all_tests() if tests is None else list(tests)
    evaluator = MetricEvaluator(device)
    total = sum(t.conditions(settings, len(metrics)) for t in tests)
    bar = _Progress(total, progress)
    start = time.perf_counter()
    results = []
    try:
        for t in tests:
            results.append(t.run(metrics, settings, evaluator, bar))
    finally:
        bar.close()
    return SuiteResult(
        settings,
        [(m.name, m.description) for m in metrics],
        list(notes),
        results,
        str(evaluator.device),
        time.perf_counter() - start,
        dict(evaluator.seconds),
        dict(evaluator.calls),
        torch.get_num_threads(),
    )
