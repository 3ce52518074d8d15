"""flip-loss beyond one process (README, "Beyond one machine"), with 2 CPU processes on gloo:
FLIPMetric and FLIPTorchMetric synced across ranks against one process, folder mode under torchrun
against one process, and a few DDP training steps of examples/train_denoiser.py.

Every launch is bounded (distributed_cases.launch, subprocess timeouts), so a hang fails."""

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import pytest
import torch

import distributed_cases as cases
import flip_loss
from flip_loss import FLIPMetric
from flip_loss.cli import main
from flip_loss.cli.shard import balanced_shards
from flip_loss.imageio import load_image

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available"),
]


def rank_maps(rank):
    """The maps rank ``rank`` folds in, in its update order."""
    return [i for batch in cases.RANK_MAPS[rank] for i in batch]


# The order of the per-image means after a sync: rank 0's images, then rank 1's.
RANK_ORDER = rank_maps(0) + rank_maps(1)


def one_process(indices, maps):
    metric = FLIPMetric()
    for i in indices:
        metric.update_error_map(maps[i])
    return metric.compute()


def assert_same_result(got, want):
    """Bit for bit: pooled values, per-image means (in order), counts."""
    assert got.pooled == want.pooled
    assert torch.equal(got.per_image_means, want.per_image_means)
    assert (got.num_images, got.num_pixels) == (want.num_images, want.num_pixels)


@pytest.fixture(scope="module")
def metric_runs(tmp_path_factory):
    return cases.launch(cases.metric_worker, str(tmp_path_factory.mktemp("metric")))


def test_synced_metric_equals_one_process(metric_runs):
    maps = cases.error_maps()
    test, reference = cases.image_pair()
    # One process over the same images, in the documented order: rank 0's, then rank 1's.
    single = FLIPMetric()
    for i in RANK_ORDER:
        single.update_error_map(maps[i])
    single.update(test, reference)
    want = single.compute()
    for run in metric_runs:
        assert_same_result(run["synced"], want)
    assert want.num_images == 9 and want.num_pixels == sum(m.numel() for m in maps) + 2 * 18 * 22
    # The mean is the exact mean of every value, rounded once; min and max are exact.
    values = torch.cat([m.reshape(-1) for m in maps] + [flip_loss.ldr_flip(test, reference, eps=0.0).reshape(-1)])
    assert want.pooled.mean == float(sum(Fraction(v) for v in values.double().tolist()) / values.numel())
    assert (want.pooled.min, want.pooled.max) == (values.min().item(), values.max().item())

    # After compute, each rank folded one more map (rank r: map r); the result grows accordingly.
    again = FLIPMetric()
    for i in rank_maps(0) + [0] + rank_maps(1):
        again.update_error_map(maps[i])
    again.update(test, reference)
    again.update_error_map(maps[1])
    got = metric_runs[0]["synced_again"]
    assert got.pooled == again.compute().pooled and got.num_images == 11
    assert metric_runs[1]["synced_again"].pooled == got.pooled


def test_rank_order_of_per_image_means(metric_runs):
    """Rank 0's images first, each rank's in its update order."""
    maps = cases.error_maps()
    means = metric_runs[1]["synced"].per_image_means
    expected = [maps[i].double().mean().item() for i in RANK_ORDER]
    assert RANK_ORDER == [0, 2, 6, 4, 1, 3, 5]
    torch.testing.assert_close(means[:7], torch.tensor(expected, dtype=torch.float64), rtol=1e-14, atol=0)


def test_sync_off_and_an_idle_rank(metric_runs):
    maps = cases.error_maps()
    for rank, run in enumerate(metric_runs):
        assert_same_result(run["local"], one_process(rank_maps(rank), maps))
        # Rank 1 never updated: both ranks get rank 0's one image.
        assert_same_result(run["rank0_only"], one_process([0], maps))


def test_torchmetrics_metric_equals_flip_metric(metric_runs):
    single = FLIPMetric()
    for i in RANK_ORDER:
        single.update(*cases.pair_of(i))
    want = single.compute()
    alone = FLIPMetric()
    alone.update(*cases.pair_of(0))
    for run in metric_runs:
        assert_same_result(run["torchmetrics"], run["plain_for_torchmetrics"])
        assert_same_result(run["torchmetrics"], want)
        assert_same_result(run["rank0_only_torchmetrics"], alone.compute())


def test_same_error_on_every_rank(metric_runs):
    for run in metric_runs:
        assert run["nothing"][0] is None and run["nothing"][1][0] == "RuntimeError"
        assert "before any update() on any rank" in run["nothing"][1][1]
        assert run["bins_mismatch"][0] is None and run["bins_mismatch"][1][0] == "ValueError"
        assert "different bins (256, 512" in run["bins_mismatch"][1][1]
        assert run["torchmetrics_options_mismatch"][0] is None
        assert run["torchmetrics_options_mismatch"][1][0] == "ValueError"
        assert "ranks' metrics have different options" in run["torchmetrics_options_mismatch"][1][1]


def test_no_sync_without_a_process_group():
    """Without an initialised group compute() is local (and says so before any update)."""
    assert not torch.distributed.is_initialized()
    maps = cases.error_maps()
    metric = FLIPMetric()
    with pytest.raises(RuntimeError, match="before any update"):
        metric.compute()
    for m in maps[:3]:
        metric.update_error_map(m)
    assert_same_result(metric.compute(), one_process([0, 1, 2], maps))


# --- folder mode under torchrun -------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
# Six pairs of two sizes; test_balanced_shards says which rank evaluates which.
SIZES = ((24, 32), (24, 32), (40, 30), (24, 32), (40, 30), (24, 32))


def test_balanced_shards():
    assert balanced_shards([5, 5, 5, 5, 5], 2) == [[0, 2, 4], [1, 3]]  # one size: round-robin
    # Largest first, each to the lighter rank: 100 -> 0, 60 -> 1, 50 -> 1, 40 -> 0, 30 -> 1, and
    # 10 to rank 0 on the tie at 140: 150 and 140 pixels.
    assert balanced_shards([100, 60, 50, 40, 10, 30], 2) == [[0, 3, 4], [1, 2, 5]]
    assert sorted(i for shard in balanced_shards([3, 1, 4, 1, 5, 9, 2, 6], 3) for i in shard) == list(range(8))
    assert balanced_shards([7], 3) == [[0], [], []]
    pixels = [h * w for h, w in SIZES]
    assert balanced_shards(pixels, 2) == [[2, 0, 3], [4, 1, 5]]


def without_times(text):
    """Printed lines and report pages with the evaluation times and dates left out."""
    text = re.sub(r"(Evaluation time|Total time): [0-9.]+ seconds", r"\1: -", text)
    text = re.sub(r"evaluated in [0-9.]+ s", "evaluated in -", text)
    return re.sub(r"<time[^>]*>[^<]*</time>", "<time>-</time>", text)


def csv_rows_without_times(path):
    """The rows of a CSV file (which has no evaluation times without --timing)."""
    with open(path, newline="") as f:
        return list(csv.reader(f))


def outputs_of(directory):
    """{relative path: bytes} of every file under ``directory``."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(Path(directory).rglob("*")) if p.is_file()}


def single_process(argv, cwd, monkeypatch, capsys):
    """flip_loss.cli.main in this process (no torchrun variables): (exit code, stdout, stderr)."""
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def assert_same_outputs(one, many):
    """The same files, byte for byte, except the CSV's times and the report page's times."""
    a, b = outputs_of(one), outputs_of(many)
    assert sorted(a) == sorted(b)
    for name in a:
        if name.endswith(".csv"):
            assert csv_rows_without_times(Path(one) / name) == csv_rows_without_times(Path(many) / name), name
        elif name.endswith(".html"):
            assert without_times(a[name].decode()) == without_times(b[name].decode()), name
        else:
            assert a[name] == b[name], name


def folder_argv(references, tests):
    return [
        "--reference-dir",
        references,
        "--test-dir",
        tests,
        "-d",
        "out",
        "--report",
        "report",
        "-txt",
        "--no-progress",
        "--device",
        "cpu",
    ]


def test_cli_under_torchrun_equals_one_process(tmp_path, monkeypatch, capsys):
    references, tests = cases.make_folders(str(tmp_path / "images"), SIZES)
    argv = folder_argv(references, tests)
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    code, out, err = single_process(argv, tmp_path / "one", monkeypatch, capsys)
    assert code == 0, err
    env = cases.rank_environment(0, 1, 0)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "--nnodes=1",
            "--master_addr=127.0.0.1",
            f"--master_port={cases.free_port()}",
            "-m",
            "flip_loss",
            *argv,
        ],
        cwd=tmp_path / "two",
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, res.stderr
    # What rank 0 prints is what one process prints, in the same order.
    assert without_times(res.stdout) == without_times(out)
    assert out.count("FLIP between") == len(SIZES)
    assert_same_outputs(tmp_path / "one", tmp_path / "two")
    assert len(csv_rows_without_times(tmp_path / "two" / "out" / "summary.csv")) == 1 + len(SIZES)


def launch_ranks(argv, cwd, world_size=2, timeout=240):
    """The CLI as ``world_size`` ranks of a one-machine torchrun launch, without torchrun itself
    (so that each rank's exit code is seen): [(exit code, stdout, stderr)] in rank order."""
    port = cases.free_port()
    processes = []
    try:
        for rank in range(world_size):
            env = cases.rank_environment(rank, world_size, port)
            env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "flip_loss", *argv],
                    cwd=cwd,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        results = []
        for process in processes:
            out, err = process.communicate(timeout=timeout)
            results.append((process.returncode, out, err))
        return results
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()


def test_pair_failing_on_one_rank_and_the_gate_over_all_pairs(tmp_path, monkeypatch, capsys):
    """Pair p1 has a test image of the wrong size and goes to rank 1: rank 0 reports it as one
    process does (exit code 4) and writes the other pairs; the gate judges every rank's pairs."""
    references, tests = cases.make_folders(str(tmp_path / "images"), SIZES, broken=(1,))
    pixels = [(h - (i == 1)) * w for i, (h, w) in enumerate(SIZES)]  # from the test images' headers
    shards = balanced_shards(pixels, 2)
    assert 1 in shards[1]
    means = {
        i: flip_loss.ldr_flip(load_image(Path(tests) / f"p{i}.png"), load_image(Path(references) / f"p{i}.png"))
        .double()
        .mean()
        .item()
        for i in range(len(SIZES))
        if i != 1
    }
    # The threshold just below the worst of rank 1's other pairs: that pair fails the gate.
    worst_on_1 = max((i for i in shards[1] if i != 1), key=means.get)
    threshold = f"{means[worst_on_1] - 1e-4:.6f}"
    argv = folder_argv(references, tests) + ["--fail-above", "mean", threshold]
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    code, out, err = single_process(argv, tmp_path / "one", monkeypatch, capsys)
    assert code == 4
    ranks = launch_ranks(argv, tmp_path / "two")
    assert [rank[0] for rank in ranks] == [4, 0], ranks[0][2] + ranks[1][2]
    assert ranks[1][1] == "" and ranks[1][2] == ""  # rank 1 prints nothing
    assert without_times(ranks[0][1]) == without_times(out)
    assert ranks[0][2] == err
    assert "skipped test image <" in err and "p1.png" in err
    assert f"test image <{Path(tests) / f'p{worst_on_1}.png'}> is {means[worst_on_1]:.6f}, above the threshold" in err
    assert_same_outputs(tmp_path / "one", tmp_path / "two")
    rows = csv_rows_without_times(tmp_path / "two" / "out" / "summary.csv")
    assert [Path(row[1]).name for row in rows[1:]] == ["p0.png", "p1.png", "p2.png", "p3.png", "p4.png", "p5.png"]
    assert rows[2][8].startswith("not evaluated: ") and rows[2][9] == "fail"


def test_cli_folder_mode_with_ldr_and_hdr_pairs_under_torchrun(tmp_path, monkeypatch, capsys):
    """A golden folder of PNG and EXR images under torchrun: each pair of its own kind, a name shared
    by a PNG and an EXR image that pair's error, the outputs and the account those of one process."""
    from flip_loss.imageio import save_exr

    references, tests = cases.make_folders(str(tmp_path / "images"), SIZES[:3])
    g = torch.Generator().manual_seed(7)
    for i in range(3):
        reference = torch.rand(3, 24, 32, generator=g) ** 2 * (4.0 + 8 * i)
        save_exr(Path(references) / f"x{i}.exr", reference)
        save_exr(Path(tests) / f"x{i}.exr", reference * (1 + 0.3 * torch.rand(3, 24, 32, generator=g)))
    save_exr(Path(tests) / "p2.exr", torch.rand(3, 40, 30, generator=g))  # beside p2.png
    argv = folder_argv(references, tests) + ["--fail-above", "mean", "0.5"]
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    code, out, err = single_process(argv, tmp_path / "one", monkeypatch, capsys)
    assert code == 4, err
    assert out.startswith("Invoking LDR-FLIP (LDR pairs) and HDR-FLIP (OpenEXR pairs)")
    assert out.splitlines()[-1] == "gate: FAIL (5 evaluated, 0 over the gate, 1 not evaluated)"
    ranks = launch_ranks(argv, tmp_path / "two")
    assert [rank[0] for rank in ranks] == [4, 0], ranks[0][2] + ranks[1][2]
    assert without_times(ranks[0][1]) == without_times(out)
    assert ranks[0][2] == err and "2 images named 'p2'" in err
    assert_same_outputs(tmp_path / "one", tmp_path / "two")
    rows = csv_rows_without_times(tmp_path / "two" / "out" / "summary.csv")
    assert [row[8] == "evaluated" for row in rows[1:]] == [True, True, False, True, True, True]
    assert len(list((tmp_path / "two" / "out").glob("exposure_map.*"))) == 3


def test_an_error_on_one_rank_stops_every_rank(tmp_path):
    """An unexpected error while rank 1 evaluates: rank 0 reports it (exit code 3), both ranks
    stop after that round, nothing is written."""
    references, tests = cases.make_folders(str(tmp_path / "images"), SIZES)
    (tmp_path / "run").mkdir()
    argv = folder_argv(references, tests)
    ranks = cases.launch(cases.cli_rank_worker, str(tmp_path / "results"), argv, str(tmp_path / "run"), 1)
    (code0, out0, err0), (code1, out1, err1) = ranks
    assert (code0, code1) == (3, 3)
    assert "rank 1: Traceback" in err0 and "RuntimeError: a bug on this rank" in err0
    assert "internal error" in err0
    assert out1 == "" and err1 == ""
    assert list((tmp_path / "run").iterdir()) == []  # no output, no directory, no temporary file


# --- Ctrl-C and SIGTERM under torchrun --------------------------------------------------------------

HELPERS_DIR = Path(__file__).resolve().parents[1] / "helpers"
HOOKED_RANK = (
    "import sys, distributed_cases as c; "
    "sys.exit(c.cli_rank_with_hooks(sys.argv[1], {int(r) for r in sys.argv[2].split(',') if r}, sys.argv[3:]))"
)


def start_hooked_ranks(argv, cwd, markers, hang_ranks, world_size=2):
    """The CLI as ``world_size`` ranks (distributed_cases.cli_rank_with_hooks), started without
    torchrun so that each rank can be signalled on its own: the Popen objects in rank order."""
    port = cases.free_port()
    processes = []
    for rank in range(world_size):
        env = cases.rank_environment(rank, world_size, port)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HELPERS_DIR), env.get("PYTHONPATH", "")])
        processes.append(
            subprocess.Popen(
                [sys.executable, "-c", HOOKED_RANK, str(markers), ",".join(map(str, hang_ranks)), *argv],
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return processes


def wait_for(path, processes, timeout=180.0):
    deadline = time.monotonic() + timeout
    while not path.exists():
        for p in processes:
            assert p.poll() is None, f"a rank ended early: {p.communicate()}"
        assert time.monotonic() < deadline, f"{path.name} did not appear within {timeout:.0f} s"
        time.sleep(0.05)


@pytest.mark.parametrize(
    "hung,signalled,marker",
    [
        (1, 0, "waiting.0"),  # rank 0 waits in a gather for rank 1, which hangs
        (0, 1, "waiting.1"),  # rank 1 waits for rank 0, which hangs
        ((0, 1), 0, "evaluating.0"),  # rank 0 is signalled while it evaluates, and rank 1 hangs
    ],
    ids=["rank-0-waiting", "rank-1-waiting", "rank-0-evaluating"],
)
def test_sigterm_ends_a_rank_promptly_whatever_it_waits_for(tmp_path, hung, signalled, marker):
    """SIGTERM to one rank while it waits for a hung peer (inside a collective, where gloo's wait
    cannot be interrupted) or while it evaluates and its peer hangs: the rank exits 130 within a
    few seconds (the bound below is a generous timeout), and leaves no output and no temporary
    file. --dist-timeout is far longer, so only the signal can end the wait."""
    references, tests = cases.make_folders(str(tmp_path / "images"), SIZES)
    run_dir, markers = tmp_path / "run", tmp_path / "markers"
    run_dir.mkdir()
    markers.mkdir()
    hung = hung if isinstance(hung, tuple) else (hung,)
    argv = folder_argv(references, tests) + ["--dist-timeout", "600"]
    processes = start_hooked_ranks(argv, run_dir, markers, hung)
    try:
        wait_for(markers / marker, processes)
        time.sleep(0.5)  # well inside the collective (or the evaluation)
        started = time.monotonic()
        processes[signalled].send_signal(signal.SIGTERM)
        out, err = processes[signalled].communicate(timeout=20)
        elapsed = time.monotonic() - started
        # The other rank, hung, is stopped as torchrun stops it (SIGTERM), and cleans up too.
        other = processes[1 - signalled]
        other.send_signal(signal.SIGTERM)
        other.communicate(timeout=20)
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert processes[signalled].returncode == 130, err
    assert elapsed < 20
    if signalled == 0:
        assert err.strip().splitlines()[-1] == "flip-loss: interrupted; no output file was written"
    else:
        assert err == ""  # rank 0 reports for the run
    assert "Traceback" not in err
    assert list(run_dir.iterdir()) == []  # no output, no directory, no temporary file


# --- environments inherited from a launched rank ------------------------------------------------------


def test_launch_inherited_compares_with_the_parent(monkeypatch):
    """The rule of flip_loss.distributed.launch_inherited: the torchrun variables are inherited
    when the parent process carries the same ones; FLIP_LOSS_TORCHRUN overrides it."""
    from flip_loss import distributed

    mine = {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
        "TORCHELASTIC_RUN_ID": "abc",
    }
    for name in ("FLIP_LOSS_TORCHRUN", *mine):
        monkeypatch.delenv(name, raising=False)
    for name, value in mine.items():
        monkeypatch.setenv(name, value)
    parents = {
        "agent": {"PATH": "/bin"},
        "unreadable": None,
        "rank": dict(mine, OTHER="x"),
        "outer rank": dict(mine, MASTER_PORT="29400"),
        "nested rank": dict(mine, RANK="0"),
    }
    expected = {"agent": False, "unreadable": False, "rank": True, "outer rank": False, "nested rank": False}
    for name, parent in parents.items():
        monkeypatch.setattr(distributed, "_parent_environment", lambda parent=parent: parent)
        assert distributed.launch_inherited() is expected[name], name
        assert (distributed.launched_world() is None) is expected[name], name
    monkeypatch.setattr(distributed, "_parent_environment", lambda: parents["rank"])
    monkeypatch.setenv("FLIP_LOSS_TORCHRUN", "worker")
    assert not distributed.launch_inherited() and distributed.launched_world() == (1, 2, 1)
    monkeypatch.setattr(distributed, "_parent_environment", lambda: parents["agent"])
    monkeypatch.setenv("FLIP_LOSS_TORCHRUN", "ignore")
    assert distributed.launch_inherited() and distributed.launched_world() is None
    monkeypatch.setenv("FLIP_LOSS_TORCHRUN", "sometimes")
    with pytest.raises(ValueError, match="FLIP_LOSS_TORCHRUN='sometimes' must be one of auto, worker, ignore"):
        distributed.launched_world()
    monkeypatch.setenv("WORLD_SIZE", "1")  # no launch to speak of: nothing is inherited
    monkeypatch.setenv("FLIP_LOSS_TORCHRUN", "ignore")
    assert not distributed.launch_inherited()


def run_with_parent(argv, cwd, env, child_env="", timeout=240):
    """``argv`` run by a parent process (distributed_cases.INHERITING_PARENT) whose environment is
    ``env``; ``child_env``: NAME=VALUE pairs only the child gets."""
    return subprocess.run(
        [sys.executable, "-c", cases.INHERITING_PARENT, child_env, *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_an_inherited_environment_runs_alone(tmp_path, monkeypatch, capsys):
    """A child of a launched rank (here a parent process with rank 1's or rank 0's torchrun
    variables) runs as one process: with one reference it evaluates and writes its outputs
    (not: returns 0 having done nothing, as rank 1 of a launch would), in folder mode it writes
    the outputs one process writes (not: waits for peers that never come), with a one-line note."""
    references, tests = cases.make_folders(str(tmp_path / "images"), SIZES)
    port = cases.free_port()
    (tmp_path / "one").mkdir()
    argv = folder_argv(references, tests)
    code, out, err = single_process(argv, tmp_path / "one", monkeypatch, capsys)
    assert code == 0, err
    for rank, mode in ((1, "pair"), (0, "folder")):
        work = tmp_path / f"{mode}-{rank}"
        work.mkdir()
        env = cases.rank_environment(rank, 2, port)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        if mode == "pair":
            child = ["-r", str(Path(references) / "p0.png"), "-t", str(Path(tests) / "p0.png"), "-txt"]
        else:
            child = argv + ["--dist-timeout", "20"]  # bounds the wait of a child that waits for peers
        res = run_with_parent([sys.executable, "-m", "flip_loss", *child], work, env)
        assert res.returncode == 0, res.stderr
        assert "were inherited from the parent process" in res.stderr
        assert res.stderr.count("flip-loss: warning: the torchrun variables") == 1
        if mode == "pair":
            assert sorted(p.name for p in work.iterdir()) == [
                "flip.p0.p0.67ppd.ldr.png",
                "pooled_values.flip.p0.p0.67ppd.ldr.txt",
            ]
            assert res.stdout.count("FLIP between") == 1
        else:
            assert without_times(res.stdout) == without_times(out)
            assert_same_outputs(tmp_path / "one", work)
    # At verbosity 0 the note is left out; a bad option is reported by the child of any rank.
    env = cases.rank_environment(1, 2, port)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    res = run_with_parent(
        [sys.executable, "-m", "flip_loss", "-r", "missing.png", "-t", "missing.png", "-v", "0"], tmp_path, env
    )
    assert res.returncode == 2 and res.stderr.startswith("flip-loss: error: ") and "missing.png" in res.stderr


def test_the_override_makes_a_wrapped_command_a_rank(tmp_path, monkeypatch, capsys):
    """A wrapper between torchrun and the command line (as ``torchrun --no-python bash -c ...``
    makes one) looks like a parent with the launch variables; FLIP_LOSS_TORCHRUN=worker on the
    command says that they are its launch after all: the two wrapped ranks share the pairs (rank
    1 prints nothing, rank 0 prints and writes what one process does)."""
    references, tests = cases.make_folders(str(tmp_path / "images"), SIZES)
    argv = folder_argv(references, tests)
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    code, out, err = single_process(argv, tmp_path / "one", monkeypatch, capsys)
    assert code == 0, err
    port = cases.free_port()
    processes = []
    try:
        for rank in range(2):
            env = cases.rank_environment(rank, 2, port)
            env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
            processes.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        cases.INHERITING_PARENT,
                        "FLIP_LOSS_TORCHRUN=worker",
                        sys.executable,
                        "-m",
                        "flip_loss",
                        *argv,
                    ],
                    cwd=tmp_path / "two",
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        results = [p.communicate(timeout=240) + (p.returncode,) for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert [r[2] for r in results] == [0, 0], results[0][1] + results[1][1]
    assert results[1][:2] == ("", "")
    assert without_times(results[0][0]) == without_times(out)
    assert_same_outputs(tmp_path / "one", tmp_path / "two")


def test_a_gate_run_by_a_torchrun_rank_runs_alone(tmp_path):
    """The typical case, under torchrun itself: a training script's rank runs the command line as
    a subprocess gate (rank 0 in folder mode, rank 1 with one reference); each child runs alone
    and writes its outputs (not: waits for a peer, or does nothing)."""
    references, tests = cases.make_folders(str(tmp_path / "images"), SIZES)
    script = tmp_path / "train.py"
    script.write_text(cases.GATING_RANK_SCRIPT)
    env = cases.rank_environment(0, 1, 0)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "--nnodes=1",
            "--master_addr=127.0.0.1",
            f"--master_port={cases.free_port()}",
            str(script),
            references,
            tests,
            str(Path(references) / "p0.png"),
            str(Path(tests) / "p0.png"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    gates = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert [g["code"] for g in gates] == [0, 0], gates
    assert gates[0]["stdout"].count("FLIP between") == len(SIZES)
    assert len(list((tmp_path / "out0").glob("*.png"))) == len(SIZES)
    assert [p.name for p in (tmp_path / "out1").iterdir()] == ["flip.p0.p0.67ppd.ldr.png"]


# --- DDP training: examples/train_denoiser.py ---------------------------------------------------------


def test_ddp_training_steps_keep_the_ranks_identical(tmp_path):
    """Three steps under DDP on 2 ranks: every rank ends with the same parameters, which are those
    of one process training on the whole batches (up to float rounding), and the held-out FLIP
    (FLIPMetric synced over the ranks' shares of the crops) is one process's."""
    ranks = cases.launch(cases.ddp_worker, str(tmp_path))
    alone = cases.train_few_steps()
    assert [r["size"] for r in ranks] == [2, 2] and alone["size"] == 1
    module = cases.load_denoiser_example()
    torch.manual_seed(0)
    initial = list(module.Denoiser(8, 3).parameters())
    for a, b, one, start in zip(ranks[0]["parameters"], ranks[1]["parameters"], alone["parameters"], initial):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, one, rtol=0, atol=2e-5)
        assert not torch.equal(a, start.detach())  # trained
    # The noisy input's held-out FLIP does not depend on the model: bit for bit one process's.
    assert ranks[0]["base"][0] == ranks[1]["base"][0] == alone["base"][0]
    assert ranks[0]["base"][1] == pytest.approx(alone["base"][1], rel=1e-12)
    for key in ("eval_flip", "l1", "flip"):
        assert ranks[0]["history"][key] == ranks[1]["history"][key], key
        assert ranks[0]["history"][key] == pytest.approx(alone["history"][key], rel=1e-4), key
    assert ranks[0]["results"]["flip"] == ranks[1]["results"]["flip"]


def test_train_denoiser_runs_unchanged_under_torchrun(tmp_path):
    """The script itself under torchrun: rank 0 prints and writes once; its held-out FLIP of the
    noisy input is what one process computes."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    argv = [
        "--steps",
        "2",
        "--crop",
        "16",
        "--batch",
        "4",
        "--eval-crops",
        "3",
        "--display-size",
        "32",
        "--channels",
        "8",
        "--depth",
        "3",
        "--device",
        "cpu",
        "--out",
        "out",
    ]
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "--nnodes=1",
            "--master_addr=127.0.0.1",
            f"--master_port={cases.free_port()}",
            cases.EXAMPLE,
            *argv,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("2 processes (DDP)") == 1 and res.stdout.count("held-out results") == 1
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["processes"] == 2 and set(metrics["held_out"]) == {"noisy input", "L1", "L1 + 0.3*FLIP"}
    module = cases.load_denoiser_example()
    held_out = module.load_images(module.HELD_OUT_IMAGES)
    eval_gen = torch.Generator().manual_seed(12345)
    clean = module.random_crops(held_out, 3, 16, eval_gen)
    noisy = module.add_noise(clean, 0.1, eval_gen)
    one = FLIPMetric()
    one.update(noisy, clean)
    assert metrics["held_out"]["noisy input"]["flip"] == one.compute().pooled.mean
