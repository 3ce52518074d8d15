"""The speed targets of the GPU check, judged from the benchmarks' JSON: one PASS or MISS line per
target with its number, and one bench.json that holds the verdicts and both benchmarks' rows.

    python scripts/gpu/summary.py --gpu-bench gpu_bench.json --hdr-bench hdr_bench.json [--json bench.json]
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
    args = p.parse_args()
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
