"""The work on one pair of a ``flip-loss`` run, the same in a single process and on every rank of a
torchrun launch, in steps that may run in different threads: :meth:`PairWork.read` reads the
pair's images and names its outputs, :meth:`PairWork.claim` claims them, :meth:`PairWork.maps`
evaluates FLIP, :meth:`PairWork.render` pools the maps and renders the outputs (maps, text file,
histogram, report pictures) into the run's sink; :meth:`PairWork.prepare` and
:meth:`PairWork.evaluate` are the first two and the last two in one. What a pair contributes to the
run as a whole (its CSV row, its printed block, the gate's verdict) is recorded by
:class:`~.run.Run`."""

import argparse
import os
from typing import Callable, Dict, NamedTuple, Optional, Sequence, Tuple

from .arguments import ppd_of
from .evaluate import Exposures, FlipEvaluator, Maps, Result, Said, is_hdr_pair, result_of
from .histogram import HISTOGRAM_BINS, histogram_writer, import_matplotlib
from .outputs import Names, Output, dynamic_range, output_names, pooled_lines, write_png, write_text_file
from .pairs import check_sizes
from .report import PairRecord, picture_files, stage_pair_images

__all__ = ["PairSettings", "pair_settings", "ReadPair", "PreparedPair", "Wanted", "PairWork"]

Wanted = Tuple[str, str, str]  # an output a pair asks for: (kind, path, what)


class PairSettings(NamedTuple):
    """What the pairs of a run share. Under torchrun rank 0 sends its own to every rank."""

    args: argparse.Namespace  # the parsed options (output names, map colours, histogram, report)
    hdr: bool  # some pair is evaluated with HDR-FLIP (an OpenEXR reference)
    ldr: bool  # some pair is evaluated with LDR-FLIP
    tone_mapper: str
    ppd: float
    directory: str  # where the maps, text files and histograms go
    write_maps: bool
    write_exposure_maps: bool  # for the HDR-FLIP pairs
    pair_histograms: bool  # a histogram of each pair (not the one overlapped histogram of two)


def pair_settings(args, ldr: bool, hdr: bool, overlapped: bool) -> PairSettings:
    """The settings of a run of checked ``args`` whose pairs are of the kinds ``ldr`` and ``hdr``;
    ``overlapped``: the run draws one histogram of its two pairs instead of one per pair."""
    return PairSettings(
        args,
        hdr,
        ldr,
        args.tone_mapper or "aces",
        ppd_of(args),
        args.directory if args.directory is not None else ".",
        not args.no_error_map,
        hdr and not args.no_exposure_map,
        args.histogram and not overlapped,
    )


class ReadPair(NamedTuple):
    """A pair whose images were read and whose outputs were named, not yet claimed."""

    index: int  # 1-based position among the run's pairs
    reference: str
    test: str
    reference_image: "object"
    test_image: "object"
    exposures: Optional[Exposures]  # an HDR-FLIP pair's; None for LDR-FLIP
    names: Names
    wanted: Sequence[Wanted]
    said: Said


class PreparedPair(NamedTuple):
    """A pair whose images were read and whose outputs were checked and claimed."""

    index: int  # 1-based position among the run's pairs
    reference: str
    test: str
    test_image: "object"  # the decoded test image, or None: read again when evaluated
    names: Names
    outputs: Dict[str, Output]  # the ones written, by kind: "map", "exposure_map", "text", "histogram",
    # "report.<picture>" (see report.picture_files)
    reference_image: "object" = None  # the decoded reference, or None: read again when evaluated
    exposures: Optional[Exposures] = None
    said: Optional[Said] = None


class PairWork:
    """Prepares and evaluates the pairs of a run with its ``settings`` on ``device``. ``claim``
    checks and claims a pair's outputs (``[(kind, path, what), ...]`` to ``{kind: Output}``, all or
    none, UsageError); ``sink`` takes the rendered outputs (``sink.write(output, writer)``, as
    :class:`~.outputs.Staging` does; from the thread that renders). :meth:`read` may run in several
    threads at once (it shares the sizes read and the evaluator's last reference, replaced whole);
    :meth:`render` is called from one thread at a time."""

    def __init__(self, settings: PairSettings, device, claim: Callable[[Sequence[Wanted]], Dict[str, Output]], sink):
        self.settings, self.claim_outputs, self.sink = settings, claim, sink
        args = settings.args
        if args.histogram:
            import_matplotlib()
        self.evaluator = FlipEvaluator(
            settings.tone_mapper,
            settings.ppd,
            device,
            (args.start_exposure, args.stop_exposure, args.num_exposures),
            args.alpha,
            args.background or "black",
        )
        self._sizes: Dict[str, Tuple[int, int]] = {}
        # The weighted histogram of each error map, where a histogram or the report draws it.
        self._histogram_bins = HISTOGRAM_BINS if settings.pair_histograms or args.report is not None else None

    def check_sizes(self, reference: str, test: str) -> None:
        """Checks, from the headers, that the pair's images have one size (UsageError)."""
        check_sizes(reference, test, self._sizes)

    def reference_exposures(self, reference: str) -> Optional[Exposures]:
        """The exposures of ``reference`` (None for LDR-FLIP)."""
        return self.evaluator.reference(reference, Said())[1]

    def read(self, index: int, reference: str, test: str) -> ReadPair:
        """Reads the pair ``index``'s images (and computes the reference's exposures) and names its
        outputs; raises UsageError for anything wrong with the pair."""
        s, args = self.settings, self.settings.args
        said = Said()
        hdr = is_hdr_pair(reference)
        self.check_sizes(reference, test)
        reference_image, exposures = self.evaluator.reference(reference, said)
        test_image = self.evaluator.load(test, said)
        names = output_names(args, reference, test, s.ppd, s.directory, dynamic_range(s.tone_mapper, exposures))
        wanted = [
            (kind, path, what)
            for kind, path, what, wanted in (
                ("map", names.map, "error map", s.write_maps),
                ("exposure_map", names.exposure_map, "exposure map", s.write_exposure_maps and hdr),
                ("text", names.text, "pooled values file", args.textfile),
                ("histogram", names.histogram, "histogram", s.pair_histograms),
            )
            if wanted
        ]
        if args.report is not None:
            wanted += [
                (f"report.{kind}", os.path.join(args.report, relative), what)
                for kind, relative, what in picture_files(index, test, hdr, self._sizes[test])
            ]
        return ReadPair(index, reference, test, reference_image, test_image, exposures, names, wanted, said)

    def claim(self, r: ReadPair, keep_images: bool = True) -> PreparedPair:
        """Checks and claims the outputs of a read pair (UsageError); ``keep_images``: the prepared
        pair holds the decoded images (else they are read again when it is evaluated)."""
        outputs = self.claim_outputs(r.wanted)
        images = (r.reference_image, r.test_image) if keep_images else (None, None)
        return PreparedPair(r.index, r.reference, r.test, images[1], r.names, outputs, images[0], r.exposures, r.said)

    def prepare(self, index: int, reference: str, test: str, keep_test: bool) -> PreparedPair:
        """:meth:`read` and :meth:`claim` in one; ``keep_test``: the prepared pair holds the decoded
        images (else they are read again when it is evaluated)."""
        return self.claim(self.read(index, reference, test), keep_test)

    def reread(self, p: PreparedPair) -> PreparedPair:
        """``p`` with its images, read again where it does not hold them (what reading them says
        was said when it was prepared)."""
        if p.test_image is not None and p.reference_image is not None:
            return p
        again = Said()
        reference_image, exposures = self.evaluator.reference(p.reference, again)
        test_image = self.evaluator.load(p.test, again)
        return p._replace(reference_image=reference_image, test_image=test_image, exposures=exposures)

    def maps(self, p: PreparedPair) -> Maps:
        """The FLIP maps of a pair that holds its images."""
        return self.evaluator.maps(p.reference_image, p.test_image, p.exposures)

    def render(self, p: PreparedPair, maps: Maps) -> Tuple[Result, Optional[PairRecord]]:
        """Pools the pair's maps and writes its map, exposure map, text file, histogram and report
        pictures into the sink; returns the result and, with --report, the pair's record."""
        import numpy as np

        from ..colormaps import MAGMA, VIRIDIS, apply_colormap, to_grey_uint8

        s, args = self.settings, self.settings.args
        result = result_of(p.reference, p.test, p.exposures, maps, p.said or Said(), self._histogram_bins)
        if "map" in p.outputs:
            if args.no_magma:
                grey = to_grey_uint8(result.error)
                image = np.repeat(grey[..., None], 3, axis=2)
            else:
                image = apply_colormap(result.error, MAGMA)
            self.sink.write(p.outputs["map"], write_png(image))
        if "exposure_map" in p.outputs:
            self.sink.write(p.outputs["exposure_map"], write_png(apply_colormap(result.exposure, VIRIDIS)))
        if "text" in p.outputs:
            text = "".join(line + "\n" for line in pooled_lines(result.pooled))
            self.sink.write(p.outputs["text"], write_text_file(text))
        if "histogram" in p.outputs:
            self.sink.write(p.outputs["histogram"], histogram_writer(args, [result]))
        if args.report is None:
            return result, None
        pictures = {kind[len("report.") :]: out for kind, out in p.outputs.items() if kind.startswith("report.")}
        record = stage_pair_images(
            self.sink,
            pictures,
            p.index,
            result,
            p.reference_image,
            p.test_image,
            result.exposures is not None,
            s.tone_mapper,
        )
        return result, record

    def evaluate(self, p: PreparedPair) -> Tuple[Result, Optional[PairRecord]]:
        """Evaluates the prepared pair and renders its outputs into the sink (:meth:`reread`,
        :meth:`maps` and :meth:`render` in one); returns the result and, with --report, the pair's
        record."""
        p = self.reread(p)
        return self.render(p, self.maps(p))
