"""The verdicts of the GPU check. Two jobs:

* the speed targets, judged from the benchmarks' JSON: one PASS or MISS line per target with its
  number, and one bench.json that holds the verdicts and both benchmarks' rows;
* the promises (``--promises``): one line per promise of the README and docs/algorithm.md that a
  step of the check tests, CONFIRMED, BROKEN or NOT CHECKED, from the steps' results and the
  CHECK lines of scripts/gpu/smoke.py (``PROMISES`` below is the mapping table: which result
  confirms or breaks which promise).

    python scripts/gpu/summary.py --gpu-bench gpu_bench.json --hdr-bench hdr_bench.json [--json bench.json]
    python scripts/gpu/summary.py --promises --results results.tsv --checks smoke.log --checks smoke_rows.log
    python scripts/gpu/summary.py --list     # the targets, one a line

scripts/gpu/gpu_check.sh runs it after the benchmarks and again at the end (and in its dry run,
with no JSON at all); it needs nothing but the standard library, so the summary is written even
where torch or the build is broken. A target whose number is missing (benchmark skipped, failed or
timed out) is a MISS that says why, never silently dropped: the SUMMARY always has one line per
target. The times are the benchmarks' eager per-call times (gpu_bench.py: back-to-back calls,
median of the rounds; hdr_bench.py: median of single calls): what a training loop without CUDA
graphs pays. The targets are for one H200; a run on another GPU is still judged against them, with
its GPU named in the header line.
"""

import argparse
import json
import math
import os
import re
import sys

# (name, source, how the number is read, unit, target: the measured value must be <= it)
TARGETS = [
    ("LDR forward 1920x1080", "gpu_bench", ("row", "1920x1080", "forward_ms"), "ms", 0.25),
    ("LDR forward+backward 1920x1080", "gpu_bench", ("row", "1920x1080", "fwd_bwd_ms"), "ms", 0.5),
    ("LDR forward+backward 8x512x512", "gpu_bench", ("row", "8x512x512", "fwd_bwd_ms"), "ms", 1.0),
    (
        "HDR forward+backward 1920x1080, automatic exposures",
        "hdr_bench",
        ("row", "automatic", "fwd_bwd_ms"),
        "ms",
        10.0,
    ),
    (
        "LDR forward+backward 1920x1080 extra peak memory",
        "gpu_bench",
        ("row", "1920x1080", "fwd_bwd_extra_MiB"),
        "MiB",
        100.0,
    ),
    (
        "LDR forward+backward 3840x2160 / 1920x1080 time",
        "gpu_bench",
        ("ratio", "3840x2160", "1920x1080", "fwd_bwd_ms"),
        "x",
        4.5,
    ),
]


def load(path):
    """The benchmark's JSON, or (None, why not)."""
    if not path:
        return None, "no JSON given"
    try:
        with open(path) as f:
            return json.load(f), None
    except FileNotFoundError:
        return None, "no JSON written"
    except (OSError, ValueError) as e:
        return None, f"unreadable JSON ({e.__class__.__name__})"


def row(data, key):
    for r in data.get("rows", []):
        if key in (r.get("case"), r.get("exposures")):
            return r
    return {}


def number(data, how):
    if how[0] == "row":
        value = row(data, how[1]).get(how[2])
    else:
        top, bottom = row(data, how[1]).get(how[3]), row(data, how[2]).get(how[3])
        value = top / bottom if isinstance(top, (int, float)) and isinstance(bottom, (int, float)) and bottom else None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return None
    return float(value)


def fmt(value, unit):
    if unit == "ms":
        return f"{value:.3f} ms"
    if unit == "MiB":
        return f"{value:.0f} MiB"
    return f"{value:.2f}{unit}"


def judge(sources, notes):
    """One verdict per target: dicts with name, verdict (PASS/MISS), value, unit, target, line."""
    verdicts = []
    for name, source, how, unit, target in TARGETS:
        data, why = sources[source]
        value = number(data, how) if data is not None else None
        if value is None:
            reason = why or "no such row or value in its JSON"
            if notes.get(source):
                reason += f"; {source}: {notes[source]}"
            verdict, measured = "MISS", f"not measured ({reason})"
        else:
            verdict, measured = ("PASS" if value <= target else "MISS"), fmt(value, unit)
        verdicts.append(
            {
                "name": name,
                "verdict": verdict,
                "value": value,
                "unit": unit,
                "target": target,
                "line": f"{verdict} {name}: {measured} (target {fmt(target, unit)})",
            }
        )
    return verdicts


def context_lines(sources):
    """What the targets do not say but a reader of the summary wants beside them."""
    lines = []
    gpu = next((d.get("gpu") for d, _ in sources.values() if d and d.get("gpu")), None)
    lines.append(f"measured on: {gpu or 'no benchmark ran'} (targets: one H200, float32, ppd 67, eager calls)")
    g, _ = sources["gpu_bench"]
    hd = row(g, "1920x1080") if g else {}
    if hd.get("graph_fwd_bwd_ms") is not None:
        lines.append(
            f"LDR 1920x1080 as CUDA graph replays: forward {hd['graph_forward_ms']:.3f} ms, "
            f"forward+backward {hd['graph_fwd_bwd_ms']:.3f} ms"
        )
    if hd.get("reference_fwd_bwd_ms") and hd.get("fwd_bwd_ms"):
        lines.append(
            f"oracle.py (pure PyTorch) on the same GPU, 1920x1080: forward "
            f"{hd['reference_forward_ms']:.2f} ms, forward+backward {hd['reference_fwd_bwd_ms']:.2f} ms "
            f"({hd['reference_fwd_bwd_ms'] / hd['fwd_bwd_ms']:.0f}x the kernels' time)"
        )
    h, _ = sources["hdr_bench"]
    if h and h.get("reference_fwd_bwd_ms") and row(h, "automatic").get("fwd_bwd_ms"):
        lines.append(
            f"oracle.py HDR forward+backward (automatic exposures): {h['reference_fwd_bwd_ms']:.2f} ms "
            f"({h['reference_fwd_bwd_ms'] / row(h, 'automatic')['fwd_bwd_ms']:.0f}x the kernels' time)"
        )
    return lines


# The promises a GPU run tests and the results that decide them: ("checks", PROMISE) reads smoke.py's
# CHECK lines of that promise (the bounds are those of flip_loss/gpu_agreement.py, printed in each
# line); ("steps", NAMES) reads the RESULT of those steps of gpu_check.sh; ("targets",) the speed
# targets' PASS/MISS lines. The smoke's steps are named in SMOKE_STEPS.
PROMISES = [
    ("the CUDA kernels build for the H200 (sm_90)", ("steps", ("build",))),
    ("maps within the promised bound of the CPU's (README, GPU and CPU agreement)", ("checks", "maps")),
    (
        "gradients (and kept sensitivities) within the promised bound of the CPU's, relative to their scale",
        ("checks", "gradients"),
    ),
    ("HDR-FLIP's winning exposure the CPU's but at near-ties (under 0.1 % of pixels)", ("checks", "hdr_index")),
    ("identical images give exactly 0 on the device (eps = 0)", ("checks", "zero")),
    ("swapping test and reference gives the same bits (map) and swaps the gradients", ("checks", "symmetry")),
    (
        "no out-of-bounds or misaligned memory access in any kernel (compute-sanitizer memcheck)",
        ("steps", ("memcheck",)),
    ),
    ("no shared-memory data race in any kernel (racecheck)", ("steps", ("racecheck",))),
    ("no barrier misuse in any kernel (synccheck)", ("steps", ("synccheck",))),
    ("the speed targets on one H200 (README, Speed)", ("targets",)),
    ("tests/gpu/test_cuda.py and tests/gpu/test_cuda_graphs.py pass on a GPU", ("steps", ("tests", "tests_compile"))),
    ("the tiled backward reads only the scratch its band wrote (NaN-filled scratch)", ("steps", ("nan_scratch",))),
]
SMOKE_STEPS = ("smoke", "smoke_rows")
CHECK = re.compile(r"^CHECK (\w+) (PASS|FAIL) (\S+) (.*)$")
MEASURED = re.compile(r"([0-9.]+(?:e[+-]?[0-9]+)?|inf) of scale \(bound ([0-9.e+-]+)\)")


def read_results(path):
    """gpu_check.sh's results: {step: (status, text)}, status ok, failed, skipped, left-out
    (GPU_CHECK_SKIP) or planned (a dry run); only ok confirms and only failed breaks a promise."""
    results = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t", 2)
                if len(parts) == 3:
                    results[parts[0]] = (parts[1], parts[2])
    except OSError:
        pass
    return results


def read_checks(paths):
    """smoke.py's CHECK lines, (promise, passed, formulation, what), and the names of the logs (the
    steps, e.g. smoke_rows for smoke_rows.log) whose run reached its end."""
    checks, finished = [], set()
    for path in paths:
        try:
            with open(path, errors="replace") as f:
                for line in f:
                    m = CHECK.match(line.strip())
                    if m:
                        checks.append((m.group(1), m.group(2) == "PASS", m.group(3), m.group(4)))
                    elif line.startswith(("smoke: ok", "smoke: FAILED")):
                        finished.add(os.path.basename(path).rsplit(".", 1)[0])
        except OSError:
            pass
    return checks, finished


def worst_measured(lines):
    """The largest measured difference per dtype, against its bound, from CHECK lines' texts."""
    worst = {}
    for what in lines:
        m = MEASURED.search(what)
        dtype = next((d for d in ("float32", "float64") if d in what), None)
        if m and dtype:
            value, bound = float(m.group(1)), m.group(2)
            if dtype not in worst or value > worst[dtype][0]:
                worst[dtype] = (value, bound)
    return "; ".join(f"worst {v:.2g} (bound {b}) in {d}" for d, (v, b) in sorted(worst.items()))


def step_verdict(results, names):
    seen = {n: results[n] for n in names if n in results}
    failed = [f"{n}: {t}" for n, (s, t) in seen.items() if s == "failed"]
    if failed:
        return "BROKEN (" + "; ".join(failed) + ")"
    done = [f"{n}: {t}" for n, (s, t) in seen.items() if s == "ok"]
    missing = [
        f"{n}: {seen[n][1]}" if n in seen else f"{n}: not run yet" for n in names if n not in seen or seen[n][0] != "ok"
    ]
    if not done:
        return "NOT CHECKED (" + "; ".join(missing) + ")"
    if missing:
        return "CONFIRMED so far (" + "; ".join(done) + "); NOT CHECKED: " + "; ".join(missing)
    return "CONFIRMED (" + "; ".join(done) + ")"


def check_verdict(results, checks, finished, promise):
    mine = [c for c in checks if c[0] == promise]
    failed = [c for c in mine if not c[1]]
    formulations = sorted({c[2] for c in mine})
    if failed:
        first = failed[0]
        return f"BROKEN ({len(failed)} of {len(mine)} checks failed; first: {first[2]} {first[3]})"
    # a smoke step that did not reach its end (not run, skipped, timed out, crashed) left checks out
    unfinished = [f"{s}: {results[s][1] if s in results else 'not run yet'}" for s in SMOKE_STEPS if s not in finished]
    if not mine:
        return "NOT CHECKED (" + ("; ".join(unfinished) or "no CHECK lines") + ")"
    measured = worst_measured(c[3] for c in mine)
    text = f"{len(mine)} checks: {', '.join(formulations)}" + (f"; {measured}" if measured else "")
    if unfinished:
        return f"CONFIRMED so far ({text}); NOT CHECKED: " + "; ".join(unfinished)
    return f"CONFIRMED ({text})"


def target_verdict(lines):
    verdicts = [line for line in lines if line.startswith(("PASS ", "MISS "))]
    measured = [line for line in verdicts if "not measured" not in line]
    if not measured:
        return "NOT CHECKED (no benchmark measured a target)"
    missed = [line[5:].split(":")[0] for line in measured if line.startswith("MISS ")]
    unmeasured = len(verdicts) - len(measured)
    tail = f"; {unmeasured} not measured" if unmeasured else ""
    if missed:
        return f"BROKEN ({len(missed)} of {len(measured)} measured targets missed: {', '.join(missed)}{tail})"
    return f"CONFIRMED ({len(measured)} of {len(verdicts)} targets met{tail})"


def promise_lines(results, checks, target_lines):
    """One 'PROMISE <text>: <VERDICT> (...)' line per entry of PROMISES; ``checks`` as read_checks
    gives them."""
    checks, finished = checks
    out = []
    for text, (kind, *what) in PROMISES:
        if kind == "checks":
            verdict = check_verdict(results, checks, finished, what[0])
        elif kind == "steps":
            verdict = step_verdict(results, what[0])
        else:
            verdict = target_verdict(target_lines)
        out.append(f"PROMISE {text}: {verdict}")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpu-bench", help="benchmarks/gpu_bench.py --json output")
    p.add_argument("--hdr-bench", help="benchmarks/hdr_bench.py --json output")
    p.add_argument(
        "--note",
        action="append",
        default=[],
        metavar="SOURCE=TEXT",
        help="what became of a benchmark step (gpu_bench=..., hdr_bench=...), said beside a MISS",
    )
    p.add_argument("--json", help="write the verdicts and both benchmarks' JSON here")
    p.add_argument("--list", action="store_true", help="print the targets' names and exit")
    p.add_argument("--promises", action="store_true", help="print one line per promise and exit")
    p.add_argument("--results", help="gpu_check.sh's step results (name, status, text; tab-separated)")
    p.add_argument("--checks", action="append", default=[], help="a log of scripts/gpu/smoke.py (repeatable)")
    p.add_argument("--targets", help="the PASS/MISS lines of an earlier run of this script")
    args = p.parse_args()
    if args.promises:
        targets = []
        if args.targets:
            try:
                with open(args.targets) as f:
                    targets = f.read().splitlines()
            except OSError:
                pass
        for line in promise_lines(read_results(args.results or ""), read_checks(args.checks), targets):
            print(line)
        return 0
    if args.list:
        for name, *_ in TARGETS:
            print(name)
        return 0
    notes = dict(n.split("=", 1) for n in args.note if "=" in n)
    sources = {"gpu_bench": load(args.gpu_bench), "hdr_bench": load(args.hdr_bench)}
    verdicts = judge(sources, notes)
    for line in context_lines(sources):
        print(line)
    for v in verdicts:
        print(v["line"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "targets": verdicts,
                    "gpu_bench": sources["gpu_bench"][0],
                    "hdr_bench": sources["hdr_bench"][0],
                    "notes": notes,
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
