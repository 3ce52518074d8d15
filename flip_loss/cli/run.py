"""A ``flip-loss`` evaluation run: the order of the work (inputs read and outputs checked before
anything is written; in folder mode pair by pair), what it prints, and the exit code."""
import os
import time
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from .arguments import check_options, gate_failures, hdr_option_flags, parse_gate, ppd_of
from .console import Console
from .errors import EXIT_GATE, EXIT_OK, EXIT_PAIRS_FAILED, UsageError
from .evaluate import Evaluator, Exposures, Result, resolve_device
from .histogram import draw_histogram, import_matplotlib
from .outputs import (Names, Output, OutputGuard, Staging, check_csv_header, check_directory, csv_header, csv_row,
                      csv_skipped_row, dynamic_range, output_names, overlapped_histogram_name, pooled_lines,
                      round_half_up, write_appended_csv, write_png, write_text_file)
from .pairs import check_sizes, pairs_of, stem, uses_hdr
from .report import (IMAGE_FOLDER, PairRecord, check_report_directory, failed_record, page_path, picture_files,
                     settings_now, stage_page, stage_pair_images)

__all__ = ["Console", "Run", "run", "run_single"]

_TONE_MAPPER_NAMES = {"aces": "ACES", "hable": "Hable", "reinhard": "Reinhard"}  # as the tool prints them


def _exposure_lines(e: Exposures) -> List[str]:
    return [f"     Start exposure: {e.start:.4f}", f"     Stop exposure: {e.stop:.4f}",
            f"     Number of exposures: {e.count}"]


class _Prepared(NamedTuple):
    """A pair whose images were read and whose outputs were checked and claimed."""
    index: int                  # 1-based position among the run's pairs
    reference: str
    test: str
    test_image: "object"        # the decoded test image, or None: read again when evaluated
    names: Names
    outputs: Dict[str, Output]  # the ones written, by kind: "map", "exposure_map", "text", "histogram",
                                # "report.<picture>" (see report.picture_files)


class Run:
    """One evaluation run: its pairs, the settings they share and the order of the work. Every
    input is read and every output checked before the first output is written (in folder mode a
    pair with a problem is reported and skipped instead); the outputs go through a
    :class:`Staging` and appear together at the end."""

    def __init__(self, args, console: Console, staging: Staging, device=None):
        check_options(args)
        self.args, self.console, self.staging = args, console, staging
        self.gate = parse_gate(args)
        self.folder_mode = args.reference_dir is not None
        pairing = pairs_of(args)
        self.pairs = pairing.pairs
        for message in pairing.warnings:
            console.warning(message)
        # Images without a partner: with a gate they fail the run (a render that is missing, or has
        # no reference, must not pass a CI gate), unless --allow-unmatched; either way they are
        # rows of the CSV file and of the report.
        self.unmatched = pairing.unmatched
        self.unmatched_fail = self.gate is not None and not args.allow_unmatched
        for line in pairing.unmatched_lines:
            if self.unmatched_fail:
                console.error(f"{line} (a gated run needs every pair; --allow-unmatched lets it pass)")
            else:
                console.warning(f"{line}, not evaluated")
        hdr = uses_hdr(self.pairs)
        if not hdr:
            flags = hdr_option_flags(args)
            if flags:
                raise UsageError(f"{', '.join(flags)}: HDR-FLIP option(s) given for LDR images; they apply "
                                 "only to OpenEXR (.exr) inputs")
        self.configure(hdr, resolve_device(args.device) if device is None else device)
        csv_path = args.csv
        if self.folder_mode and csv_path is None:
            csv_path = os.path.join(self.directory, "summary.csv")
        # What --directory is for: it is created only when something is written into it.
        self.directory_needed = args.directory is not None and (
            self.write_maps or self.write_exposure_maps or args.textfile or args.histogram
            or (self.folder_mode and args.csv is None))
        # The outputs that do not depend on a pair: the directory and the CSV file.
        if self.directory_needed:
            check_directory(self.directory)
        new_directories = [self.directory] if self.directory_needed and not os.path.isdir(self.directory) else []
        if args.report is not None:
            new_directories += check_report_directory(args.report)
        self.guard = OutputGuard([path for pair in self.pairs for path in pair], new_directories)
        self.csv_header = csv_header(args.timing)
        self.csv_output = self.guard.claim((csv_path, "CSV file"))[0] if csv_path is not None else None
        if self.csv_output is not None:
            check_csv_header(self.csv_output.real, self.csv_output.path, self.csv_header)
        self.report_page = (self.guard.claim((page_path(args.report), "HTML report"))[0]
                            if args.report is not None else None)
        self.overlapped_output: Optional[Output] = None

    def configure(self, hdr: bool, device) -> None:
        """The settings the run's pairs share (``self.args``, ``self.folder_mode`` and ``self.pairs``
        set) and what they contribute; the evaluator on ``device``."""
        args = self.args
        self.hdr = hdr
        self.tone_mapper = args.tone_mapper or "aces"
        self.ppd = ppd_of(args)
        self.directory = args.directory if args.directory is not None else "."
        self.write_maps = not args.no_error_map
        self.write_exposure_maps = self.hdr and not args.no_exposure_map
        self.overlapped = args.histogram and not self.folder_mode and len(self.pairs) == 2
        self.failures: List[Tuple[str, str]] = []
        # What the pairs contribute, in pair order: CSV rows (of evaluated and failed pairs), the
        # results the overlapped histogram draws, the gate's failures (test, [(quantity, value,
        # threshold), ...]).
        self.rows: List[List[str]] = []
        self.evaluated = 0
        self.kept: List[Result] = []
        self.gate_failures: List[Tuple[str, List[Tuple[str, float, float]]]] = []
        # --report: the pairs' records, evaluated or failed, from which the page is written at the end.
        self.report_records: List[PairRecord] = []
        self._sizes: Dict[str, Tuple[int, int]] = {}
        if args.histogram:
            import_matplotlib()
        self.evaluator = Evaluator(self.hdr, self.tone_mapper, self.ppd, device,
                                   (args.start_exposure, args.stop_exposure, args.num_exposures))

    # --- before anything is written ------------------------------------------------------------

    def prepare(self, index: int, reference: str, test: str, keep_test: bool) -> _Prepared:
        """Reads the pair ``index``'s images (and computes the reference's exposures) and checks and
        claims its outputs; raises UsageError for anything wrong with the pair."""
        check_sizes(reference, test, self._sizes)
        _, exposures = self.evaluator.reference(reference)
        test_image = self.evaluator.load(test)
        names = output_names(self.args, reference, test, self.ppd, self.directory,
                             dynamic_range(self.tone_mapper, exposures))
        wanted = [(kind, path, what) for kind, path, what, wanted in (
            ("map", names.map, "error map", self.write_maps),
            ("exposure_map", names.exposure_map, "exposure map", self.write_exposure_maps),
            ("text", names.text, "pooled values file", self.args.textfile),
            ("histogram", names.histogram, "histogram", self.args.histogram and not self.overlapped)) if wanted]
        if self.args.report is not None:
            wanted += [(f"report.{kind}", os.path.join(self.args.report, relative), what)
                       for kind, relative, what in picture_files(index, test, self.hdr, self._sizes[test])]
        outputs = self.claim(wanted)
        return _Prepared(index, reference, test, test_image if keep_test else None, names, outputs)

    def claim(self, wanted: Sequence[Tuple[str, str, str]]) -> Dict[str, Output]:
        """Checks and claims a pair's outputs ``(kind, path, what)`` (all or none, UsageError);
        returns them by kind."""
        claimed = self.guard.claim(*[(path, what) for _, path, what in wanted])
        return {kind: out for (kind, _, _), out in zip(wanted, claimed)}

    def prepared_pairs(self):
        """The pairs, ready for evaluation. One reference: all are prepared before the first is
        evaluated, and a problem ends the run. Folder mode: one after the other; a pair with a
        problem is reported (one error line) and skipped."""
        if not self.folder_mode:
            for reference, test in self.pairs:  # the headers first: a wrong size is found fast
                check_sizes(reference, test, self._sizes)
            prepared = [self.prepare(index, reference, test, keep_test=len(self.pairs) == 1)
                        for index, (reference, test) in enumerate(self.pairs, 1)]
            if self.overlapped:
                reference, tests = self.pairs[0][0], [test for _, test in self.pairs]
                range_part = dynamic_range(self.tone_mapper, self.evaluator.reference(reference)[1])
                name = overlapped_histogram_name(self.args, reference, tests, self.ppd, self.directory, range_part)
                self.overlapped_output = self.guard.claim((name, "histogram"))[0]
            self.start_writing()
            yield from prepared
            return
        self.start_writing()
        if self.console.verbosity >= 1 and not self.args.no_progress:
            self.console.start_progress(len(self.pairs))
        for index, (reference, test) in enumerate(self.pairs, 1):
            try:
                prepared = self.prepare(index, reference, test, keep_test=True)
            except UsageError as exc:
                self.record_failure(index, reference, test, str(exc))
                self.console.advance()
                continue
            yield prepared

    def record_failure(self, index: int, reference: str, test: str, message: str) -> None:
        """Folder mode: pair ``index`` could not be evaluated; it is reported and skipped."""
        self.failures.append((reference, test))
        self.rows.append(csv_skipped_row(reference, test, message, "fail" if self.gate is not None else "",
                                         self.args.timing))
        if self.report_page is not None:
            self.report_records.append(failed_record(index, reference, test, message))
        self.console.error(f"skipped test image <{test}>: {message}")

    def start_writing(self) -> None:
        """Everything is checked: creates the output directory and prints the header."""
        if self.directory_needed:
            self.staging.make_directory(self.directory)
        if self.report_page is not None:
            self.staging.make_directory(os.path.join(self.args.report, IMAGE_FOLDER))
        if self.console.verbosity >= 2:
            lines = [f"Invoking {'HDR' if self.hdr else 'LDR'}-FLIP",
                     f"     Pixels per degree: {round_half_up(self.ppd)}"]
            if self.hdr:
                lines.append(f"     Assumed tone mapper: {_TONE_MAPPER_NAMES[self.tone_mapper]}")
                if not self.folder_mode:  # one reference: its exposures, as the tool prints them
                    lines += _exposure_lines(self.evaluator.reference(self.pairs[0][0])[1])
            self.console.lines(lines)

    # --- evaluating and writing -----------------------------------------------------------------

    def stage(self, p: _Prepared, result: Result, test_image) -> None:
        """Writes the pair's map, exposure map, text file, histogram and report pictures (to
        temporary files); ``test_image``: the decoded test image."""
        import numpy as np

        from ..colormaps import MAGMA, VIRIDIS, apply_colormap, to_grey_uint8

        a = self.args
        if "map" in p.outputs:
            if a.no_magma:
                image = np.repeat(to_grey_uint8(result.error)[..., None], 3, axis=2)
            else:
                image = apply_colormap(result.error, MAGMA)
            self.staging.write(p.outputs["map"], write_png(image))
        if "exposure_map" in p.outputs:
            self.staging.write(p.outputs["exposure_map"], write_png(apply_colormap(result.exposure, VIRIDIS)))
        if "text" in p.outputs:
            text = "".join(line + "\n" for line in pooled_lines(result.pooled))
            self.staging.write(p.outputs["text"], write_text_file(text))
        if "histogram" in p.outputs:
            self._stage_histogram(p.outputs["histogram"], [result])
        if self.args.report is not None:
            pictures = {kind[len("report."):]: out for kind, out in p.outputs.items() if kind.startswith("report.")}
            self.report_records.append(stage_pair_images(
                self.staging, pictures, p.index, result, self.evaluator.reference(p.reference)[0], test_image,
                self.hdr, self.tone_mapper))

    def _stage_histogram(self, out: Output, results: Sequence[Result]) -> None:
        a = self.args
        series = [(stem(r.test), r.error, r.pooled) for r in results]
        self.staging.write(out, lambda path: draw_histogram(path, series, a.log, a.y_max,
                                                            not a.exclude_pooled_values))

    def result_lines(self, p: _Prepared, result: Result, first: bool) -> List[str]:
        """The pair's block, as NVIDIA's tool prints it."""
        verbosity = self.console.verbosity
        lines = []
        if verbosity >= 1:
            if verbosity >= 2 or not first:
                lines.append("")
            lines.append(f"FLIP between reference image <{result.reference}> and test image <{result.test}>")
            lines.append(f"     Mean: {result.pooled.mean:.6f}")
        if verbosity >= 2:
            lines += ["     " + line for line in pooled_lines(result.pooled)[1:]]
            if self.hdr and self.folder_mode:  # exposures per reference
                lines += _exposure_lines(result.exposures)
            lines.append(f"     Evaluation time: {result.seconds:.4f} seconds")
            if "map" in p.outputs:
                lines.append(f"     FLIP error map location: {p.names.map}")
            if "exposure_map" in p.outputs:
                lines.append(f"     FLIP exposure map location: {p.names.exposure_map}")
        return lines

    def report_settings(self):
        """What the report's summary says about the run (besides its pairs)."""
        a = self.args
        inputs = ((("Reference folder", a.reference_dir), ("Test folder", a.test_dir)) if self.folder_mode
                  else (("Reference", self.pairs[0][0]),))
        return settings_now(self.ppd, self.hdr, self.tone_mapper, self.gate, inputs,
                            len(self.pairs) + len(self.unmatched), a.timing, self.unmatched_fail)

    def evaluate(self, p: _Prepared):
        """Evaluates the prepared pair and stages its outputs; returns (result, test image)."""
        test_image = p.test_image
        if test_image is None and self.args.report is not None:  # the report shows it
            test_image = self.evaluator.load(p.test)
        result = self.evaluator.evaluate(p.reference, p.test, test_image)
        self.stage(p, result, test_image)
        return result, test_image

    def record_result(self, p: _Prepared, result: Result) -> None:
        """What an evaluated pair (staged) contributes beyond its files: warnings, its CSV row, the
        gate's verdict, its printed block. Called in pair order."""
        for message in result.warnings:
            self.console.warning(message)
        failed = gate_failures(result.pooled, self.gate)
        verdict = "" if self.gate is None else "fail" if failed else "pass"
        self.rows.append(csv_row(result, verdict, self.args.timing))
        self.evaluated += 1
        if self.overlapped:
            self.kept.append(result)
        if failed:
            self.gate_failures.append((result.test, failed))
        self.console.lines(self.result_lines(p, result, first=self.evaluated == 1))

    def execute(self, t_start: float) -> int:
        """Evaluates every pair, writes the outputs and returns the exit code."""
        for p in self.prepared_pairs():
            result, _ = self.evaluate(p)
            self.record_result(p, result)
            self.console.advance()
        return self.finish(t_start)

    def finish(self, t_start: float) -> int:
        """Every pair has run: writes the CSV file, the overlapped histogram and the report page,
        publishes every output, prints the summary and returns the exit code."""
        unmatched_verdict = "" if self.gate is None else "fail" if self.unmatched_fail else "skipped"
        rows = self.rows + [csv_skipped_row(u.reference, u.test, u.reason, unmatched_verdict, self.args.timing)
                            for u in self.unmatched]
        gate_failures = self.gate_failures
        self.console.close()

        if self.overlapped_output is not None:
            self._stage_histogram(self.overlapped_output, self.kept)
        if self.csv_output is not None and (rows or not os.path.exists(self.csv_output.real)):
            self.staging.write(self.csv_output, write_appended_csv(self.csv_output.real, rows, self.csv_header))
        if self.report_page is not None:
            first = len(self.pairs) + 1
            self.report_records.extend(failed_record(first + k, u.reference, u.test, u.reason)
                                       for k, u in enumerate(self.unmatched))
            stage_page(self.staging, self.report_page, self.report_records, self.report_settings())
        self.staging.commit()

        if self.console.verbosity >= 1:
            lines = [""]
            if self.folder_mode:
                done = (f"{self.evaluated} of {len(self.pairs)} pair(s), {len(self.failures)} failed (see the errors "
                        "above)" if self.failures else f"{self.evaluated} pair(s)")
                if self.unmatched:
                    done += f"; {len(self.unmatched)} image(s) without a partner"
                lines.append(f"Evaluated {done}; summary CSV: {self.csv_output.path}")
            if self.report_page is not None:
                lines.append(f"HTML report: {self.report_page.path}")
            lines.append(f"Total time: {time.perf_counter() - t_start:.4f} seconds")
            self.console.lines(lines)
        for test, failed in gate_failures:
            for quantity, value, threshold in failed:
                self.console.gate_failure(f"the {quantity} FLIP error of test image <{test}> is {value:.6f}, "
                                          f"above the threshold {threshold:.6f}")
        if self.failures or (self.unmatched and self.unmatched_fail):
            return EXIT_PAIRS_FAILED
        return EXIT_GATE if gate_failures else EXIT_OK


def run(args, t_start: float) -> int:
    """Runs the evaluation of parsed ``args``; returns the exit code. Raises UsageError, and
    KeyboardInterrupt saying whether the outputs had been written; either way no temporary file
    is left behind. Under torchrun (``WORLD_SIZE`` > 1) folder mode is shared out among the
    ranks (``shard``)."""
    from ..distributed import launched_world

    try:
        world = launched_world()
    except ValueError as exc:
        raise UsageError(f"torchrun's environment: {exc}") from None
    if world is not None:
        from .shard import run_sharded

        return run_sharded(args, t_start, world)
    return run_single(args, t_start)


def run_single(args, t_start: float, note: Optional[str] = None) -> int:
    """:func:`run` in this process alone; ``note``: a warning printed first."""
    console = Console(args.verbosity)
    staging = Staging()
    try:
        if note is not None:
            console.warning(note)
        return Run(args, console, staging).execute(t_start)
    except KeyboardInterrupt:
        raise KeyboardInterrupt("the outputs had been written" if staging.committed
                                else "no output file was written") from None
    finally:
        console.close()
        staging.discard()
