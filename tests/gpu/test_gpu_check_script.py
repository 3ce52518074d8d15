"""scripts/gpu/gpu_check.sh, the GPU machine's one command, checked without a GPU: through its dry
run (GPU_CHECK_DRY_RUN=1: the plan and the outputs' skeleton, nothing built or run) the steps'
times never pass the deadline, the order puts the build, the correctness check against the CPU and
the sanitizers first, a slow GPU (every step taking all it is given) still gives each of those its
minimum, SUMMARY.txt is rewritten after every step, at most 8 files land in $OUT (what the device
tool returns), and the SUMMARY has one PASS/MISS line per speed target and one PROMISE line per
promise. A run of the real script with stand-ins for the GPU's tools (nvidia-smi,
compute-sanitizer, the build, pytest) reads their outputs into the right verdicts; smoke.py and
sanitize_case.py themselves run on the CPU (--device cpu), so the one GPU run does not find their
bugs. Also scripts/gpu/summary.py's verdicts on made-up benchmark JSON and logs."""

import ast
import io
import json
import os
import re
import subprocess
import sys
import tarfile


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "gpu", "gpu_check.sh")
SUMMARY_PY = os.path.join(ROOT, "scripts", "gpu", "summary.py")
GRACE_S = 5  # the script's kill grace after a step's timeout

ORDER = [
    "device",
    "build",
    "smoke",
    "smoke_rows",
    "memcheck",
    "racecheck",
    "synccheck",
    "gpu_bench",
    "hdr_bench",
    "tests",
    "nan_scratch",
    "tests_compile",
    "tests_blocking",
]
# The decisive facts: whether the kernels build, agree with the CPU, and pass the sanitizers.
DECISIVE = ["build", "smoke", "smoke_rows", "memcheck", "racecheck", "synccheck"]
SANITIZERS = ["memcheck", "racecheck", "synccheck"]
PLAN = re.compile(r"^PLAN (\d+) (\w+) limit=(\d+) min=(\d+) given=(\d+) start=(\d+) end=(\d+)(?: (SKIPPED: .*))?$")
# What the device tool returns: at most 8 files, at most 2 folders down, plain names.
MAX_FILES = 8
NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def targets():
    out = subprocess.run([sys.executable, SUMMARY_PY, "--list"], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def dry_run(tmp_path, **env):
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "out"
    full = dict(os.environ, GPU_CHECK_DRY_RUN="1", OUT=str(out), PYTHON=sys.executable, TMPDIR=str(tmp_path))
    for k in (
        "GPU_CHECK_DEADLINE_S",
        "GPU_CHECK_RESERVE_S",
        "GPU_CHECK_SKIP",
        "GPU_CHECK_DRY_RUN_TAKES",
        "GPU_CHECK_DRY_RUN_SNAPSHOTS",
    ):
        full.pop(k, None)
    full.update(env)
    proc = subprocess.run(["bash", SCRIPT], capture_output=True, text=True, env=full, timeout=60)
    assert proc.returncode in (0, 2), proc.stdout + proc.stderr
    plan = []
    for line in proc.stdout.splitlines():
        if line.startswith("PLAN "):
            m = PLAN.match(line)
            assert m, line
            n, name, limit, minimum, given, start, end, skipped = m.groups()
            plan.append(
                dict(
                    n=int(n),
                    name=name,
                    limit=int(limit),
                    min=int(minimum),
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
        assert step["min"] <= step["given"] <= step["limit"], step
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
    # A slow GPU: every step assumed to take all it is given plus the kill grace. What does not fit
    # is skipped, never started late, and the plan ends before the deadline less the summary's
    # reserve.
    proc, out, plan = dry_run(tmp_path)
    assert [s["name"] for s in plan] == ORDER
    assert [s["n"] for s in plan] == list(range(1, len(ORDER) + 1))
    assert_within_deadline(plan, 540)
    # The decisive facts come first and each gets at least its minimum, however long the steps
    # before them take: the build its full limit, the others what is left after the build.
    by_name = {s["name"]: s for s in plan}
    assert ORDER[: len(DECISIVE) + 1] == ["device"] + DECISIVE
    for name in ["device"] + DECISIVE:
        assert not by_name[name]["skipped"], name
        assert by_name[name]["given"] >= by_name[name]["min"] > 0, by_name[name]
    assert by_name["build"]["given"] == by_name["build"]["limit"]
    assert sum(s["limit"] for s in plan) > 540  # fast steps leave their time to later ones
    summary = assert_outputs(out)
    for s in plan:
        if s["skipped"]:
            assert s["skipped"] == "SKIPPED: no time", s
            assert f"RESULT {s['name']}: SKIPPED: no time" in summary
    assert proc.returncode == 2  # some steps skipped for lack of time, none failed
    assert "DRY RUN" in summary
    assert "CONFIRMED" not in summary and "BROKEN" not in summary  # a dry run confirms nothing


def test_a_slow_gpu_under_any_deadline_still_runs_the_decisive_steps(tmp_path):
    # The minimums of the decisive steps are kept free for them: with less time in all, the build
    # is the step that gives way (down to its own minimum), never a sanitizer after it.
    for deadline in (540, 450, 380):
        proc, out, plan = dry_run(tmp_path / str(deadline), GPU_CHECK_DEADLINE_S=str(deadline))
        assert_within_deadline(plan, deadline)
        by_name = {s["name"]: s for s in plan}
        for name in DECISIVE:
            assert not by_name[name]["skipped"] and by_name[name]["given"] >= by_name[name]["min"], (deadline, name)
        # what follows the decisive steps runs only in the time they left
        assert all(s["start"] >= by_name["synccheck"]["end"] for s in plan if s["n"] > by_name["synccheck"]["n"])


def test_summary_is_written_after_every_step(tmp_path):
    # A run killed from outside returns SUMMARY.txt as it was after the last step that ended: the
    # snapshot taken after step k holds the RESULT lines of steps 1..k (and only those).
    snaps = tmp_path / "snaps"
    proc, out, plan = dry_run(tmp_path, GPU_CHECK_DRY_RUN_TAKES="15", GPU_CHECK_DRY_RUN_SNAPSHOTS=str(snaps))
    copies = sorted(snaps.iterdir())
    seen = []
    for copy in copies:
        results = [
            line.split(":")[0][len("RESULT ") :] for line in copy.read_text().splitlines() if line.startswith("RESULT ")
        ]
        assert results[: len(seen)] == seen  # never loses a result
        seen = results
        assert "== PROMISES" in copy.read_text() and "== TARGETS" in copy.read_text()
    assert seen == ORDER
    # one snapshot with each step's result as its newest line
    newest = [[line for line in c.read_text().splitlines() if line.startswith("RESULT ")][-1:] for c in copies]
    for name in ORDER:
        assert any(n and n[0].startswith(f"RESULT {name}: ") for n in newest), name
    assert (out / "SUMMARY.txt").read_text() == copies[-1].read_text()


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
    assert "scripts/gpu/smoke.py" in cmd["smoke"] and "FORCE_ROW_PASSES" not in cmd["smoke"]
    assert "FLIP_LOSS_CUDA_FORCE_ROW_PASSES=1" in cmd["smoke_rows"] and "smoke.py --rows" in cmd["smoke_rows"]
    assert "benchmarks/gpu_bench.py --quick --json" in cmd["gpu_bench"]
    assert "benchmarks/hdr_bench.py --device cuda --quick --json" in cmd["hdr_bench"]
    # The tests run with asynchronous launches; only the rerun of failures is synchronous, and the
    # torch.compile tests (a cold inductor cache) are a step of their own after the others.
    assert "CUDA_LAUNCH_BLOCKING" not in cmd["tests"] and "not compile" in cmd["tests"]
    assert "-k compile" in cmd["tests_compile"]
    assert "CUDA_LAUNCH_BLOCKING=1" in cmd["tests_blocking"] and "--lf" in cmd["tests_blocking"]
    assert "FLIP_LOSS_CUDA_DEBUG_NAN_SCRATCH=1" in cmd["nan_scratch"] and "backward" in cmd["nan_scratch"]
    for tool in SANITIZERS:
        assert f"compute-sanitizer --tool {tool}" in cmd[tool] and "scripts/gpu/sanitize_case.py" in cmd[tool]
        assert "PYTORCH_NO_CUDA_MEMORY_CACHING=1" in cmd[tool]
    assert "FLIP_LOSS_CUDA_BACKWARD_SCRATCH=200000" in cmd["memcheck"]  # several bands


def test_a_second_run_leaves_out_steps(tmp_path):
    proc, out, plan = dry_run(tmp_path, GPU_CHECK_DEADLINE_S="400", GPU_CHECK_SKIP="tests gpu_bench smoke")
    assert [s["name"] for s in plan] == ORDER
    assert_within_deadline(plan, 400)
    by_name = {s["name"]: s for s in plan}
    for name in ("tests", "gpu_bench", "smoke"):
        assert by_name[name]["skipped"] == "SKIPPED: GPU_CHECK_SKIP", name
    # a decisive step left out keeps no time for itself: the build, squeezed by this deadline, gets
    # the smoke's minimum and kill grace more
    everything = {s["name"]: s for s in dry_run(tmp_path / "all", GPU_CHECK_DEADLINE_S="400")[2]}
    assert by_name["build"]["given"] == everything["build"]["given"] + by_name["smoke"]["min"] + GRACE_S
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


def promise_lines(text):
    return {
        line.split(": ")[0][len("PROMISE ") :]: line.split(": ", 1)[1]
        for line in text.splitlines()
        if line.startswith("PROMISE ")
    }


def test_smoke_and_the_sanitizer_case_run_on_the_cpu(tmp_path):
    # The scripts the GPU run starts with, run here against the CPU itself: every check prints its
    # CHECK line and passes (the CPU agrees with itself bit for bit), the promises' table reads them.
    smoke = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "gpu", "smoke.py"), "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    lines = [line for line in smoke.stdout.splitlines() if line.startswith("CHECK ")]
    promises = {line.split()[1] for line in lines}
    assert promises == {"maps", "gradients", "hdr_index", "zero", "symmetry"}
    assert all(line.split()[2] == "PASS" for line in lines), lines
    formulations = {line.split()[3] for line in lines}
    assert {"fused", "tiled", "kept", "autograd-kept"} <= formulations
    assert any("float64" in line for line in lines) and any(
        line.startswith("CHECK maps PASS fused hdr") for line in lines
    )
    log = tmp_path / "smoke.log"
    log.write_text(smoke.stdout)
    results = tmp_path / "results.tsv"
    results.write_text("smoke\tok\tok: n checks\nsmoke_rows\tskipped\tSKIPPED: no time\n")
    out = subprocess.run(
        [sys.executable, SUMMARY_PY, "--promises", "--results", str(results), "--checks", str(log)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    verdicts = promise_lines(out)
    zero = verdicts["identical images give exactly 0 on the device (eps = 0)"]
    assert zero.startswith("CONFIRMED so far (") and "smoke_rows: SKIPPED: no time" in zero
    maps = next(v for k, v in verdicts.items() if k.startswith("maps within"))
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


FAKE_TOOLS = {
    "nvidia-smi": 'echo "0, NVIDIA H200, 580.159.03, 143771 MiB, 1980 MHz"',
    # runs the command it is given, then reports as compute-sanitizer does; racecheck finds a race
    "compute-sanitizer": """
tool=$2; shift 4
echo "========= COMPUTE-SANITIZER"
"$@"; rc=$?
if [ "$tool" = racecheck ]; then
  echo "========= Error: Race reported between Write access at tiled_transpose_kernel+0x10"
  echo "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"
  echo "========= ERROR SUMMARY: 1 error"; exit 9
fi
echo "========= ERROR SUMMARY: 0 errors"; exit $rc
""",
}
# PYTHON for the simulated run: the real interpreter for summary.py, canned outputs for the rest.
FAKE_PYTHON = """
case "$*" in
  *scripts/gpu/summary.py*) exec "{py}" "$@";;
  *setup.py*) echo "building flip_loss._C"; exit 0;;
  *"smoke.py --rows"*)
    echo "CHECK maps PASS rows ldr example float32: 2.00e-06 of scale (bound 1e-05)"
    echo "CHECK zero PASS rows ldr example float32 ldr_flip(x, x), eps=0: largest value 0 (bound: exactly 0)"
    echo "smoke: ok";;
  *smoke.py*)
    echo "CHECK maps PASS fused ldr example float32: 3.00e-06 of scale (bound 1e-05)"
    echo "CHECK maps PASS fused ldr example float64: 1.00e-14 of scale (bound 1e-10)"
    echo "CHECK gradients PASS tiled ldr example float32 dtest: 1.20e-04 of scale (bound 5e-04)"
    echo "CHECK zero FAIL fused ldr example float32 ldr_flip(x, x), eps=0: largest value 1e-06 (bound: exactly 0)"
    echo "CHECK symmetry PASS fused ldr example float32 map: same bits"
    echo "smoke: FAILED 1 checks"; exit 1;;
  *sanitize_case.py*) echo "sanitize_case: fused: done"; echo "sanitize_case: done";;
  *gpu_bench.py*) exit 3;;
  *hdr_bench.py*) exit 3;;
  *"-m pytest"*) echo "12 passed in 3.00s";;
  *"import xdist"*|*"import pytest_timeout"*) exit 1;;
  *) echo "torch 2.11.0 CUDA 13.0 devices 1 NVIDIA H200";;
esac
"""


def test_a_simulated_gpu_run_reads_each_result_into_its_promise(tmp_path):
    # The real script, not its dry run, with stand-ins for what only the GPU machine has: each
    # step's output goes to its verdict, and each verdict to the promise it confirms or breaks.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in FAKE_TOOLS.items():
        (bin_dir / name).write_text("#!/usr/bin/env bash\n" + body)
        (bin_dir / name).chmod(0o755)
    fake_py = bin_dir / "python"
    fake_py.write_text("#!/usr/bin/env bash\n" + FAKE_PYTHON.replace("{py}", sys.executable))
    fake_py.chmod(0o755)
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), PYTHON=str(fake_py), TMPDIR=str(tmp_path))
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    for k in list(env):
        if k.startswith("GPU_CHECK_"):
            del env[k]
    proc = subprocess.run(["bash", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the smoke and racecheck failed
    summary = assert_outputs(out)
    assert "RESULT smoke: FAILED (rc 1" in summary and "RESULT smoke_rows: ok: 2 checks agree" in summary
    assert "RESULT memcheck: clean, 1 sections" in summary and "RESULT racecheck: FINDINGS" in summary
    assert "RESULT tests: ok: 12 passed in 3.00s" in summary and "RESULT tests_blocking: not needed" in summary
    verdicts = promise_lines(summary)
    assert verdicts["the CUDA kernels build for the H200 (sm_90)"].startswith("CONFIRMED")
    zero = verdicts["identical images give exactly 0 on the device (eps = 0)"]
    assert zero.startswith("BROKEN (1 of 2 checks failed; first: fused ldr example float32")
    maps = next(v for k, v in verdicts.items() if k.startswith("maps within"))
    assert maps.startswith("CONFIRMED (3 checks: fused, rows; worst 3e-06 (bound 1e-05) in float32")
    assert verdicts[
        "no out-of-bounds or misaligned memory access in any kernel (compute-sanitizer memcheck)"
    ].startswith("CONFIRMED")
    assert verdicts["no shared-memory data race in any kernel (racecheck)"].startswith("BROKEN (racecheck: FINDINGS")
    assert verdicts["the speed targets on one H200 (README, Speed)"].startswith("NOT CHECKED")
    assert "MISS LDR forward 1920x1080: not measured" in summary


def test_a_machine_without_a_working_sanitizer_skips_them_with_one_reason(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "compute-sanitizer").write_text(
        "#!/usr/bin/env bash\necho '========= Error: Device not supported'\n"
        "echo '========= Error: CUDA_ERROR_UNKNOWN (error 999)'\nexit 9\n"
    )
    (bin_dir / "compute-sanitizer").chmod(0o755)
    fake_py = bin_dir / "python"
    fake_py.write_text("#!/usr/bin/env bash\n" + FAKE_PYTHON.replace("{py}", sys.executable))
    fake_py.chmod(0o755)
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), PYTHON=str(fake_py), TMPDIR=str(tmp_path), GPU_CHECK_SKIP="device build")
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    proc = subprocess.run(["bash", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    summary = (out / "SUMMARY.txt").read_text()
    assert "RESULT memcheck: SKIPPED: compute-sanitizer does not work on this machine" in summary, proc.stdout
    for tool in ("racecheck", "synccheck"):
        assert f"RESULT {tool}: SKIPPED: compute-sanitizer does not work on this machine" in summary
    assert promise_lines(summary)["no barrier misuse in any kernel (synccheck)"].startswith("NOT CHECKED")


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
