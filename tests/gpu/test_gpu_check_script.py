"""scripts/gpu/gpu_check.sh without a GPU: its dry run (the plan in order, what a budget leaves
out, the outputs); its steps run with stand-ins for the GPU machine's tools (each result read into
its verdict and promise, the build for the local GPU, a failed build skipping what needs it, a
budget ending the run within it, SUMMARY.txt rewritten after every step, a compute-sanitizer that
refuses the GPU); and smoke.py and sanitize_case.py themselves on the CPU (--device cpu), so that a
GPU run does not find their own bugs."""

import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "gpu", "gpu_check.sh")
_spec = importlib.util.spec_from_file_location("gpu_check", os.path.join(ROOT, "scripts", "gpu", "gpu_check.py"))
gpu_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_check)

ORDER = "device build smoke smoke_rows memcheck racecheck synccheck gpu_bench hdr_bench tests nan_scratch tests_compile"
ORDER = ORDER.split()
PLAN = re.compile(r"^PLAN (\d+) (\w+) at (\d+) s, min (\d+) s: (.*)$")


def dry_run(tmp_path, *args):
    """The script's dry run, with a torch that cannot be imported: the plan needs none."""
    (tmp_path / "no_torch" / "torch").mkdir(parents=True)
    (tmp_path / "no_torch" / "torch" / "__init__.py").write_text("raise ImportError('the dry run imported torch')")
    env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=str(tmp_path / "no_torch"))
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", SCRIPT, "--dry-run", "--out", str(out), *args], capture_output=True, text=True, env=env
    )
    plan = [PLAN.match(line).groups() for line in proc.stdout.splitlines() if line.startswith("PLAN ")]
    return proc, out, [dict(n=int(n), name=s, at=int(at), min=int(m), what=w) for n, s, at, m, w in plan]


def summary_of(out):
    """SUMMARY.txt, checked complete: a RESULT line per step in order, a PROMISE line per promise, a
    PASS/MISS line per target; bench.json and bench.md beside it."""
    summary = (out / "SUMMARY.txt").read_text()
    assert [
        line.split(":")[0][len("RESULT ") :] for line in summary.splitlines() if line.startswith("RESULT ")
    ] == ORDER
    promises = [line for line in summary.splitlines() if line.startswith("PROMISE ")]
    assert [p.split(": ")[0][len("PROMISE ") :] for p in promises] == [text for text, _ in gpu_check.PROMISES]
    assert all(re.search(r": (CONFIRMED|BROKEN|NOT CHECKED)", p) for p in promises), promises
    verdicts = [line for line in summary.splitlines() if line.startswith(("PASS ", "MISS "))]
    assert [v.split(": ")[0][5:] for v in verdicts] == [t[0] for t in gpu_check.TARGETS], verdicts
    assert all(re.search(r"\(target [0-9.]+ ?(ms|MiB|x)\)$", v) for v in verdicts), verdicts
    bench = json.loads((out / "bench.json").read_text())
    assert [t["line"] for t in bench["targets"]] == verdicts and set(bench) == {"targets", "gpu_bench", "hdr_bench"}
    assert (out / "bench.md").exists()
    return summary


def promises(summary):
    return {line[len("PROMISE ") :].split(": ")[0]: line.split(": ", 1)[1] for line in summary.splitlines() if line.startswith("PROMISE ")}  # fmt: skip


def test_the_dry_run_prints_the_plan_in_order_and_writes_the_outputs(tmp_path):
    proc, out, plan = dry_run(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [s["name"] for s in plan] == ORDER and [s["n"] for s in plan] == list(range(1, len(ORDER) + 1))
    what = {s["name"]: s["what"] for s in plan}
    assert "FLIP_LOSS_CUDA=1" in what["build"] and "setup.py build_ext --inplace" in what["build"]
    assert what["smoke"].endswith("scripts/gpu/smoke.py") and what["smoke_rows"].endswith("smoke.py --rows")
    for tool in ("memcheck", "racecheck", "synccheck"):
        assert f"compute-sanitizer --tool {tool} " in what[tool] and what[tool].endswith("scripts/gpu/sanitize_case.py")
        assert "PYTORCH_NO_CUDA_MEMORY_CACHING=1" in what[tool]
    assert "FLIP_LOSS_CUDA_BACKWARD_SCRATCH=200000" in what["memcheck"]  # several bands
    assert f"benchmarks/gpu_bench.py --quick --json {out}/logs/gpu_bench.json" in what["gpu_bench"]
    assert f"benchmarks/hdr_bench.py --device cuda --quick --json {out}/logs/hdr_bench.json" in what["hdr_bench"]
    assert "-k 'not compile'" in what["tests"] and what["tests_compile"].endswith("-k compile")
    assert "FLIP_LOSS_CUDA_DEBUG_NAN_SCRATCH=1" in what["nan_scratch"] and "backward" in what["nan_scratch"]
    summary = summary_of(out)
    assert "DRY RUN" in summary and "CONFIRMED" not in summary and "BROKEN" not in summary


def test_a_budget_skips_the_steps_that_would_not_fit(tmp_path):
    proc, out, plan = dry_run(tmp_path, "--budget", "120")
    assert proc.returncode == 2, proc.stdout + proc.stderr  # none failed, not all ran
    assert [s["name"] for s in plan] == ORDER
    for step in plan:  # the dry run's steps each take their minimum
        fits = step["at"] + step["min"] <= 120 - gpu_check.RESERVE_S
        assert fits != step["what"].startswith("SKIPPED: no time"), step
    assert not plan[3]["what"].startswith("SKIPPED") and plan[4]["what"].startswith("SKIPPED")  # smoke_rows, memcheck
    summary = summary_of(out)
    assert "RESULT memcheck: SKIPPED: no time" in summary and "budget 120 s" in summary
    env = dict(os.environ, PYTHON=sys.executable)
    refused = subprocess.run(["bash", SCRIPT, "--dry-run", "--budget", "5"], capture_output=True, text=True, env=env)
    assert refused.returncode != 0 and "--budget must be more than" in refused.stderr


GPU_BENCH = {
    "gpu": "Some GPU",
    "rows": [
        {"case": "1920x1080", "forward_ms": 0.2, "fwd_bwd_ms": 0.6, "fwd_bwd_extra_MiB": 80.0},
        {"case": "3840x2160", "forward_ms": 0.8, "fwd_bwd_ms": 3.0, "fwd_bwd_extra_MiB": 90.0},
        {"case": "8x512x512", "forward_ms": 0.3, "fwd_bwd_ms": 0.9, "fwd_bwd_extra_MiB": 60.0},
    ],
}
# The GPU machine's Python, as the steps call it: canned outputs, switched by FAKE_* variables; each
# call of a step first copies the RESULT lines of SUMMARY.txt as they are, to SNAPSHOTS.
FAKE_PYTHON = """#!/usr/bin/env bash
case "$*" in *"import xdist"*|*"import pytest_timeout"*) exit 1;; esac
{ echo CALL; grep '^RESULT ' "$OUT/SUMMARY.txt"; } >> "$SNAPSHOTS"
case "$*" in
  *"import os, torch"*) echo "torch 2.15.0 CUDA 13.0"; echo "GPU 0: NVIDIA H200, capability 9.0";;
  *setup.py*) echo "TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST"; [ -z "$FAKE_BUILD_FAILS" ] || { echo "nvcc: error"; exit 1; };;
  *"smoke.py --rows"*)
    echo "CHECK maps PASS rows ldr example float32: 2.00e-06 of scale (bound 1e-05)"
    echo "CHECK zero PASS rows ldr example float32 ldr_flip(x, x), eps=0: largest value 0 (bound: exactly 0)"
    echo "smoke: ok";;
  *smoke.py*)
    [ -z "$FAKE_SMOKE_HANGS" ] || { sleep 600 & echo $! > "$OUT/sleep.pid"; wait; }
    echo "CHECK maps PASS fused ldr example float32: 3.00e-06 of scale (bound 1e-05)"
    echo "CHECK maps PASS fused ldr example float64: 1.00e-14 of scale (bound 1e-10)"
    echo "CHECK zero FAIL fused ldr example float32 ldr_flip(x, x), eps=0: largest value 1e-06 (bound: exactly 0)"
    echo "smoke: FAILED 1 checks"; exit 1;;
  *sanitize_case.py*) echo "sanitize_case: fused: done"; echo "sanitize_case: done";;
  *gpu_bench.py*) echo '%s' > "${@: -1}"; echo "| 1920x1080 | 0.200 |";;
  *hdr_bench.py*) echo "CUDA out of memory"; exit 3;;
  *"-m pytest"*) echo "12 passed in 3.00s";;
esac
""" % json.dumps(GPU_BENCH)
# Runs the command it is given, then reports as compute-sanitizer does: racecheck finds a race.
FAKE_SANITIZER = """#!/usr/bin/env bash
tool=$2; shift 4
[ -z "$FAKE_SANITIZER_REFUSES" ] || { echo "========= Error: Device not supported"; exit 9; }
"$@"; rc=$?
if [ "$tool" = racecheck ]; then
  echo "========= Error: Race reported between Write access at tiled_transpose_kernel+0x10"
  echo "========= ERROR SUMMARY: 1 error"; exit 9
fi
echo "========= ERROR SUMMARY: 0 errors"; exit $rc
"""


def stand_in_run(tmp_path, monkeypatch, budget=None, min_s=None, **fake):
    """gpu_check's steps run with the stand-ins; (exit status, SUMMARY.txt, output folder, snapshots)."""
    bin_dir, out = tmp_path / "bin", tmp_path / "out"
    bin_dir.mkdir()
    for name, text in (("python", FAKE_PYTHON), ("compute-sanitizer", FAKE_SANITIZER)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("OUT", str(out))
    monkeypatch.setenv("SNAPSHOTS", str(tmp_path / "snapshots"))
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    for name, value in fake.items():
        monkeypatch.setenv(name, value)
    plan = [s._replace(min_s=min_s or s.min_s) for s in gpu_check.steps(str(bin_dir / "python"), str(out))]
    rc = gpu_check.check(str(out), budget, False, plan, dict(os.environ))
    return rc, summary_of(out), out, (tmp_path / "snapshots").read_text().split("CALL\n")[1:]


def test_each_result_goes_to_its_verdict_and_promise_and_the_summary_follows_every_step(tmp_path, monkeypatch):
    rc, summary, out, snapshots = stand_in_run(tmp_path, monkeypatch)
    assert rc == 1  # the smoke and racecheck failed
    # each step started with the RESULT lines of exactly the steps before it in SUMMARY.txt
    assert [[line.split(":")[0][7:] for line in s.splitlines()] for s in snapshots] == [ORDER[:k] for k in range(12)]
    assert "RESULT device: torch 2.15.0 CUDA 13.0; GPU 0: NVIDIA H200, capability 9.0 (" in summary
    assert "RESULT build: ok, TORCH_CUDA_ARCH_LIST=9.0" in summary  # the local GPU's capability
    assert "TORCH_CUDA_ARCH_LIST=9.0" in (out / "logs" / "build.log").read_text()
    assert "RESULT smoke: FAILED (rc 1" in summary and "RESULT smoke_rows: ok: 2 checks agree" in summary
    assert "RESULT memcheck: clean, 1 sections" in summary and "RESULT racecheck: FINDINGS" in summary
    assert "RESULT hdr_bench: FAILED (rc 3" in summary and "RESULT tests_compile: 12 passed in 3.00s" in summary
    verdicts = promises(summary)
    assert verdicts["the CUDA kernels build for this GPU"].startswith("CONFIRMED")
    zero = verdicts["identical images give exactly 0 on the device (eps = 0)"]
    assert zero.startswith("BROKEN (1 of 2 checks failed; first: fused ldr example float32")
    maps = verdicts["maps within the promised bound of the CPU's (README, GPU and CPU agreement)"]
    assert maps.startswith("CONFIRMED (3 checks: fused, rows; worst 3e-06 (bound 1e-05) in float32")
    assert verdicts["no shared-memory data race in any kernel (racecheck)"].startswith("BROKEN (racecheck: FINDINGS")
    assert verdicts["no barrier misuse in any kernel (synccheck)"].startswith("CONFIRMED")
    speed = verdicts["the speed targets (set for one H200; README, Speed)"]
    assert speed.startswith("BROKEN (2 of 5 measured targets missed") and "1 not measured" in speed
    assert [line for line in summary.splitlines() if line.startswith(("PASS", "MISS"))] == [
        "PASS LDR forward 1920x1080: 0.200 ms (target 0.250 ms)",
        "MISS LDR forward+backward 1920x1080: 0.600 ms (target 0.500 ms)",
        "PASS LDR forward+backward 8x512x512: 0.900 ms (target 1.000 ms)",
        "MISS HDR forward+backward 1920x1080, automatic exposures: not measured (no JSON; hdr_bench: FAILED "
        "(rc 3, 0 s): CUDA out of memory (logs/hdr_bench.log)) (target 10.000 ms)",
        "PASS LDR forward+backward 1920x1080 extra peak memory: 80 MiB (target 100 MiB)",
        "MISS LDR forward+backward 3840x2160 / 1920x1080 time: 5.00x (target 4.50x)",
    ]
    assert "measured on: Some GPU" in summary and "final" in summary.splitlines()[0]
    bench = json.loads((out / "bench.json").read_text())
    assert bench["gpu_bench"] == GPU_BENCH and bench["hdr_bench"] is None
    assert "| 1920x1080 | 0.200 |" in (out / "bench.md").read_text()


def test_a_failed_build_skips_what_needs_it(tmp_path, monkeypatch):
    rc, summary, _, snapshots = stand_in_run(tmp_path, monkeypatch, FAKE_BUILD_FAILS="1")
    assert rc == 1 and len(snapshots) == 2  # nothing after the build started
    for name in ORDER[2:]:
        assert f"RESULT {name}: SKIPPED: needs the build (build: FAILED (rc 1, " in summary, name
    assert promises(summary)["no barrier misuse in any kernel (synccheck)"].startswith(
        "NOT CHECKED (synccheck: SKIPPED"
    )


def test_a_budget_stops_the_step_that_runs_past_it_and_skips_the_rest(tmp_path, monkeypatch):
    budget = gpu_check.RESERVE_S + 8
    started = time.monotonic()
    rc, summary, out, _ = stand_in_run(tmp_path, monkeypatch, budget=budget, min_s=1, FAKE_SMOKE_HANGS="1")
    assert time.monotonic() - started < budget  # not the smoke's 600 s
    assert rc == 2
    assert re.search(r"RESULT smoke: STOPPED at the budget after \d+ s", summary)
    for name in ORDER[3:]:
        assert f"RESULT {name}: SKIPPED: no time" in summary, name
    # the step's whole process group was stopped, its child too
    pid = int((out / "sleep.pid").read_text())
    for _ in range(50):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ")[1][0] in "ZX":
                    break
        except OSError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the smoke's child still runs")


def test_a_sanitizer_that_refuses_the_gpu_skips_all_three_with_one_reason(tmp_path, monkeypatch):
    rc, summary, _, _ = stand_in_run(tmp_path, monkeypatch, FAKE_SANITIZER_REFUSES="1")
    for tool in ("memcheck", "racecheck", "synccheck"):
        assert f"RESULT {tool}: SKIPPED: compute-sanitizer does not work on this GPU (" in summary, tool
    assert promises(summary)["no barrier misuse in any kernel (synccheck)"].startswith("NOT CHECKED")


def test_smoke_and_the_sanitizer_case_run_on_the_cpu(tmp_path):
    # The checks a GPU run starts with, here against the CPU itself: every check prints its CHECK
    # line and passes (the CPU agrees with itself bit for bit), and the promises read them.
    smoke = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "gpu", "smoke.py"), "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    lines = [line for line in smoke.stdout.splitlines() if line.startswith("CHECK ")]
    assert {line.split()[1] for line in lines} == {"maps", "gradients", "hdr_index", "zero", "symmetry"}
    assert all(line.split()[2] == "PASS" for line in lines), lines
    assert {"fused", "tiled", "kept", "autograd-kept"} <= {line.split()[3] for line in lines}
    assert any("float64" in line for line in lines) and any(
        line.startswith("CHECK maps PASS fused hdr") for line in lines
    )
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "smoke.log").write_text(smoke.stdout)
    results = {"smoke": ("ok", "ok: n checks"), "smoke_rows": ("skipped", "SKIPPED: no time")}
    gpu_check.write_outputs(str(tmp_path), results, "partial")
    verdicts = promises((tmp_path / "SUMMARY.txt").read_text())
    zero = verdicts["identical images give exactly 0 on the device (eps = 0)"]
    assert zero.startswith("CONFIRMED so far (") and "smoke_rows: SKIPPED: no time" in zero
    maps = verdicts["maps within the promised bound of the CPU's (README, GPU and CPU agreement)"]
    assert "worst 0 (bound 1e-05) in float32" in maps and "bound 1e-10) in float64" in maps

    case = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "gpu", "sanitize_case.py"), "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert case.returncode == 0, case.stdout + case.stderr
    assert case.stdout.splitlines()[-1] == "sanitize_case: done"
    assert any("row passes, float32" in line for line in case.stdout.splitlines())


def test_the_script_calls_what_exists():
    script = open(os.path.join(ROOT, "scripts", "gpu", "gpu_check.py")).read()
    for path in re.findall(r"(?:scripts/gpu|benchmarks|tests)/[\w/]+\.(?:py|sh)", script):
        assert os.path.exists(os.path.join(ROOT, path)), path
    for bench, options in (("gpu_bench", {"--quick", "--json"}), ("hdr_bench", {"--quick", "--json", "--device"})):
        text = open(os.path.join(ROOT, "benchmarks", f"{bench}.py")).read()
        assert all(f'"{o}"' in text for o in options), bench


def test_no_reference_to_the_old_place():
    # The GPU scripts moved from benchmarks/ (speed measurements only) to scripts/gpu/.
    old = ("benchmarks/gpu_check.sh", "benchmarks/sanitize_case.py")
    assert not any(os.path.exists(os.path.join(ROOT, p)) for p in old)
    checked = ["README.md", "MANIFEST.in", "setup.py"]
    for top in ("docs", "benchmarks", "scripts", "csrc"):
        for d, _, fs in os.walk(os.path.join(ROOT, top)):
            checked += [
                os.path.relpath(os.path.join(d, f), ROOT)
                for f in fs
                if f.endswith((".md", ".py", ".sh", ".cpp", ".h", ".cu", ".in"))
            ]
    for path in checked:
        full = os.path.join(ROOT, path)
        if os.path.exists(full):
            text = io.open(full, encoding="utf-8", errors="replace").read()
            for o in old:
                assert o not in text, f"{path} still names {o}"
