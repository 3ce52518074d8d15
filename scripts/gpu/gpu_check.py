"""The steps of scripts/gpu/gpu_check.sh (whose header is the user's guide), their verdicts, the summary.

Standard library only: the dry run needs no torch, and the summary is written where torch or the
build is broken. Each step runs in its own process group, so that a stopped step takes its children
with it; with a budget, RESERVE_S stays free for the kill grace and the summary. PROMISES maps each
promise to the results that decide it: smoke.py's CHECK lines (bounds from flip_loss/gpu_agreement.py),
named steps, or TARGETS (the README's, set for one H200; a run on another GPU is judged against them
too, and names it). Only an ok result confirms and only a failed one breaks a promise; a target
without its number is a MISS that says why.
"""

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import shlex
import signal
import subprocess
import sys
import time
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESERVE_S = 10  # kept free at the end of a budget: GRACE_S, then the summary
GRACE_S = 5  # between SIGTERM and SIGKILL of a stopped step


class Step(NamedTuple):
    name: str
    min_s: int  # with a budget: not started with less time left
    argv: list
    env: dict = {}
    kind: str = "plain"  # how its log is read: device, build, smoke, sanitizer, pytest, plain


# The GPUs as the driver and torch see them; their capabilities set the build's TORCH_CUDA_ARCH_LIST.
DEVICE_PY = (
    'import os, torch; os.system("nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader"); '
    'print("torch", torch.__version__, "CUDA", torch.version.cuda, flush=True); '
    '[print(f"GPU {i}: {torch.cuda.get_device_name(i)}, capability %d.%d" % torch.cuda.get_device_capability(i)) '
    'for i in range(torch.cuda.device_count())]; torch.cuda.is_available() or exit("torch sees no CUDA device")'
)


def steps(py, out):
    """The check, most decisive first. A sanitizer's small tiled-backward scratch makes several bands,
    the CUDA memory cache off lets memcheck see an access past a tensor; the torch.compile tests
    (a cold inductor cache: minutes) come last."""
    logs = os.path.join(out, "logs")
    pytest = [py, "-m", "pytest", "tests/gpu/test_cuda.py", "tests/gpu/test_cuda_graphs.py", "-q", "-rfEs"]
    pytest += ["-p", "no:cacheprovider"] + (["-n", "4"] if importable(py, "xdist") else [])
    timeout = ["--timeout", "60"] if importable(py, "pytest_timeout") else []  # one hung test fails alone
    sanitize = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    small_bands = {"FLIP_LOSS_CUDA_BACKWARD_SCRATCH": "200000"}

    def sanitizer(tool, env):
        argv = ["compute-sanitizer", "--tool", tool, "--error-exitcode", "9", py, "scripts/gpu/sanitize_case.py"]
        return Step(tool, 30 if tool != "synccheck" else 20, argv, {**sanitize, **env}, "sanitizer")

    return [
        Step("device", 5, [py, "-c", DEVICE_PY], kind="device"),
        Step("build", 60, [py, "setup.py", "build_ext", "--inplace"], {"FLIP_LOSS_CUDA": "1"}, "build"),
        Step("smoke", 20, [py, "scripts/gpu/smoke.py"], kind="smoke"),
        Step("smoke_rows", 15, [py, "scripts/gpu/smoke.py", "--rows"], kind="smoke"),
        sanitizer("memcheck", small_bands),
        sanitizer("racecheck", {}),
        sanitizer("synccheck", {}),
        Step("gpu_bench", 20, [py, "benchmarks/gpu_bench.py", "--quick", "--json", f"{logs}/gpu_bench.json"]),
        Step("hdr_bench", 15, [py, "benchmarks/hdr_bench.py", "--device", "cuda", "--quick", "--json", f"{logs}/hdr_bench.json"]),
        Step("tests", 30, pytest + timeout + ["-k", "not compile"], kind="pytest"),
        # A read of scratch that no phase of its band wrote turns a gradient NaN.
        Step("nan_scratch", 20, pytest + timeout + ["-k", "(backward or matches_cpu) and not compile"],
             {"FLIP_LOSS_CUDA_DEBUG_NAN_SCRATCH": "1", **small_bands}, "pytest"),
        Step("tests_compile", 30, pytest + ["-k", "compile"], kind="pytest"),
    ]  # fmt: skip


def importable(py, module):
    return subprocess.run([py, "-c", f"import {module}"], capture_output=True).returncode == 0


# ---- the speed targets: (name, benchmark, row, field or (field, divisor row), unit, at most)
TARGETS = [
    ("LDR forward 1920x1080", "gpu_bench", "1920x1080", "forward_ms", "ms", 0.25),
    ("LDR forward+backward 1920x1080", "gpu_bench", "1920x1080", "fwd_bwd_ms", "ms", 0.5),
    ("LDR forward+backward 8x512x512", "gpu_bench", "8x512x512", "fwd_bwd_ms", "ms", 1.0),
    ("HDR forward+backward 1920x1080, automatic exposures", "hdr_bench", "automatic", "fwd_bwd_ms", "ms", 10.0),
    ("LDR forward+backward 1920x1080 extra peak memory", "gpu_bench", "1920x1080", "fwd_bwd_extra_MiB", "MiB", 100.0),
    ("LDR forward+backward 3840x2160 / 1920x1080 time", "gpu_bench", "3840x2160", ("fwd_bwd_ms", "1920x1080"), "x", 4.5),
]  # fmt: skip


def row(data, key):
    return next((r for r in data.get("rows", []) if key in (r.get("case"), r.get("exposures"))), {})


def number(data, key, field):
    if isinstance(field, tuple):
        top, bottom = row(data, key).get(field[0]), row(data, field[1]).get(field[0])
        value = top / bottom if all(isinstance(v, (int, float)) for v in (top, bottom)) and bottom else None
    else:
        value = row(data, key).get(field)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def fmt(value, unit):
    return {"ms": f"{value:.3f} ms", "MiB": f"{value:.0f} MiB"}.get(unit, f"{value:.2f}{unit}")


def judge(benches, results):
    """One dict per target (name, verdict PASS/MISS, value, unit, target, line)."""
    verdicts = []
    for name, source, key, field, unit, target in TARGETS:
        value = number(benches[source], key, field) if benches[source] else None
        if value is None:
            why = "no such row in its JSON" if benches[source] else "no JSON"
            verdict, measured = "MISS", f"not measured ({why}; {source}: {results.get(source, ('', 'not run yet'))[1]})"
        else:
            verdict, measured = ("PASS" if value <= target else "MISS"), fmt(value, unit)
        line = f"{verdict} {name}: {measured} (target {fmt(target, unit)})"
        verdicts.append(dict(name=name, verdict=verdict, value=value, unit=unit, target=target, line=line))
    return verdicts


# ---- the promises: (text, ("checks", smoke.py's promise) | ("steps", names) | ("targets",))
PROMISES = [
    ("the CUDA kernels build for this GPU", ("steps", ("build",))),
    ("maps within the promised bound of the CPU's (README, GPU and CPU agreement)", ("checks", "maps")),
    ("gradients (and kept sensitivities) within the promised bound of the CPU's, relative to their scale", ("checks", "gradients")),
    ("HDR-FLIP's winning exposure the CPU's but at near-ties (under 0.1 % of pixels)", ("checks", "hdr_index")),
    ("identical images give exactly 0 on the device (eps = 0)", ("checks", "zero")),
    ("swapping test and reference gives the same bits (map) and swaps the gradients", ("checks", "symmetry")),
    ("no out-of-bounds or misaligned memory access in any kernel (compute-sanitizer memcheck)", ("steps", ("memcheck",))),
    ("no shared-memory data race in any kernel (racecheck)", ("steps", ("racecheck",))),
    ("no barrier misuse in any kernel (synccheck)", ("steps", ("synccheck",))),
    ("the speed targets (set for one H200; README, Speed)", ("targets",)),
    ("tests/gpu/test_cuda.py and tests/gpu/test_cuda_graphs.py pass on a GPU", ("steps", ("tests", "tests_compile"))),
    ("the tiled backward reads only the scratch its band wrote (NaN-filled scratch)", ("steps", ("nan_scratch",))),
]  # fmt: skip
SMOKE_STEPS = ("smoke", "smoke_rows")
CHECK = re.compile(r"^CHECK (\w+) (PASS|FAIL) (\S+) (.*)$", re.M)
MEASURED = re.compile(r"([0-9.]+(?:e[+-]?[0-9]+)?|inf) of scale \(bound ([0-9.e+-]+)\)")


def worst_measured(texts):
    """The largest measured difference per dtype against its bound, from CHECK lines' texts."""
    worst = {}
    for what in texts:
        m, dtype = MEASURED.search(what), next((d for d in ("float32", "float64") if d in what), None)
        if m and dtype and (dtype not in worst or float(m.group(1)) > worst[dtype][0]):
            worst[dtype] = (float(m.group(1)), m.group(2))
    return "; ".join(f"worst {v:.2g} (bound {b}) in {d}" for d, (v, b) in sorted(worst.items()))


def promise_verdict(kind, what, results, checks, finished):
    """CONFIRMED, CONFIRMED so far (some results still missing), BROKEN or NOT CHECKED, with why."""
    if kind == "targets":
        lines = [t["line"] for t in what if t["value"] is not None]
        missed = [t["name"] for t in what if t["verdict"] == "MISS" and t["value"] is not None]
        tail = f"; {len(what) - len(lines)} not measured" if len(lines) < len(what) else ""
        if not lines:
            return "NOT CHECKED (no benchmark measured a target)"
        if missed:
            return f"BROKEN ({len(missed)} of {len(lines)} measured targets missed: {', '.join(missed)}{tail})"
        return f"CONFIRMED ({len(lines)} of {len(what)} targets met{tail})"
    said = {n: results.get(n, ("", "not run yet")) for n in (what if kind == "steps" else SMOKE_STEPS)}
    complete = finished if kind == "checks" else {n for n, (status, _) in said.items() if status == "ok"}
    missing = "; ".join(f"{n}: {text}" for n, (_, text) in said.items() if n not in complete)
    if kind == "steps":
        failed = "; ".join(f"{n}: {text}" for n, (status, text) in said.items() if status == "failed")
        done = "; ".join(f"{n}: {text}" for n, (status, text) in said.items() if status == "ok")
    else:  # smoke.py's CHECK lines of promise `what`, from every smoke step that ran
        mine = [c for c in checks if c[0] == what]
        bad = [c for c in mine if c[1] == "FAIL"]
        failed = bad and f"{len(bad)} of {len(mine)} checks failed; first: {bad[0][2]} {bad[0][3]}"
        measured = worst_measured(c[3] for c in mine)
        done = mine and f"{len(mine)} checks: {', '.join(sorted({c[2] for c in mine}))}" + (
            measured and f"; {measured}"
        )
    if failed:
        return f"BROKEN ({failed})"
    if not done:
        return f"NOT CHECKED ({missing or 'no CHECK lines'})"
    return f"CONFIRMED so far ({done}); NOT CHECKED: {missing}" if missing else f"CONFIRMED ({done})"


def read_log(out, name, suffix="log"):
    try:
        with open(os.path.join(out, "logs", f"{name}.{suffix}"), errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def read_json(out, name):
    try:
        data = json.loads(read_log(out, name, "json"))
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def write_outputs(out, results, state):
    """SUMMARY.txt, bench.json and bench.md from the results so far; each replaced whole."""
    benches = {b: read_json(out, b) for b in ("gpu_bench", "hdr_bench")}
    targets = judge(benches, results)
    checks = [c for s in SMOKE_STEPS for c in CHECK.findall(read_log(out, s))]
    finished = {s for s in SMOKE_STEPS if re.search(r"^smoke: (ok|FAILED)", read_log(out, s), re.M)}  # all checks ran
    gpu = next((b["gpu"] for b in benches.values() if b and b.get("gpu")), "no benchmark ran")
    lines = [f"== SUMMARY ({state})"] + [f"RESULT {n}: {text}" for n, (_, text) in results.items()]
    lines.append("== PROMISES (what the results above confirm or break; PROMISES in scripts/gpu/gpu_check.py)")
    lines += [f"PROMISE {text}: {promise_verdict(kind, what[0] if what else targets, results, checks, finished)}"
              for text, (kind, *what) in PROMISES]  # fmt: skip
    lines += [f"== TARGETS (measured on: {gpu}; float32, ppd 67, eager calls)"] + [t["line"] for t in targets]
    bench_md = "".join(f"# {n}\n\n{read_log(out, n)}\n" for n in benches)
    for name, text in [
        ("SUMMARY.txt", "\n".join(lines) + "\n"),
        ("bench.json", json.dumps(dict(targets=targets, **benches), indent=1)),
        ("bench.md", bench_md),
    ]:
        with open(os.path.join(out, name + ".tmp"), "w") as f:
            f.write(text)
        os.replace(os.path.join(out, name + ".tmp"), os.path.join(out, name))


def run(argv, env, log_path, seconds):
    """(exit status, whether it was stopped at `seconds`), the output in log_path; the whole process
    group is stopped, also when this script is (a CI job's timeout)."""
    with open(log_path, "w") as log:
        p = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        try:
            return p.wait(timeout=seconds), False
        except subprocess.TimeoutExpired:
            return stop(p), True
        except BaseException:
            stop(p)
            raise


def stop(p):
    """SIGTERM to the step's process group, SIGKILL to what is left of it after GRACE_S."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=GRACE_S)
    return p.wait()


def read_result(step, log, rc, stopped, took, env):
    """(status, text) of a step that ran: status ok, failed, stopped (at the budget) or skipped (a
    compute-sanitizer that refuses the GPU: no verdict on the kernels)."""
    last = next((s.strip(" =") for s in reversed(log.splitlines()) if s.strip()), "")[:200]
    where = f"(logs/{step.name}.log)"
    found = ""  # what a step stopped at the budget had found by then
    if step.kind == "smoke":
        passed, failed = (len(re.findall(rf"^CHECK \w+ {w} ", log, re.M)) for w in ("PASS", "FAIL"))
        found = failed and f"{failed} checks failed"
        if rc == 0:
            return "ok", f"ok: {passed} checks agree with the CPU ({took} s)"
    elif step.kind == "sanitizer":
        refused = re.search(r".*(device not supported|error 999|CUDA_ERROR_UNKNOWN).*", log, re.I)
        if refused and "sanitize_case: done" not in log:
            return "skipped", f"SKIPPED: compute-sanitizer does not work on this GPU ({refused[0].strip(' =')[:120]})"
        errors = (re.findall(r"ERROR SUMMARY: \d+ errors?", log) or ["no ERROR SUMMARY line"])[-1]
        sections = len(re.findall(r"^sanitize_case: .*: done", log, re.M))
        findings = len(re.findall(r"^========= (Invalid|Race|Barrier|Uninitialized|Program hit)", log, re.M))
        found = findings and f"{findings} findings"
        if rc == 0 and "sanitize_case: done" in log:
            return "ok", f"clean, {sections} sections ({took} s; {errors})"
        if not stopped:  # whose kernels the findings name: flip's, or PyTorch's own
            ours = len(re.findall(r"^=========\s+at .*flip::", log, re.M))
            return "failed", f"FINDINGS or failure (rc {rc}): {errors}, {ours} stack lines in flip:: {where}"
    elif rc == 0:
        device = "; ".join(re.findall(r"^(?:GPU 0: |torch ).*", log, re.M))
        arch = env.get("TORCH_CUDA_ARCH_LIST", "setup.py's default")
        text = {"device": device, "build": f"ok, TORCH_CUDA_ARCH_LIST={arch}", "pytest": last}.get(step.kind)
        return "ok", f"{text or 'ok'} ({took} s)"
    if stopped and not found:
        return "stopped", f"STOPPED at the budget after {took} s: {last} {where}"
    return "failed", f"FAILED (rc {rc}, {took} s{'; ' + found if found else ''}): {last} {where}"


def skip_reason(step, results, no_sanitizer, left):
    if "build" in results and results["build"][0] not in ("ok", "planned"):  # every step after it needs it
        return f"needs the build (build: {results['build'][1]})"
    if step.kind == "sanitizer" and no_sanitizer:
        return no_sanitizer
    if left is not None and left < step.min_s:
        return f"no time ({max(left, 0)} s left of the budget, {step.min_s} s needed)"
    return ""


def check(out, budget, dry_run, plan, env):
    """Runs the plan; returns the exit status (0 all ok, 1 a step failed, 2 none failed but not all
    ran to their end)."""
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    for name in [f"{s.name}.log" for s in plan] + ["gpu_bench.json", "hdr_bench.json"]:
        if os.path.exists(os.path.join(out, "logs", name)):
            os.remove(os.path.join(out, "logs", name))
    start, clock, results = time.monotonic(), 0, {}  # clock: the dry run's, each step taking its min_s
    no_sanitizer = "" if dry_run or shutil.which("compute-sanitizer") else "compute-sanitizer is not installed"
    state = f"{'DRY RUN: nothing built or run; ' if dry_run else ''}budget {f'{budget} s' if budget else 'none'}"
    print(f"gpu_check: outputs in {out}; {state}", flush=True)
    write_outputs(out, results, f"partial: running, or stopped; {state}")
    step = None
    try:
        for n, step in enumerate(plan, 1):
            at = clock if dry_run else int(time.monotonic() - start)
            left = budget - at - RESERVE_S if budget else None
            why = skip_reason(step, results, no_sanitizer, left)
            command = shlex.join([f"{k}={v}" for k, v in step.env.items()] + step.argv)
            print(f"PLAN {n} {step.name} at {at} s, min {step.min_s} s: {f'SKIPPED: {why}' if why else command}")
            if why:
                results[step.name] = ("skipped", f"SKIPPED: {why}")
            elif dry_run:
                clock += step.min_s
                results[step.name] = ("planned", "planned")
            else:
                if step.name == "build" and "TORCH_CUDA_ARCH_LIST" not in env:  # this machine's GPUs only
                    archs = sorted(set(re.findall(r"capability (\d+\.\d+)", read_log(out, "device"))))
                    env = {**env, "TORCH_CUDA_ARCH_LIST": ";".join(archs)} if archs else env
                t0 = time.monotonic()
                rc, stopped = run(step.argv, {**env, **step.env}, os.path.join(out, "logs", f"{step.name}.log"), left)
                log = read_log(out, step.name)
                results[step.name] = read_result(step, log, rc, stopped, int(time.monotonic() - t0), env)
                if step.kind == "sanitizer" and results[step.name][0] == "skipped":
                    no_sanitizer = results[step.name][1][len("SKIPPED: ") :]
                if results[step.name][0] != "ok":
                    print("\n".join("    " + s for s in log.splitlines()[-15:]))
            print(f"RESULT {step.name}: {results[step.name][1]}", flush=True)
            write_outputs(out, results, f"partial: running, or stopped, after the steps below; {state}")
    except KeyboardInterrupt:
        if step and step.name not in results:  # the step it was running
            results[step.name] = ("stopped", f"STOPPED from outside while running (logs/{step.name}.log)")
        write_outputs(out, results, f"stopped from outside; {state}")
        raise
    took = f"at least {clock} s, each step taking its minimum" if dry_run else f"{int(time.monotonic() - start)} s"
    write_outputs(out, results, f"final, {took}; {state}")
    with open(os.path.join(out, "SUMMARY.txt")) as f:
        print("\n" + f.read(), end="")
    statuses = {status for status, _ in results.values()}
    return 1 if "failed" in statuses else 2 if statuses - {"ok", "planned"} else 0


def interrupted(*_):
    raise KeyboardInterrupt  # a SIGTERM (a CI job's timeout) stops the running step and writes the summary


def main(argv=None):
    p = argparse.ArgumentParser(description="Checks the CUDA kernels on this machine's GPU (see gpu_check.sh).")
    p.add_argument("--budget", type=int, metavar="SECONDS", help="end within this time, skipping what does not fit")
    p.add_argument("--out", default=os.path.join(ROOT, "build", "gpu_check"), help="output folder")
    p.add_argument("--dry-run", action="store_true", help="print the plan and write empty outputs; run nothing")
    args = p.parse_args(argv)
    if args.budget is not None and args.budget <= RESERVE_S:
        p.error(f"--budget must be more than {RESERVE_S} s")
    signal.signal(signal.SIGTERM, interrupted)
    out = os.path.abspath(args.out)
    path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=path)
    try:
        return check(out, args.budget, args.dry_run, steps(sys.executable, out), env)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
