"""scripts/gpu/gpu_check.sh, the GPU machine's one command, checked without a GPU through its dry
run (GPU_CHECK_DRY_RUN=1: the plan and the outputs' skeleton, nothing built or run): the steps'
times never pass the deadline, the order puts the build, the smoke test and the benchmarks before
the tests and the sanitizers, at most 8 files land in $OUT (what the device tool returns), and the
SUMMARY has one PASS/MISS line per speed target. Also scripts/gpu/summary.py's verdicts on
made-up benchmark JSON. A few seconds in all."""

import ast
import io
import json
import os
import re
import subprocess
import sys
import tarfile


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "gpu", "gpu_check.sh")
SUMMARY_PY = os.path.join(ROOT, "scripts", "gpu", "summary.py")
GRACE_S = 5  # the script's kill grace after a step's timeout

ORDER = [
    "device",
    "build",
    "smoke",
    "gpu_bench",
    "hdr_bench",
    "tests",
    "tests_blocking",
    "nan_scratch",
    "sanitizer_probe",
    "memcheck",
    "racecheck",
    "synccheck",
    "initcheck",
    "memcheck_rows",
]
PLAN = re.compile(r"^PLAN (\d+) (\w+) limit=(\d+) given=(\d+) start=(\d+) end=(\d+)(?: (SKIPPED: .*))?$")
# What the device tool returns: at most 8 files, at most 2 folders down, plain names.
MAX_FILES = 8
NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def targets():
    out = subprocess.run([sys.executable, SUMMARY_PY, "--list"], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def dry_run(tmp_path, **env):
    out = tmp_path / "out"
    full = dict(os.environ, GPU_CHECK_DRY_RUN="1", OUT=str(out), PYTHON=sys.executable, TMPDIR=str(tmp_path))
    for k in ("GPU_CHECK_DEADLINE_S", "GPU_CHECK_RESERVE_S", "GPU_CHECK_SKIP", "GPU_CHECK_DRY_RUN_TAKES"):
        full.pop(k, None)
    full.update(env)
    proc = subprocess.run(["bash", SCRIPT], capture_output=True, text=True, env=full, timeout=60)
    assert proc.returncode in (0, 2), proc.stdout + proc.stderr
    plan = []
    for line in proc.stdout.splitlines():
        if line.startswith("PLAN "):
            m = PLAN.match(line)
            assert m, line
            n, name, limit, given, start, end, skipped = m.groups()
            plan.append(
                dict(
                    n=int(n),
                    name=name,
                    limit=int(limit),
                    given=int(given),
                    start=int(start),
                    end=int(end),
                    skipped=skipped,
                )
            )
    return proc, out, plan


def assert_within_deadline(plan, deadline, reserve=15, worst_case=True):
    clock = 0
    for step in plan:
        assert step["start"] >= clock, step  # steps one after another, never overlapping
        if step["skipped"]:
            assert step["given"] == 0 and step["end"] == step["start"], step
            continue
        assert 0 < step["given"] <= step["limit"], step
        assert step["end"] == step["start"] + step["given"] + GRACE_S, step
        assert step["end"] <= deadline - reserve, step
        clock = step["start"]
    if worst_case:  # each step took all it was given: the sum of the times given fits too
        worst = sum(s["given"] + GRACE_S for s in plan if not s["skipped"])
        assert worst <= deadline - reserve, worst


def assert_outputs(out, dry_summary=True):
    files = [os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs]
    assert len(files) <= MAX_FILES, files
    for f in files:
        parts = f.split(os.sep)
        assert len(parts) <= 3 and all(NAME.match(p) for p in parts), f
    assert {"SUMMARY.txt", "bench.json", "bench.md", "logs.tar.gz"} <= set(files), files
    summary = (out / "SUMMARY.txt").read_text()
    verdicts = [line for line in summary.splitlines() if line.startswith(("PASS ", "MISS "))]
    names = targets()
    assert len(verdicts) == len(names), summary
    for line, name in zip(verdicts, names):
        assert line.startswith(("PASS " + name + ": ", "MISS " + name + ": ")), (line, name)
        assert re.search(r"\(target [0-9.]+ ?(ms|MiB|x)\)$", line), line
    bench = json.loads((out / "bench.json").read_text())
    assert [t["name"] for t in bench["targets"]] == names
    return summary


def step_commands(out):
    """The command each step would have run, from the dry run's logs in logs.tar.gz."""
    commands = {}
    with tarfile.open(out / "logs.tar.gz") as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.endswith(".log"):
                text = tar.extractfile(member).read().decode()
                commands[os.path.basename(member.name)[:-4]] = text
    return commands


def test_script_parses():
    subprocess.run(["bash", "-n", SCRIPT], check=True)


def test_worst_case_plan_keeps_the_deadline_and_the_order(tmp_path):
    # Every step assumed to take all it is given plus the kill grace: what does not fit is skipped,
    # never started late, and the plan ends before the deadline less the summary's reserve.
    proc, out, plan = dry_run(tmp_path)
    assert [s["name"] for s in plan] == ORDER
    assert [s["n"] for s in plan] == list(range(1, len(ORDER) + 1))
    assert_within_deadline(plan, 540)
    # The most important results come first: the build, the smoke test and both benchmarks
    # always get time, however long the steps before them take.
    for name in ("device", "build", "smoke", "gpu_bench", "hdr_bench"):
        assert not next(s for s in plan if s["name"] == name)["skipped"], name
    assert sum(s["limit"] for s in plan) > 540  # fast steps leave their time to later ones
    summary = assert_outputs(out)
    for s in plan:
        if s["name"] == "tests_blocking":  # nothing to rerun when the tests did not run
            assert s["skipped"] == "SKIPPED: not needed (the tests were skipped)"
        elif s["skipped"]:
            assert s["skipped"] == "SKIPPED: no time"
            assert f"RESULT {s['name']}: SKIPPED: no time" in summary
    assert proc.returncode == 2  # some steps skipped for lack of time, none failed
    assert "DRY RUN" in summary


def test_typical_plan_runs_every_step_in_order(tmp_path):
    proc, out, plan = dry_run(tmp_path, GPU_CHECK_DRY_RUN_TAKES="15")
    assert [s["name"] for s in plan] == ORDER
    assert not any(s["skipped"] for s in plan), plan
    assert_within_deadline(plan, 540, worst_case=False)
    assert_outputs(out)
    assert proc.returncode == 0
    cmd = step_commands(out)
    assert set(ORDER) <= set(cmd), sorted(cmd)
    assert "setup.py build_ext --inplace" in cmd["build"]
    assert "benchmarks/gpu_bench.py --quick --json" in cmd["gpu_bench"]
    assert "benchmarks/hdr_bench.py --device cuda --quick --json" in cmd["hdr_bench"]
    # The tests run with asynchronous launches; only the rerun of failures is synchronous.
    assert "CUDA_LAUNCH_BLOCKING" not in cmd["tests"]
    assert "CUDA_LAUNCH_BLOCKING=1" in cmd["tests_blocking"] and "--lf" in cmd["tests_blocking"]
    assert "FLIP_LOSS_CUDA_DEBUG_NAN_SCRATCH=1" in cmd["nan_scratch"] and "backward" in cmd["nan_scratch"]
    assert "compute-sanitizer --version" in cmd["sanitizer_probe"]
    for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
        assert f"--tool {tool}" in cmd[tool] and "scripts/gpu/sanitize_case.py" in cmd[tool]
    assert "FLIP_LOSS_CUDA_DEBUG_NAN_SCRATCH" not in cmd["initcheck"]  # a fill would count as a write
    assert "FLIP_LOSS_CUDA_FORCE_ROW_PASSES=1" in cmd["memcheck_rows"]


def test_a_second_run_leaves_out_steps(tmp_path):
    proc, out, plan = dry_run(tmp_path, GPU_CHECK_DEADLINE_S="400", GPU_CHECK_SKIP="tests gpu_bench")
    assert [s["name"] for s in plan] == ORDER
    assert_within_deadline(plan, 400)
    by_name = {s["name"]: s for s in plan}
    assert by_name["tests"]["skipped"] == by_name["gpu_bench"]["skipped"] == "SKIPPED: GPU_CHECK_SKIP"
    summary = assert_outputs(out)
    assert "MISS LDR forward 1920x1080: not measured" in summary


def test_no_time_for_the_build_skips_what_needs_it(tmp_path):
    proc, out, plan = dry_run(tmp_path, GPU_CHECK_DEADLINE_S="100")
    assert [s["name"] for s in plan] == ORDER
    assert_within_deadline(plan, 100)
    assert plan[1]["skipped"] == "SKIPPED: no time"
    assert all(s["skipped"] == "SKIPPED: no build (no time for it)" for s in plan[2:]), plan
    assert_outputs(out)


def test_summary_judges_the_targets(tmp_path):
    gpu = {
        "gpu": "Some GPU",
        "rows": [
            {
                "case": "1920x1080",
                "forward_ms": 0.2,
                "fwd_bwd_ms": 0.6,
                "fwd_bwd_extra_MiB": 80.0,
                "graph_forward_ms": 0.15,
                "graph_fwd_bwd_ms": 0.4,
                "reference_forward_ms": 20.0,
                "reference_fwd_bwd_ms": 60.0,
            },
            {"case": "3840x2160", "forward_ms": 0.8, "fwd_bwd_ms": 3.0, "fwd_bwd_extra_MiB": 90.0},
            {"case": "8x512x512", "forward_ms": 0.3, "fwd_bwd_ms": 0.9, "fwd_bwd_extra_MiB": 60.0},
        ],
    }
    (tmp_path / "gpu.json").write_text(json.dumps(gpu))
    out = subprocess.run(
        [
            sys.executable,
            SUMMARY_PY,
            "--gpu-bench",
            str(tmp_path / "gpu.json"),
            "--hdr-bench",
            str(tmp_path / "missing.json"),
            "--note",
            "hdr_bench=TIMED OUT",
            "--json",
            str(tmp_path / "bench.json"),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    verdicts = [line for line in out if line.startswith(("PASS", "MISS"))]
    assert verdicts == [
        "PASS LDR forward 1920x1080: 0.200 ms (target 0.250 ms)",
        "MISS LDR forward+backward 1920x1080: 0.600 ms (target 0.500 ms)",
        "PASS LDR forward+backward 8x512x512: 0.900 ms (target 1.000 ms)",
        "MISS HDR forward+backward 1920x1080, automatic exposures: not measured (no JSON written; "
        "hdr_bench: TIMED OUT) (target 10.000 ms)",
        "PASS LDR forward+backward 1920x1080 extra peak memory: 80 MiB (target 100 MiB)",
        "MISS LDR forward+backward 3840x2160 / 1920x1080 time: 5.00x (target 4.50x)",
    ]
    assert any("Some GPU" in line for line in out)
    assert any("oracle.py" in line and "100x" in line for line in out)
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["gpu_bench"] == gpu and saved["hdr_bench"] is None
    assert [t["verdict"] for t in saved["targets"]] == ["PASS", "MISS", "PASS", "MISS", "PASS", "MISS"]


def options_of(path):
    """The --options a script's argparse parser declares."""
    tree = ast.parse(open(path).read())
    return {
        a.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument"
        for a in node.args
        if isinstance(a, ast.Constant) and str(a.value).startswith("--")
    }


def test_the_script_calls_what_exists():
    script = open(SCRIPT).read()
    for path in re.findall(r"(?:scripts/gpu|benchmarks|tests)/[\w/]+\.(?:py|sh)", script):
        assert os.path.exists(os.path.join(ROOT, path)), path
    assert {"--quick", "--json"} <= options_of(os.path.join(ROOT, "benchmarks", "gpu_bench.py"))
    assert {"--quick", "--json", "--device"} <= options_of(os.path.join(ROOT, "benchmarks", "hdr_bench.py"))


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
