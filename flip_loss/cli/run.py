"""A ``flip-loss`` evaluation run as the process that writes the outputs sees it (the only process,
or rank 0 of a torchrun launch): the options and every output checked before anything is written,
what each pair contributes (its CSV row, printed block, gate verdict, report record), the writing
and the exit code; and :func:`run_single`, the run in one process. The work on each pair is
:class:`~.pair_steps.PairWork`'s."""

import collections
import os
import time
from concurrent.futures import Future
from typing import Deque, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from ..constants import TONE_MAPPER_DISPLAY_NAMES
from .run_counts import Account, Outcome, account_of
from .arguments import gate_failures, hdr_option_flags
from .console import Console
from .errors import EXIT_GATE, EXIT_OK, EXIT_PAIRS_FAILED, UsageError
from .evaluate import Exposures, Result, is_hdr_pair, resolve_device
from .histogram import histogram_writer, import_matplotlib
from .outputs import (
    Output,
    OutputGuard,
    Staging,
    check_csv_header,
    check_directory,
    csv_header,
    csv_row,
    csv_skipped_row,
    dynamic_range,
    overlapped_histogram_name,
    pooled_lines,
    round_half_up,
    write_appended_csv,
)
from .pair_steps import PairWork, PreparedPair, Wanted, pair_settings
from .pairs import pairs_of, uses_hdr
from .pipeline import BEHIND, Stages, finished
from .report import IMAGE_FOLDER, PairRecord, check_report_directory, failed_record, page_path, settings_now, stage_page

__all__ = ["Run", "run_single"]


def _exposure_lines(e: Exposures) -> List[str]:
    return [
        f"     Start exposure: {e.start:.4f}",
        f"     Stop exposure: {e.stop:.4f}",
        f"     Number of exposures: {e.count}",
    ]


class Run:
    """One evaluation run: its pairs, the settings they share (``settings``, for its
    :class:`~.pair_steps.PairWork`), the outputs it claims and what its pairs contribute. Every
    input is read and every output checked before the first output is written (in folder mode a
    pair with a problem is reported and skipped instead); the outputs go through a
    :class:`Staging` and appear together at the end. ``device``: where the pairs are evaluated
    (default: ``--device``'s), resolved with the options so that an unusable one is reported
    before any output is checked."""

    def __init__(self, args, console: Console, staging: Staging, device=None):
        # ``args`` come from arguments.parse_arguments, which has checked every option.
        self.args, self.console, self.staging = args, console, staging
        self.gate = args.gate
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
        # Folder mode: the pairs that cannot be evaluated whatever their pixels hold (an ambiguous
        # name, an OpenEXR image paired with an LDR one), by 1-based position, with the reason.
        self.refused: Dict[int, str] = dict(pairing.refused)
        if self.folder_mode:
            # Each pair is evaluated with its own kind: HDR-FLIP for an .exr reference, LDR-FLIP
            # otherwise; the HDR-FLIP options apply to the HDR-FLIP pairs.
            kinds = {is_hdr_pair(ref) for i, (ref, _) in enumerate(self.pairs, 1) if i not in self.refused}
            hdr, ldr = True in kinds, False in kinds
            # A refused .exr pair (an ambiguous name) is what HDR-FLIP options were given for: its
            # row says why it was not evaluated, and the other pairs are.
            hdr_named = hdr or any(is_hdr_pair(ref) for ref, _ in self.pairs)
        else:
            hdr = hdr_named = uses_hdr(self.pairs)
            ldr = not hdr
        if not hdr_named:
            flags = hdr_option_flags(args)
            if flags:
                raise UsageError(
                    f"{', '.join(flags)}: HDR-FLIP option(s) given for LDR images; they apply "
                    "only to OpenEXR (.exr) inputs"
                    + (" and there is no pair of .exr images to evaluate" if self.folder_mode else "")
                )
        self.device = resolve_device(args.device) if device is None else device
        self.overlapped = args.histogram and not self.folder_mode and len(self.pairs) == 2
        self.settings = s = pair_settings(args, ldr, hdr, self.overlapped)
        if args.histogram:
            import_matplotlib()
        self.failures: List[Tuple[str, str]] = []
        # What became of each pair, in pair order (the images without a partner are added at the
        # end): the run's account (run_counts.account_of) is counted from them.
        self.outcomes: List[Outcome] = []
        # What the pairs contribute, in pair order: CSV rows (of evaluated and failed pairs), the
        # results the overlapped histogram draws, the gate's failures (test, [(quantity, value,
        # threshold), ...]).
        self.rows: List[List[str]] = []
        self.evaluated = 0
        self.kept: List[Result] = []
        self.gate_failures: List[Tuple[str, List[Tuple[str, float, float]]]] = []
        # --report: the pairs' records, evaluated or failed, from which the page is written at the end.
        self.report_records: List[PairRecord] = []
        csv_path = args.csv
        if self.folder_mode and csv_path is None:
            csv_path = os.path.join(s.directory, "summary.csv")
        # What --directory is for: it is created only when something is written into it.
        self.directory_needed = args.directory is not None and (
            s.write_maps
            or s.write_exposure_maps
            or args.textfile
            or args.histogram
            or (self.folder_mode and args.csv is None)
        )
        # The outputs that do not depend on a pair: the directory and the CSV file.
        if self.directory_needed:
            check_directory(s.directory)
        new_directories = [s.directory] if self.directory_needed and not os.path.isdir(s.directory) else []
        if args.report is not None:
            new_directories += check_report_directory(args.report)
        self.guard = OutputGuard([path for pair in self.pairs for path in pair], new_directories)
        self.csv_header = csv_header(args.timing)
        self.csv_output = self.guard.claim((csv_path, "CSV file"))[0] if csv_path is not None else None
        if self.csv_output is not None:
            check_csv_header(self.csv_output.real, self.csv_output.path, self.csv_header)
        self.report_page = (
            self.guard.claim((page_path(args.report), "HTML report"))[0] if args.report is not None else None
        )
        self.overlapped_output: Optional[Output] = None
        # Every check above has passed: only now are the images without a partner reported, so
        # that a run refused as a whole says so in one error line.
        for line in pairing.unmatched_lines:
            if self.unmatched_fail:
                console.error(f"{line} (a gated run needs every pair; --allow-unmatched lets it pass)")
            else:
                console.warning(f"{line}, not evaluated")

    # --- before anything is written ------------------------------------------------------------

    def claim(self, wanted: Sequence[Wanted]) -> Dict[str, Output]:
        """Checks and claims a pair's outputs ``(kind, path, what)`` (all or none, UsageError);
        returns them by kind."""
        claimed = self.guard.claim(*[(path, what) for _, path, what in wanted])
        return {kind: out for (kind, _, _), out in zip(wanted, claimed)}

    def claim_overlapped_histogram(self, exposures: Optional[Exposures]) -> None:
        """Checks and claims the one histogram of the run's two pairs (their reference's
        ``exposures``: None for LDR-FLIP)."""
        s = self.settings
        reference, tests = self.pairs[0][0], [test for _, test in self.pairs]
        name = overlapped_histogram_name(
            self.args, reference, tests, s.ppd, s.directory, dynamic_range(s.tone_mapper, exposures)
        )
        self.overlapped_output = self.guard.claim((name, "histogram"))[0]

    def record_failure(self, index: int, reference: str, test: str, message: str) -> None:
        """Folder mode: pair ``index`` could not be evaluated; it is reported and skipped."""
        self.failures.append((reference, test))
        self.outcomes.append(Outcome(False))
        self.rows.append(
            csv_skipped_row(reference, test, message, "fail" if self.gate is not None else "", self.args.timing)
        )
        if self.report_page is not None:
            self.report_records.append(failed_record(index, reference, test, message))
        self.console.error(f"skipped test image <{test}>: {message}")

    def start_writing(self, exposures: Optional[Exposures] = None) -> None:
        """Everything is checked: creates the output directory and prints the header
        (``exposures``: those of the one reference of an HDR-FLIP run, which it shows)."""
        s = self.settings
        if self.directory_needed:
            self.staging.make_directory(s.directory)
        if self.report_page is not None:
            self.staging.make_directory(os.path.join(self.args.report, IMAGE_FOLDER))
        if self.console.verbosity >= 2:
            metric = (
                "LDR-FLIP (LDR pairs) and HDR-FLIP (OpenEXR pairs)"
                if s.hdr and s.ldr
                else "HDR-FLIP"
                if s.hdr
                else "LDR-FLIP"
            )
            lines = [f"Invoking {metric}", f"     Pixels per degree: {round_half_up(s.ppd)}"]
            if s.hdr:
                lines.append(f"     Assumed tone mapper: {TONE_MAPPER_DISPLAY_NAMES[s.tone_mapper]}")
                if not self.folder_mode:  # one reference: its exposures, as the tool prints them
                    lines += _exposure_lines(exposures)
            self.console.lines(lines)

    # --- recording and writing -------------------------------------------------------------------

    def result_lines(self, p: PreparedPair, result: Result, first: bool) -> List[str]:
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
            if result.exposures is not None and self.folder_mode:  # exposures per reference
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
        inputs = (
            (("Reference folder", a.reference_dir), ("Test folder", a.test_dir))
            if self.folder_mode
            else (("Reference", self.pairs[0][0]),)
        )
        s = self.settings
        return settings_now(
            s.ppd,
            s.hdr,
            s.tone_mapper,
            self.gate,
            inputs,
            len(self.pairs) + len(self.unmatched),
            a.timing,
            self.unmatched_fail,
            s.ldr,
        )

    def record_result(self, p: PreparedPair, result: Result, record: Optional[PairRecord]) -> None:
        """What an evaluated pair (its files staged) contributes beyond them: notes, warnings, its
        CSV row, the gate's verdict, its printed block, its report ``record`` (with --report). Called
        in pair order."""
        if record is not None:
            self.report_records.append(record)
        for message in result.notes:
            self.console.note(message)
        for message in result.warnings:
            self.console.warning(message)
        failed = gate_failures(result.pooled, self.gate)
        verdict = "" if self.gate is None else "fail" if failed else "pass"
        self.rows.append(csv_row(result, verdict, self.args.timing))
        self.evaluated += 1
        if self.overlapped:
            self.kept.append(result)
        self.outcomes.append(Outcome(True, over=tuple(q for q, _, _ in failed)))
        if failed:
            self.gate_failures.append((result.test, failed))
        self.console.lines(self.result_lines(p, result, first=self.evaluated == 1))

    def account(self) -> Account:
        """The run's account: every pair's outcome, the images without a partner last."""
        outcomes = self.outcomes + [Outcome(False, unmatched=True) for _ in self.unmatched]
        return account_of(outcomes, self.gate, self.unmatched_fail)

    def finish(self, t_start: float) -> int:
        """Every pair has run: writes the CSV file, the overlapped histogram and the report page,
        publishes every output, prints the account and the gate's verdict (the last line on
        stdout) and returns the exit code."""
        unmatched_verdict = "" if self.gate is None else "fail" if self.unmatched_fail else "skipped"
        rows = self.rows + [
            csv_skipped_row(u.reference, u.test, u.reason, unmatched_verdict, self.args.timing) for u in self.unmatched
        ]
        gate_failures = self.gate_failures
        account = self.account()
        self.console.close()

        if self.overlapped_output is not None:
            self.staging.write(self.overlapped_output, histogram_writer(self.args, self.kept))
        if self.csv_output is not None and (rows or not os.path.exists(self.csv_output.real)):
            self.staging.write(self.csv_output, write_appended_csv(self.csv_output.real, rows, self.csv_header))
        if self.report_page is not None:
            first = len(self.pairs) + 1
            self.report_records.extend(
                failed_record(first + k, u.reference, u.test, u.reason) for k, u in enumerate(self.unmatched)
            )
            stage_page(self.staging, self.report_page, self.report_records, self.report_settings(), account)
        self.staging.commit()

        for test, failed in gate_failures:
            for quantity, value, threshold in failed:
                self.console.gate_failure(
                    f"the {quantity} FLIP error of test image <{test}> is {value:.6f}, "
                    f"above the threshold {threshold:.6f}"
                )
        if self.console.verbosity >= 1:
            lines = [""]
            if self.folder_mode:
                lines.append(account.counts_text())
                lines.append(f"Summary CSV: {self.csv_output.path}")
            if self.report_page is not None:
                lines.append(f"HTML report: {self.report_page.path}")
            lines.append(f"Total time: {time.perf_counter() - t_start:.4f} seconds")
            verdict = account.verdict_text()
            if verdict is not None:
                lines.append(verdict)
            self.console.lines(lines)
        if self.failures or (self.unmatched and self.unmatched_fail):
            return EXIT_PAIRS_FAILED
        return EXIT_GATE if gate_failures else EXIT_OK


class _Failed(NamedTuple):
    """Folder mode: a pair that could not be evaluated, and why."""

    index: int
    reference: str
    test: str
    message: str


def _one_reference(run: Run, work: PairWork, stages: Stages) -> Iterator[Tuple[PreparedPair, Future]]:
    """The pairs of one reference: all are read and their outputs claimed before the first is
    evaluated (a problem ends the run); then each is evaluated (its test image read again ahead of
    it where more than one pair would hold theirs) and written behind."""
    pairs = run.pairs
    for reference, test in pairs:  # the headers first: a wrong size is found fast
        work.check_sizes(reference, test)
    prepared = [
        work.prepare(index, reference, test, keep_test=len(pairs) == 1)
        for index, (reference, test) in enumerate(pairs, 1)
    ]
    exposures = work.reference_exposures(pairs[0][0])
    if run.overlapped:
        run.claim_overlapped_histogram(exposures)
    run.start_writing(exposures)
    for _, read in stages.read_ahead(prepared, work.reread):
        p = read.result()
        yield p, stages.write(work.render, p, work.maps(p))


def _folders(run: Run, work: PairWork, stages: Stages) -> Iterator[Tuple[object, Future]]:
    """Folder mode: each pair read ahead, its outputs claimed and FLIP evaluated here, in pair
    order, and written behind; a pair with a problem is reported (one error line) and skipped."""
    run.start_writing()
    if run.console.verbosity >= 1 and not run.args.no_progress:
        run.console.start_progress(len(run.pairs))

    def read(job):
        index, (reference, test) = job
        if index in run.refused:
            raise UsageError(run.refused[index])
        return work.read(index, reference, test)

    for (index, (reference, test)), read_pair in stages.read_ahead(enumerate(run.pairs, 1), read):
        try:
            p = work.claim(read_pair.result())
        except UsageError as exc:
            yield _Failed(index, reference, test, str(exc)), finished(None)
            continue
        yield p, stages.write(work.render, p, work.maps(p))


def run_single(args, t_start: float, note: Optional[str] = None) -> int:
    """Runs the evaluation of parsed ``args`` in this process alone and returns the exit code;
    ``note``: a warning printed first. Raises UsageError, and KeyboardInterrupt saying whether the
    outputs had been written; either way no temporary file is left behind. The pairs go through a
    pipeline (:mod:`.pipeline`); what each contributes is recorded here, in pair order, once it is
    written."""
    console = Console(args.verbosity)
    staging = Staging()
    try:
        if note is not None:
            console.warning(note)
        run = Run(args, console, staging)
        work = PairWork(run.settings, run.device, claim=run.claim, sink=staging)

        def record(item, written: Future) -> None:
            if isinstance(item, _Failed):
                run.record_failure(*item)
            else:
                run.record_result(item, *written.result())
            console.advance()

        with Stages() as stages:
            waiting: Deque[Tuple[object, Future]] = collections.deque()
            for item in (_folders if run.folder_mode else _one_reference)(run, work, stages):
                waiting.append(item)
                while waiting and (len(waiting) > BEHIND or waiting[0][1].done()):
                    record(*waiting.popleft())
            while waiting:
                record(*waiting.popleft())
        return run.finish(t_start)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(
            "the outputs had been written" if staging.committed else "no output file was written"
        ) from None
    finally:
        console.close()
        staging.discard()
