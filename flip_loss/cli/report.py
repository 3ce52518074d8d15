"""The HTML report of ``flip-loss --report DIR``: one static page, ``DIR/index.html``, with its
images in ``DIR/pairs/``, that opens from disk with nothing else (no server, no network; its CSS
and JavaScript, ``report_assets``, are written into it).

The page shows the run's summary (pairs, the gate's verdict, viewing conditions, version, date), a
table of the pairs sortable by each pooled value, and per pair the reference, the test image and
the error map side by side with a control that flips between reference and test, the weighted
histogram (inline SVG) and, for HDR-FLIP, the exposure map. Thumbnails keep a page of hundreds of
pairs light; the full-size images are linked.

It is written in two steps, so that a run whose pairs were evaluated elsewhere (the ranks of a
torchrun run) can write it too: :func:`stage_pair_images` stages a pair's pictures right after it
is evaluated, while its images are in memory, and returns a :class:`PairRecord` of plain values
(picklable, gathered to rank 0); :func:`stage_page` writes ``index.html`` from all the records at
the end. Every file goes through the run's :class:`~.outputs.Staging` and
:class:`~.outputs.OutputGuard`, like every other output.
"""

import datetime
import html
import math
import os
import re
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple
from urllib.parse import quote

from ..constants import STATISTICS
from .run_counts import Account, Outcome, account_of
from .arguments import gate_failures
from .console import readable
from .errors import UsageError
from .evaluate import Result
from .histogram import HISTOGRAM_BINS
from .outputs import Output, Staging, check_directory, write_text_file
from .report_assets import PAGE_SCRIPT, PAGE_STYLE

REPORT_PAGE = "index.html"
IMAGE_FOLDER = "pairs"
# The longest side of a thumbnail, in pixels: small enough that a few hundred pairs load quickly,
# large enough to see where the errors are.
THUMBNAIL_SIZE = 320
# The page's <meta name="generator">: a directory whose index.html carries it holds an earlier
# report, which a new one may replace; any other index.html is the user's and is never overwritten.
GENERATOR = "flip-loss"
_GENERATOR_MARK = f'<meta name="generator" content="{GENERATOR}'


class Column(NamedTuple):
    """A pooled value of the pairs table: its key (as --fail-above names it where it can be a gate
    quantity), its heading and the PooledValues field it shows."""

    key: str
    label: str
    field: str


COLUMNS = tuple(Column(s.key, s.label, s.field) for s in STATISTICS if s.report_column)
_COLUMN_BY_KEY = {c.key: c for c in COLUMNS}

# The pictures of a pair, in the order they are shown: (kind, caption).
_PICTURES = (("reference", "Reference"), ("test", "Test"), ("error", "FLIP error map"), ("exposure", "Exposure map"))


class Picture(NamedTuple):
    """One picture of a pair, as paths relative to the report directory ('/'-separated)."""

    kind: str  # "reference", "test", "error" or "exposure"
    thumbnail: str  # the file shown on the page (the full-size one when the image is small)
    full: str


class PairRecord(NamedTuple):
    """One pair as the report shows it. Plain values only (see the module docstring)."""

    index: int  # 1-based position among the run's pairs
    reference: str
    test: str
    failure: Optional[str] = None  # why the pair could not be evaluated; None if it was
    pooled: Optional[Tuple[float, ...]] = None  # flip_loss.pooling.PooledValues
    exposures: Optional[Tuple[float, float, int]] = None  # HDR-FLIP: start, stop (stops), count
    shown_exposure: Optional[float] = None  # HDR-FLIP: the exposure of the pictures shown
    seconds: float = 0.0
    histogram: Tuple[float, ...] = ()  # the weighted histogram (HISTOGRAM_BINS buckets)
    size: Tuple[int, int] = (0, 0)  # width, height
    thumbnail_size: Tuple[int, int] = (0, 0)
    pictures: Tuple[Picture, ...] = ()


class ReportSettings(NamedTuple):
    """What the run's pairs share, for the page's summary."""

    ppd: float
    hdr: bool  # some pair is evaluated with HDR-FLIP
    tone_mapper: str
    gate: Optional[Tuple[Tuple[str, float], ...]]  # (quantity, threshold) of each --fail-above
    inputs: Tuple[Tuple[str, str], ...]  # (what, path), e.g. ("Reference folder", "refs/")
    pairs: int  # the number of pairs (and unmatched images) of the run
    version: str
    created: str  # date and time, ISO 8601
    timing: bool = False  # --timing: each pair's evaluation time is shown
    unmatched_fail: bool = True  # an image without a partner fails the gate
    ldr: Optional[bool] = None  # some pair is evaluated with LDR-FLIP (None: not hdr)

    @property
    def metric(self) -> str:
        """The metric of the run's pairs in words."""
        ldr = not self.hdr if self.ldr is None else self.ldr
        if self.hdr and ldr:
            return f"LDR-FLIP for the LDR pairs, HDR-FLIP (tone mapper {self.tone_mapper}) for the OpenEXR (.exr) pairs"
        return f"HDR-FLIP, tone mapper {self.tone_mapper}" if self.hdr else "LDR-FLIP"


def creation_time() -> str:
    """The report's date: now, or ``SOURCE_DATE_EPOCH`` (seconds since 1970, UTC) where it is set,
    the usual way to make a generated file the same in every run."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is not None:
        try:
            return datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc).isoformat()
        except (ValueError, OverflowError, OSError):
            pass  # not a time: the clock's
    return datetime.datetime.now().astimezone().replace(microsecond=0).isoformat()


def settings_now(
    ppd: float,
    hdr: bool,
    tone_mapper: str,
    gate,
    inputs,
    pairs: int,
    timing: bool = False,
    unmatched_fail: bool = True,
    ldr: Optional[bool] = None,
) -> ReportSettings:
    """The settings of a report written now, by this version of flip-loss."""
    from .. import __version__

    return ReportSettings(
        ppd, hdr, tone_mapper, gate, tuple(inputs), pairs, __version__, creation_time(), timing, unmatched_fail, ldr
    )


# --- the report directory -------------------------------------------------------------------------


def _is_report_page(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return _GENERATOR_MARK.encode() in head


def check_report_directory(directory: str) -> List[str]:
    """Checks that the report may be written into ``directory``: a directory that exists or can be
    created, and holds no ``index.html`` or ``pairs`` of its own (only an earlier report's, which is
    replaced). Returns the directories the report will create (for OutputGuard)."""
    check_directory(directory)
    page = os.path.join(directory, REPORT_PAGE)
    images = os.path.join(directory, IMAGE_FOLDER)
    earlier_report = _is_report_page(page)
    for path, what in ((page, REPORT_PAGE), (images, f"'{IMAGE_FOLDER}'")):
        if os.path.lexists(path) and not earlier_report:
            raise UsageError(
                f"--report: the directory '{directory}' already holds {what}, and it is not "
                f"from an earlier flip-loss report; choose a new or empty directory (the "
                f"report writes {REPORT_PAGE} and {IMAGE_FOLDER}/ there)"
            )
    if os.path.lexists(images) and not os.path.isdir(images):
        raise UsageError(f"--report: '{images}' is not a directory")
    return [d for d in (directory, images) if not os.path.isdir(d)]


def page_path(directory: str) -> str:
    return os.path.join(directory, REPORT_PAGE)


# --- the pictures of a pair -----------------------------------------------------------------------


def thumbnail_factor(width: int, height: int) -> int:
    """The whole number by which a width x height image is shrunk into a thumbnail (1: shown as
    it is). One factor for all pictures of a pair keeps them at one scale."""
    return max(1, math.ceil(max(width, height) / THUMBNAIL_SIZE))


def _safe_stem(path: str) -> str:
    """The file name of ``path`` without extension, reduced to characters that need no escaping in
    a file name or a URL (the pair's number keeps the names apart)."""
    stem = os.path.splitext(os.path.basename(path))[0]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", stem).strip("._")[:48] or "pair"


def picture_files(index: int, test: str, hdr: bool, size: Tuple[int, int]) -> List[Tuple[str, str, str]]:
    """The report's files of pair ``index``: (kind, relative path, what) with kind
    '<picture>' (full size) or '<picture>.thumbnail' (only when the image is shrunk)."""
    base = f"{IMAGE_FOLDER}/{index:04d}-{_safe_stem(test)}"
    shrunk = thumbnail_factor(*size) > 1
    files = []
    for kind, caption in _PICTURES:
        if kind == "exposure" and not hdr:
            continue
        files.append((kind, f"{base}.{kind}.png", f"report image ({caption.lower()})"))
        if shrunk:
            files.append((f"{kind}.thumbnail", f"{base}.{kind}.thumbnail.png", f"report thumbnail ({caption.lower()})"))
    return files


def _blocks(a, factor: int, fill: float):
    """``a`` (H x W or H x W x C) cut into factor x factor blocks: an array of shape
    (ceil(H / factor), ceil(W / factor), factor * factor[, C]); the edge blocks are padded with ``fill``."""
    import numpy as np

    h, w = a.shape[:2]
    hb, wb = -(-h // factor), -(-w // factor)
    pad = [(0, hb * factor - h), (0, wb * factor - w)] + [(0, 0)] * (a.ndim - 2)
    padded = np.pad(a, pad, constant_values=fill)
    blocks = padded.reshape(hb, factor, wb, factor, *a.shape[2:]).swapaxes(1, 2)
    return blocks.reshape(hb, wb, factor * factor, *a.shape[2:])


def _shrunk_image(rgb, factor: int):
    """An 8-bit RGB image shrunk by ``factor``: each pixel the mean of its block (of the pixels
    inside the image, for the blocks at the right and bottom edges)."""
    import numpy as np

    h, w = rgb.shape[:2]
    hb, wb = -(-h // factor), -(-w // factor)
    padded = np.zeros((hb * factor, wb * factor, 3), np.float32)
    padded[:h, :w] = rgb
    sums = padded.reshape(hb, factor, wb, factor, 3).sum(axis=(1, 3))
    rows = np.minimum(factor, h - factor * np.arange(hb))
    columns = np.minimum(factor, w - factor * np.arange(wb))
    counts = (rows[:, None] * columns[None, :]).astype(np.float32)[..., None]
    return np.clip(np.round(sums / counts), 0, 255).astype(np.uint8)


def _shrunk_maps(error, exposure, factor: int):
    """The error map shrunk by ``factor`` with the largest error of each block (so that a single
    wrong pixel still shows in the thumbnail), and the exposure map taken at the same pixels."""
    import numpy as np

    blocks = _blocks(error, factor, -np.inf)
    where = np.argmax(blocks, axis=2)[..., None]
    error_small = np.take_along_axis(blocks, where, axis=2)[..., 0]
    exposure_small = None
    if exposure is not None:
        exposure_small = np.take_along_axis(_blocks(exposure, factor, 0.0), where, axis=2)[..., 0]
    return error_small, exposure_small


def displayed_exposure(exposures) -> float:
    """The exposure (in stops) at which the pictures of an HDR pair are shown: the middle of its
    exposure range, between the one that shows the brightest pixel and the one that shows the
    median luminance well."""
    return 0.5 * (exposures.start + exposures.stop)


def display_image(image, hdr: bool, tone_mapper: str, exposure: Optional[float]):
    """An image of the run (3 x H x W tensor) as an 8-bit sRGB H x W x 3 array: LDR values as they
    are (they are sRGB-encoded); HDR values exposed by ``exposure`` stops and tone mapped as HDR-FLIP
    does at that exposure, then sRGB-encoded for the screen."""
    import numpy as np
    import torch

    from ..image_checks import code_values

    if image.dtype == torch.uint8:  # 8-bit codes (flip_loss.imageio.load_image)
        if not hdr:
            return image.to("cpu").permute(1, 2, 0).contiguous().numpy()
        image = code_values(image)
    x = image.detach().to("cpu", torch.float32)
    if hdr:
        from ..oracle import hdr_to_ldr, linear_to_srgb

        x = linear_to_srgb(hdr_to_ldr(x[None], 2.0**exposure, tone_mapper)[0])
    values = x.clamp(0.0, 1.0).permute(1, 2, 0).numpy()
    return np.round(values * 255.0).astype(np.uint8)


def _write_picture(image) -> Callable[[str], None]:
    """A writer (for Staging.write) of an 8-bit RGB picture as PNG with zlib level 1: a report has
    several full-size pictures per pair, and level 1 encodes about four times faster than Pillow's
    default, for files of about the same size."""
    from PIL import Image

    return lambda path: Image.fromarray(image).save(path, format="PNG", compress_level=1)


def stage_pair_images(
    staging: Staging,
    outputs: Dict[str, Output],
    index: int,
    result: Result,
    reference_image,
    test_image,
    hdr: bool,
    tone_mapper: str,
) -> PairRecord:
    """Stages the pictures of evaluated pair ``index`` into its report files ``outputs`` (claimed
    with :func:`picture_files`' kinds, relative paths as given there) and returns its record."""
    from ..colormaps import MAGMA, VIRIDIS, apply_colormap
    from ..pooling import weighted_histogram

    height, width = result.error.shape
    factor = thumbnail_factor(width, height)
    shown = displayed_exposure(result.exposures) if hdr else None
    full = {
        "reference": display_image(reference_image, hdr, tone_mapper, shown),
        "test": display_image(test_image, hdr, tone_mapper, shown),
        "error": apply_colormap(result.error, MAGMA),
    }
    if hdr:
        full["exposure"] = apply_colormap(result.exposure, VIRIDIS)
    small = {}
    if factor > 1:
        error_small, exposure_small = _shrunk_maps(result.error, result.exposure, factor)
        small = {
            "reference": _shrunk_image(full["reference"], factor),
            "test": _shrunk_image(full["test"], factor),
            "error": apply_colormap(error_small, MAGMA),
        }
        if hdr:
            small["exposure"] = apply_colormap(exposure_small, VIRIDIS)
    pictures = []
    for kind, image in full.items():
        staging.write(outputs[kind], _write_picture(image))
        if factor > 1:
            staging.write(outputs[f"{kind}.thumbnail"], _write_picture(small[kind]))
        pictures.append(
            Picture(kind, _relative(outputs[f"{kind}.thumbnail" if factor > 1 else kind]), _relative(outputs[kind]))
        )
    thumbnail_height, thumbnail_width = (small or full)["error"].shape[:2]
    _, histogram = (
        result.histogram if result.histogram is not None else weighted_histogram(result.error, HISTOGRAM_BINS)
    )
    exposures = tuple(result.exposures) if result.exposures is not None else None
    return PairRecord(
        index,
        result.reference,
        result.test,
        None,
        tuple(result.pooled),
        exposures,
        shown,
        result.seconds,
        tuple(float(v) for v in histogram),
        (width, height),
        (thumbnail_width, thumbnail_height),
        tuple(pictures),
    )


def _relative(out: Output) -> str:
    """The report-relative path of a report file (the last two parts: pairs/<name>)."""
    return f"{IMAGE_FOLDER}/{os.path.basename(out.path)}"


def failed_record(index: int, reference: str, test: str, message: str) -> PairRecord:
    """The record of pair ``index``, which could not be evaluated."""
    return PairRecord(index, reference, test, failure=message)


# --- the page -------------------------------------------------------------------------------------


def _esc(text) -> str:
    return html.escape(readable(str(text)), quote=True)


def _url(relative: str) -> str:
    return quote(relative, safe="/")


def _pooled(record: PairRecord):
    from ..pooling import PooledValues

    return PooledValues(*record.pooled)


def _gate_value(record: PairRecord, quantity: str) -> float:
    return getattr(_pooled(record), _COLUMN_BY_KEY[quantity].field)


def _over(record: PairRecord, gate) -> List[str]:
    """The quantities of ``gate`` whose threshold the evaluated ``record`` exceeds (the run's own
    rule, arguments.gate_failures)."""
    if gate is None or record.failure is not None:
        return []
    return [q for q, _, _ in gate_failures(_pooled(record), gate)]


def _is_over(record: PairRecord, gate) -> bool:
    return bool(_over(record, gate))


def is_unmatched(record: PairRecord) -> bool:
    """A folder-mode image without a partner of the same name (one of its names is empty)."""
    return not record.reference or not record.test


def _fails_gate(record: PairRecord, settings: "ReportSettings") -> bool:
    """Whether the record fails the run's gate: over a threshold, or not evaluated (an image
    without a partner only when ``unmatched_fail``)."""
    if settings.gate is None:
        return False
    if record.failure is not None:
        return settings.unmatched_fail or not is_unmatched(record)
    return _is_over(record, settings.gate)


def _sort_key(gate) -> str:
    return gate[0][0] if gate is not None else "mean"


def default_order(records: Sequence[PairRecord], gate) -> List[PairRecord]:
    """The table's first order, worst first: the pairs that failed, then by the first gate's
    quantity (the mean without a gate), largest first; ties by position in the run."""
    key = _sort_key(gate)
    return sorted(
        records, key=lambda r: (r.failure is None, -_gate_value(r, key) if r.failure is None else 0.0, r.index)
    )


def record_account(records: Sequence[PairRecord], settings: ReportSettings) -> Account:
    """The account (run_counts.account_of) of a run from its report records."""
    outcomes = [
        Outcome(r.failure is None, r.failure is not None and is_unmatched(r), tuple(_over(r, settings.gate)))
        for r in records
    ]
    return account_of(outcomes, settings.gate, settings.unmatched_fail)


def _summary(records: Sequence[PairRecord], settings: ReportSettings, account: Optional[Account] = None) -> str:
    """The summary section: the run's account (``account``, or counted from ``records``) in the
    words the terminal prints, the gate's verdict and the settings."""
    account = record_account(records, settings) if account is None else account
    rows = [("Pairs", f'<span id="pair-counts">{_esc(account.counts_text())}</span>')]
    if settings.gate is None:
        rows.append(("Gate", "none (no --fail-above)"))
    else:
        flags = " ".join(f"--fail-above {_esc(q)} {t:g}" for q, t in settings.gate)
        verdict, cls = ("passed", "good") if account.passed else ("failed", "bad")
        rows.append(
            (
                "Gate",
                f'<strong id="gate-verdict" class="{cls}" data-verdict="{verdict}">{_esc(account.verdict_text())}'
                f"</strong> ({flags})",
            )
        )
    rows.append(("Metric", _esc(settings.metric)))
    rows.append(("Viewing conditions", f"{settings.ppd:.4f} pixels per degree"))
    for what, path in settings.inputs:
        rows.append((_esc(what), f"<code>{_esc(path)}</code>"))
    rows.append(("Written by", f"flip-loss {_esc(settings.version)}"))
    rows.append(("Date", f'<time datetime="{_esc(settings.created)}">{_esc(settings.created)}</time>'))
    items = "\n".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows)
    return (
        f'<section aria-labelledby="summary-title">\n<h2 id="summary-title">Summary</h2>\n'
        f'<dl class="summary">\n{items}\n</dl>\n</section>'
    )


def _table(ordered: Sequence[PairRecord], settings: ReportSettings) -> str:
    key = _sort_key(settings.gate)
    heads = [
        '<th scope="col" class="num">#</th>',
        '<th scope="col" data-sort-key="test"><button type="button" class="sort" '
        'aria-describedby="sort-help">Test</button></th>',
        '<th scope="col">Reference</th>',
    ]
    for c in COLUMNS:
        sort = ' aria-sort="descending"' if c.key == key else ""
        heads.append(
            f'<th scope="col" class="num" data-sort-key="{c.key}"{sort}><button type="button" '
            f'class="sort" aria-describedby="sort-help">{_esc(c.label)}</button></th>'
        )
    heads.append('<th scope="col">Status</th>')
    body = []
    for r in ordered:
        attrs = [f'data-index="{r.index}"', f'data-test="{_esc(shown_name(r))}"']
        cells = [
            f'<td class="num">{r.index}</td>',
            f'<th scope="row"><a href="#pair-{r.index}" title="{_esc(r.test or r.reference)}">'
            f"{_esc(shown_name(r))}</a></th>",
            f'<td title="{_esc(r.reference)}">{_esc(os.path.basename(r.reference))}</td>',
        ]
        if r.failure is None:
            pooled = _pooled(r)
            for c in COLUMNS:
                v = getattr(pooled, c.field)
                attrs.append(f'data-{c.key}="{v!r}"')
                cells.append(f'<td class="num">{v:.4f}</td>')
            over = _is_over(r, settings.gate)
            status = (
                '<span class="badge bad">over the gate</span>'
                if over
                else '<span class="badge good">within the gate</span>'
                if settings.gate is not None
                else "evaluated"
            )
            state = "over" if over else "ok"
        else:
            # the reason in place of the values, where there is room for it
            cells.append(f'<td colspan="{len(COLUMNS)}" class="why">not evaluated: {_esc(r.failure)}</td>')
            status = (
                '<span class="badge bad">not evaluated</span>'
                if settings.gate is None or _fails_gate(r, settings)
                else '<span class="badge">not evaluated</span> (gate: skipped)'
            )
            state = "failed"
        attrs.append(f'data-state="{state}"')
        cells.append(f"<td>{status}</td>")
        body.append(f'<tr {" ".join(attrs)} class="{state}">' + "".join(cells) + "</tr>")
    sorted_by = f"{_COLUMN_BY_KEY[key].label}, largest first"
    return (
        f'<section aria-labelledby="pairs-title">\n<h2 id="pairs-title">Pairs</h2>\n'
        f'<p id="sort-help" class="hint">Sort by a column with its heading button; again to reverse. '
        f"Pairs not evaluated count as worst.</p>\n"
        f'<table id="pairs-table" data-sort-key="{key}" data-sort-descending="true">\n'
        f'<caption>Pairs sorted by <span id="sort-status" aria-live="polite">{sorted_by}</span></caption>\n'
        f"<thead><tr>{''.join(heads)}</tr></thead>\n<tbody>\n" + "\n".join(body) + "\n</tbody>\n</table>\n</section>"
    )


def _compact(value: float) -> str:
    """A positive number in at most 5 characters: 3 significant digits and k or M."""
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def histogram_svg(record: PairRecord, label_id: str) -> str:
    """The weighted histogram of an evaluated pair as inline SVG: a bar per bucket with weight,
    lines at the mean (red), weighted median (grey) and quartiles (purple)."""
    width, height, left, right, top, bottom = 290, 150, 40, 8, 10, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    tallest = max(record.histogram) if record.histogram else 0.0
    scale = plot_h / tallest if tallest > 0 else 0.0
    bar_w = plot_w / max(1, len(record.histogram))
    # Inline SVG in HTML needs no xmlns (and the page holds no URL at all).
    parts = [
        f'<svg class="histogram" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-labelledby="{label_id}">'
    ]
    pooled = _pooled(record)
    parts.append(
        f'<title id="{label_id}">Weighted FLIP histogram of {_esc(os.path.basename(record.test))}: '
        f"mean {pooled.mean:.4f}, weighted median {pooled.weighted_median:.4f}, quartiles "
        f"{pooled.weighted_quartile_1:.4f} and {pooled.weighted_quartile_3:.4f}, "
        f"max {pooled.max:.4f}</title>"
    )
    parts.append('<g class="bars">')
    for i, value in enumerate(record.histogram):
        if value > 0:
            h = value * scale
            parts.append(
                f'<rect data-bin="{i}" x="{left + i * bar_w:.2f}" y="{top + plot_h - h:.2f}" '
                f'width="{bar_w:.2f}" height="{h:.2f}"/>'
            )
    parts.append("</g>")
    for value, cls in (
        (pooled.weighted_quartile_1, "quartile"),
        (pooled.weighted_quartile_3, "quartile"),
        (pooled.weighted_median, "median"),
        (pooled.mean, "mean"),
    ):
        x = left + min(max(value, 0.0), 1.0) * plot_w
        parts.append(f'<line class="{cls}" x1="{x:.2f}" x2="{x:.2f}" y1="{top}" y2="{top + plot_h}"/>')
    base = top + plot_h
    parts.append(f'<path class="axis" d="M{left} {top}V{base}H{left + plot_w}"/>')
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        x = left + tick * plot_w
        parts.append(
            f'<path class="axis" d="M{x:.2f} {base}v4"/>'
            f'<text x="{x:.2f}" y="{base + 15}" text-anchor="middle">{tick:g}</text>'
        )
    parts.append(
        f'<text x="{left - 4}" y="{top + 8}" text-anchor="end">{_compact(tallest)}</text>'
        f'<text x="{left - 4}" y="{base}" text-anchor="end">0</text>'
        f'<text x="{left + plot_w / 2:.0f}" y="{height - 2}" text-anchor="middle">FLIP error</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


def _figure(
    record: PairRecord, picture: Picture, caption: str, flip: Optional[Picture] = None, figure_id: Optional[str] = None
) -> str:
    """A picture of a pair. ``flip``: the test picture, which the figure can show in place."""
    w, h = record.thumbnail_size
    name = os.path.basename(record.test if picture.kind == "test" else record.reference)
    alt = {
        "reference": f"reference {name}",
        "test": f"test {name}",
        "error": f"FLIP error map of {os.path.basename(record.test)}",
        "exposure": f"exposure map of {os.path.basename(record.test)}",
    }[picture.kind]
    data = f'data-thumbnail="{_url(picture.thumbnail)}" data-full="{_url(picture.full)}"'
    if flip is not None:
        data += (
            f' data-flip-thumbnail="{_url(flip.thumbnail)}" data-flip-full="{_url(flip.full)}"'
            f' data-alt="{_esc(alt)}" data-flip-alt="{_esc("test " + os.path.basename(record.test))}"'
        )
    role = ' class="flip-view"' if flip is not None else ""
    if figure_id is not None:
        role += f' id="{figure_id}"'
    caption_html = (
        f'<span class="flip-caption" data-caption="{_esc(caption)}" data-flip-caption="Test">{_esc(caption)}</span>'
        if flip is not None
        else _esc(caption)
    )
    return (
        f'<figure{role}><div class="frame"><img src="{_url(picture.thumbnail)}" {data} alt="{_esc(alt)}" '
        f'width="{w}" height="{h}" loading="lazy" decoding="async"></div>'
        f'<figcaption>{caption_html} <a class="full-link" href="{_url(picture.full)}">full size'
        f'<span class="hidden-label">: {_esc(alt)}</span></a></figcaption></figure>'
    )


def shown_name(record: PairRecord) -> str:
    """The name a pair goes by on the page: its test image's, or, for a reference whose test image
    is missing, the reference's (the file that is there)."""
    return os.path.basename(record.test or record.reference)


def _path_text(what: str, path: str) -> str:
    return f"{what} <code>{_esc(path)}</code>" if path else f"no {what} image"


def _card(record: PairRecord, settings: ReportSettings) -> str:
    test_name = shown_name(record)
    title_id = f"pair-{record.index}-title"
    head = (
        f'<article class="pair" id="pair-{record.index}" tabindex="-1" aria-labelledby="{title_id}" '
        f'data-flipped="false" data-full="false">'
        f'<h3 id="{title_id}"><span class="num">{record.index}.</span> {_esc(test_name)}</h3>'
        f'<p class="paths">{_path_text("test", record.test)}, {_path_text("reference", record.reference)}</p>'
    )
    if record.failure is not None:
        badge = "bad" if settings.gate is None or _fails_gate(record, settings) else ""
        return (
            head + f'<p class="failure"><span class="badge {badge}">not evaluated</span> '
            f"{_esc(record.failure)}</p></article>"
        )
    pooled = _pooled(record)
    over = _over(record, settings.gate)
    values = [
        f'<span class="{"bad" if c.key in over else ""}">{_esc(c.label)} '
        f"<strong>{getattr(pooled, c.field):.6f}</strong></span>"
        for c in COLUMNS
    ]
    values.insert(4, f"<span>Min <strong>{pooled.min:.6f}</strong></span>")
    status = '<span class="badge bad">over the gate</span> ' if over else ""
    details = [f"{record.size[0]} &times; {record.size[1]} pixels"]
    if settings.timing:
        details.append(f"evaluated in {record.seconds:.3f} s")
    if record.exposures is not None:
        start, stop, count = record.exposures
        details.insert(
            0,
            f"exposures {start:.4f} to {stop:.4f} stops, {count} of them; pictures shown "
            f"tone mapped ({_esc(settings.tone_mapper)}) at {record.shown_exposure:.4f} stops",
        )
    pictures = {p.kind: p for p in record.pictures}
    shrunk = any(p.thumbnail != p.full for p in record.pictures)
    # The visible label starts each button's name; the hidden part says which pair it acts on.
    of_pair = f'<span class="hidden-label"> of {_esc(test_name)}</span>'
    controls = [
        f'<button type="button" class="flip" aria-pressed="false" aria-controls="pair-{record.index}-view" '
        f'aria-keyshortcuts="F">Flip reference / test{of_pair} <kbd>F</kbd></button>'
    ]
    if shrunk:
        controls.append(f'<button type="button" class="full-size" aria-pressed="false">Full size{of_pair}</button>')
    figures = [
        _figure(
            record, pictures["reference"], "Reference", flip=pictures["test"], figure_id=f"pair-{record.index}-view"
        ),
        _figure(record, pictures["test"], "Test"),
        _figure(record, pictures["error"], "FLIP error map"),
    ]
    if "exposure" in pictures:
        figures.append(_figure(record, pictures["exposure"], "Exposure map"))
    figures.append(
        f'<figure class="histogram-figure">{histogram_svg(record, f"pair-{record.index}-histogram")}'
        f'<figcaption>Weighted histogram (FLIP sum per megapixel): <span class="key mean">mean</span>, '
        f'<span class="key median">weighted median</span>, <span class="key quartile">quartiles</span>'
        f"</figcaption></figure>"
    )
    scale = (
        "thumbnails: each pixel the mean of a block of the image, the largest error of the block in the error map"
        if shrunk
        else "at full size"
    )
    return (
        head + f'<p class="values">{status}{" ".join(values)}</p>'
        f'<p class="details">{"; ".join(details)}; {scale}</p>'
        f'<div class="controls">{"".join(controls)}</div>'
        f'<div class="pictures">{"".join(figures)}</div></article>'
    )


def render_page(records: Sequence[PairRecord], settings: ReportSettings, account: Optional[Account] = None) -> str:
    """The report page (HTML text) of ``records`` (any order; each pair once); ``account``: the
    run's (counted from ``records`` when not given)."""
    ordered = default_order(records, settings.gate)
    title = f"FLIP report: {len(records)} pair(s)"
    ldr = not settings.hdr if settings.ldr is None else settings.ldr
    heading = "FLIP report" if settings.hdr and ldr else f"{'HDR' if settings.hdr else 'LDR'}-FLIP report"
    cards = "\n".join(_card(r, settings) for r in ordered)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
{_GENERATOR_MARK} {_esc(settings.version)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_esc(title)}</title>
<style>
{PAGE_STYLE}
</style>
</head>
<body>
<a class="skip" href="#pairs-table">Skip to the pairs table</a>
<header><h1>{_esc(heading)}</h1></header>
<main>
{_summary(records, settings, account)}
{_table(ordered, settings)}
<section aria-labelledby="details-title">
<h2 id="details-title">Pictures</h2>
<noscript><p class="hint">Sorting, flipping and full-size viewing need JavaScript; the pictures and
links work without it.</p></noscript>
<p class="hint">Reference, test and error map at one scale. <kbd>F</kbd> (or the flip button) shows the
test image in place of the reference in the pair that has the focus.</p>
<div id="pair-cards">
{cards}
</div>
</section>
</main>
<script>
{PAGE_SCRIPT}
</script>
</body>
</html>
"""


def stage_page(
    staging: Staging,
    out: Output,
    records: Sequence[PairRecord],
    settings: ReportSettings,
    account: Optional[Account] = None,
) -> None:
    """Stages ``index.html`` (claimed as ``out``) for ``records``: every pair of the run, evaluated
    or not; ``account``: the run's (counted from ``records`` when not given)."""
    staging.write(out, write_text_file(render_page(records, settings, account)))
