"""The work on one pair of a ``flip-loss`` run, the same in a single process and on every rank of a
torchrun launch: :meth:`PairWork.prepare` reads the pair's images and names and claims its outputs,
:meth:`PairWork.evaluate` evaluates FLIP and renders the outputs (maps, text file, histogram, report
pictures) into the run's sink. What a pair contributes to the run as a whole (its CSV row, its
printed block, the gate's verdict) is recorded by :class:`~.run.Run`."""

import argparse
import os
from typing import Callable, Dict, NamedTuple, Optional, Sequence, Tuple

from .arguments import ppd_of
from .evaluate import Exposures, FlipEvaluator, Result, is_hdr_pair
from .histogram import histogram_writer, import_matplotlib
from .outputs import Names, Output, dynamic_range, output_names, pooled_lines, write_png, write_text_file
from .pairs import check_sizes
from .report import PairRecord, picture_files, stage_pair_images

__all__ = ["PairSettings", "pair_settings", "PreparedPair", "Wanted", "PairWork"]

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


class PreparedPair(NamedTuple):
    """A pair whose images were read and whose outputs were checked and claimed."""

    index: int  # 1-based position among the run's pairs
    reference: str
    test: str
    test_image: "object"  # the decoded test image, or None: read again when evaluated
    names: Names
    outputs: Dict[str, Output]  # the ones written, by kind: "map", "exposure_map", "text", "histogram",
    # "report.<picture>" (see report.picture_files)


class PairWork:
    """Prepares and evaluates the pairs of a run with its ``settings`` on ``device``. ``claim``
    checks and claims a pair's outputs (``[(kind, path, what), ...]`` to ``{kind: Output}``, all or
    none, UsageError); ``sink`` takes the rendered outputs (``sink.write(output, writer)``, as
    :class:`~.outputs.Staging` does)."""

    def __init__(self, settings: PairSettings, device, claim: Callable[[Sequence[Wanted]], Dict[str, Output]], sink):
        self.settings, self.claim, self.sink = settings, claim, sink
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

    def check_sizes(self, reference: str, test: str) -> None:
        """Checks, from the headers, that the pair's images have one size (UsageError)."""
        check_sizes(reference, test, self._sizes)

    def reference_exposures(self, reference: str) -> Optional[Exposures]:
        """The exposures of ``reference`` (None for LDR-FLIP)."""
        return self.evaluator.reference(reference)[1]

    def prepare(self, index: int, reference: str, test: str, keep_test: bool) -> PreparedPair:
        """Reads the pair ``index``'s images (and computes the reference's exposures) and checks and
        claims its outputs; raises UsageError for anything wrong with the pair. ``keep_test``: the
        prepared pair holds the decoded test image (else it is read again when evaluated)."""
        s, args = self.settings, self.settings.args
        hdr = is_hdr_pair(reference)
        self.check_sizes(reference, test)
        exposures = self.reference_exposures(reference)
        test_image = self.evaluator.load(test)
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
        outputs = self.claim(wanted)
        return PreparedPair(index, reference, test, test_image if keep_test else None, names, outputs)

    def evaluate(self, p: PreparedPair) -> Tuple[Result, Optional[PairRecord]]:
        """Evaluates the prepared pair and renders its outputs into the sink; returns the result and,
        with --report, the pair's record."""
        test_image = p.test_image
        if test_image is None and self.settings.args.report is not None:  # the report shows it
            test_image = self.evaluator.load(p.test)
        result = self.evaluator.evaluate(p.reference, p.test, test_image)
        return result, self._render(p, result, test_image)

    def _render(self, p: PreparedPair, result: Result, test_image) -> Optional[PairRecord]:
        """Writes the pair's map, exposure map, text file, histogram and report pictures into the
        sink; ``test_image``: the decoded test image."""
        import numpy as np

        from ..colormaps import MAGMA, VIRIDIS, apply_colormap, to_grey_uint8

        s, args = self.settings, self.settings.args
        if "map" in p.outputs:
            if args.no_magma:
                image = np.repeat(to_grey_uint8(result.error)[..., None], 3, axis=2)
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
            return None
        pictures = {kind[len("report.") :]: out for kind, out in p.outputs.items() if kind.startswith("report.")}
        return stage_pair_images(
            self.sink,
            pictures,
            p.index,
            result,
            self.evaluator.reference(p.reference)[0],
            test_image,
            result.exposures is not None,
            s.tone_mapper,
        )
