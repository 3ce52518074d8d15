"""Evaluating one pair of a ``flip-loss`` run into a record: the images loaded on the chosen
device, the exposures of an HDR reference (given, or computed from it), the FLIP maps and their
pooled values."""

import time
from typing import List, NamedTuple, Optional, Tuple

from ..constants import MAX_EXPOSURES
from .errors import UsageError


def resolve_device(choice: str, local_rank: Optional[int] = None):
    """The torch device of ``--device`` (auto: CUDA when available). ``local_rank``: this process's
    rank on its machine under torchrun, which takes CUDA device ``local_rank`` (modulo the number of
    devices, so that more processes than GPUs share them) and makes it the current one."""
    import torch

    if choice == "cpu":
        return torch.device("cpu")
    if choice == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda was requested, but no CUDA device is available (use --device cpu or auto)")
    if not torch.cuda.is_available():
        return torch.device("cpu")
    if local_rank is None:
        return torch.device("cuda")
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


class Exposures(NamedTuple):
    """The exposures of an HDR-FLIP evaluation, in stops, and their count."""

    start: float
    stop: float
    count: int


class Result(NamedTuple):
    """One evaluated pair: the maps as H x W float32 arrays (exposure map None for LDR), the pooled
    values, the evaluation time, the warnings the evaluation raised and the notes about how its
    images were read, and the weighted histogram of the error map (edges, weighted counts) where
    the run draws one."""

    reference: str
    test: str
    exposures: Optional[Exposures]
    error: "object"
    exposure: "object"
    pooled: "object"
    seconds: float
    warnings: List[str]
    notes: List[str]
    histogram: Optional[Tuple["object", "object"]] = None


class Said:
    """What reading a pair's images had to say (notes about how an image was read, warnings), kept
    with the pair: its images may be read in another thread while the pair before is evaluated."""

    def __init__(self):
        self.notes: List[str] = []
        self.warnings: List[str] = []

    def note(self, message: str) -> None:
        if message not in self.notes:
            self.notes.append(message)


class Maps(NamedTuple):
    """A pair's FLIP maps (H x W float32 arrays on the CPU; the exposure map None for LDR-FLIP), the
    evaluation time and the warnings the evaluation gave."""

    error: "object"
    exposure: "object"
    seconds: float
    warnings: List[str]


def is_hdr_pair(reference: str) -> bool:
    """Whether the pair of ``reference`` is evaluated with HDR-FLIP: as in NVIDIA's tool, an
    OpenEXR reference selects it."""
    from ..imageio import is_exr_path

    return is_exr_path(reference)


def _too_many_exposures(start: float, stop: float) -> UsageError:
    return UsageError(
        f"the exposures from {start:g} to {stop:g} stops would need more than {MAX_EXPOSURES} "
        f"exposures (one per stop); give at most {MAX_EXPOSURES} with --num-exposures/-n"
    )


def _fallback_warnings(op: str, device) -> List[str]:
    """The warning ``flip_loss._ops.use_extension`` gives once per process when ``op`` on ``device``
    falls back to the pure-PyTorch oracle, taken over as the run's own warning line (and so
    marked as given, as the library would mark it). Catching it instead, with
    ``warnings.catch_warnings``, would swap the process-wide warning filters while the pair is
    evaluated, which another thread's warnings (or its own catch_warnings) would then run into."""
    from .. import _ops

    notice = _ops.fallback_notice(op, device.type, device.index)
    if notice is None:
        return []
    key, message = notice
    if key in _ops._warned:
        return []
    _ops._warned.add(key)
    return [message]


def _alpha_note(mode: str, background: str, exr: bool = True) -> str:
    """The note of a run that composites an image's alpha by its format's convention (``exr``:
    premultiplied as an OpenEXR file, rather than as a TGA file that says so)."""
    if mode == "straight":
        convention = "straight alpha (the convention of PNG and the other LDR formats)"
    else:
        convention = "premultiplied alpha (" + ("OpenEXR's convention)" if exr else "as the TGA file says)")
    over = "the checkerboard" if background == "checkerboard" else background
    return (
        f"an input image has an alpha channel: it is composited over {over} as {convention} before "
        "FLIP; --alpha straight, premultiplied or ignore and --background black, white or checkerboard "
        "choose otherwise"
    )


class FlipEvaluator:
    """Loads images on the run's device and evaluates FLIP on pairs with the run's settings: each
    pair with its own kind, HDR-FLIP for an OpenEXR reference, LDR-FLIP otherwise (the pairs'
    kinds were checked: an .exr reference has an .exr test image). Keeps the last reference (and
    its exposures) so that the test images of one reference share it; the reading threads may call
    :meth:`reference` at once (the cache is replaced whole). ``given`` holds the exposure options
    (start, stop, count; None where not given), which apply to the HDR-FLIP pairs. ``alpha``
    (``--alpha``: None for each file format's convention, a rule of ``flip_loss.alpha.ALPHA_MODES``,
    or "ignore") and ``background`` say how an image with alpha becomes the RGB image evaluated
    (``flip_loss.alpha.composite``)."""

    def __init__(
        self,
        tone_mapper: str,
        ppd: float,
        device,
        given: Tuple[Optional[float], Optional[float], Optional[int]] = (None, None, None),
        alpha: Optional[str] = None,
        background: str = "black",
    ):
        self.tone_mapper, self.ppd, self.device, self.given = tone_mapper, ppd, device, given
        self.alpha, self.background = alpha, background
        self._reference = (None, None, None)

    def load(self, path: str, said: Said):
        """The image ``path`` on the run's device, as FLIP sees it (an alpha channel composited);
        what there is to say about it goes to ``said``."""
        import torch

        from ..alpha import composite
        from ..image_checks import code_values
        from ..imageio import alpha_convention, is_exr_path, load_image

        try:
            # An 8-bit file as its codes: ldr_flip reads them as their values, from a quarter of the bytes.
            image = load_image(path, keep_alpha=self.alpha != "ignore", codes=True).to(self.device)
        except (FileNotFoundError, ValueError) as exc:
            raise UsageError(str(exc)) from None
        if image.shape[0] != 4:
            return image
        opaque = 255 if image.dtype == torch.uint8 else 1.0
        if bool((image[3] >= opaque).all()):  # opaque everywhere (e.g. a transparent colour no pixel has)
            return image[:3]  # compositing would change nothing: none is done, and no note says so
        if image.dtype == torch.uint8:
            image = code_values(image)
        mode = self.alpha if self.alpha is not None else alpha_convention(path)
        if self.alpha is None:
            said.note(_alpha_note(mode, self.background, is_exr_path(path)))
        linear = is_exr_path(path)
        image = composite(image, mode, self.background, linear)
        # An LDR composite stays in [0, 1] unless premultiplied colour exceeds its alpha (the file's
        # alpha is most likely straight). FLIP clamps it there; it is clamped here, with a warning
        # that says why, instead of the library's warning about inputs out of range.
        if not linear and mode == "premultiplied" and bool((image > 1.0).any()):
            said.warnings.append(
                f"the premultiplied composite of <{path}> exceeds 1 where its colour is above its "
                "alpha, and is clamped to 1 there (is its alpha straight? --alpha straight)"
            )
            image = image.clamp(max=1.0)
        return image

    def reference(self, path: str, said: Said):
        """(image, exposures) of the reference ``path``; exposures None for LDR-FLIP."""
        known = self._reference  # one read of the cache: the reading threads may replace it meanwhile
        if known[0] != path:
            image = self.load(path, said)
            known = (path, image, self._exposures_of(path, image) if is_hdr_pair(path) else None)
            self._reference = known
        return known[1], known[2]

    def _exposures_of(self, reference: str, image) -> Exposures:
        """The exposures HDR-FLIP uses for this reference: the given ones, the others computed from
        it (flip_loss.hdr.exposures_for). A given exposure must be in order with the computed one;
        given exposures too far apart for the automatic count need an explicit count."""
        from ..hdr import exposure_range, exposures_for

        start, stop, count = self.given
        if (start is None) != (stop is None):
            computed_start, computed_stop = (float(v[0]) for v in exposure_range(image, self.tone_mapper))
            given, computed = (
                (f"--start-exposure ({start:g})", f"the stop exposure ({computed_stop:.4f})")
                if start is not None
                else (f"--stop-exposure ({stop:g})", f"the start exposure ({computed_start:.4f})")
            )
            start = computed_start if start is None else start
            stop = computed_stop if stop is None else stop
            if start > stop:
                raise UsageError(
                    f"{given} and {computed} computed from the reference '{reference}' are in the "
                    "wrong order (start must not be above stop); give both exposures"
                )
        if count is None and start is not None and stop - start > MAX_EXPOSURES:
            raise _too_many_exposures(start, stop)
        try:
            _, counts, s, e = exposures_for(image, self.tone_mapper, *self.given)
        except ValueError as exc:
            raise UsageError(
                f"HDR-FLIP exposures for the reference '{reference}': {str(exc).replace('flip_loss: ', '')}"
            ) from None
        exposures = Exposures(float(s[0]), float(e[0]), int(counts[0]))
        if exposures.count > MAX_EXPOSURES:
            raise _too_many_exposures(exposures.start, exposures.stop)
        return exposures

    def maps(self, ref_image, test_image, exposures: Optional[Exposures]) -> Maps:
        """The FLIP maps of a pair's images (``exposures``: those of an HDR-FLIP pair, else None)."""
        import torch

        from ..functional import ldr_flip
        from ..hdr import hdr_flip

        hdr = exposures is not None
        exposure_np = None
        # The CLI's LDR inputs are in [0, 1], so the only warning of flip_loss's own that the
        # evaluation can give is the fallback's, taken over here; any other goes its normal way.
        caught = _fallback_warnings("hdr_flip" if hdr else "ldr_flip", test_image.device)
        t0 = time.perf_counter()
        with torch.no_grad():  # eps=0: the metric itself, no gradient regulariser
            if hdr:
                error_map, exposure_map = hdr_flip(
                    test_image,
                    ref_image,
                    self.ppd,
                    tone_mapper=self.tone_mapper,
                    start_exposure=exposures.start,
                    stop_exposure=exposures.stop,
                    num_exposures=exposures.count,
                    return_exposure_map=True,
                    eps=0.0,
                )
                exposure_np = exposure_map[0].to("cpu", torch.float32).numpy()
            else:
                error_map = ldr_flip(test_image, ref_image, self.ppd, eps=0.0)
        error_np = error_map[0].to("cpu", torch.float32).numpy()
        return Maps(error_np, exposure_np, time.perf_counter() - t0, caught)


def result_of(
    reference: str,
    test: str,
    exposures: Optional[Exposures],
    maps: Maps,
    said: Said,
    histogram_bins: Optional[int] = None,
) -> Result:
    """The record of an evaluated pair: its maps pooled (and, with ``histogram_bins``, the weighted
    histogram of its error map, from the same sort), what reading it said and the warnings of its
    evaluation."""
    from .. import pooling

    if histogram_bins is None:
        pooled, histogram = pooling.pool(maps.error), None
    else:
        pooled, histogram = pooling.pool_with_histogram(maps.error, histogram_bins)
    return Result(
        reference,
        test,
        exposures,
        maps.error,
        maps.exposure,
        pooled,
        maps.seconds,
        said.warnings + maps.warnings,
        said.notes,
        histogram,
    )
