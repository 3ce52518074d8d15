"""The library leaves the process's state alone: loading images (PNG, OpenEXR, damaged ones too),
evaluating pairs and the command line called as a library function change no file descriptor,
standard stream, warning filter or signal handler (SIGPIPE included), not even while they run, and
what other threads print meanwhile arrives. A standard stream closed by its reader is the reader's
choice: the run writes its files and exits with its own code, in a thread and as a process."""

import errno
import os
import signal
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest
from PIL import Image

from cli_runs import ROOT
from flip_loss.cli import main
from flip_loss.imageio import image_size, load_image, save_exr, save_png

OpenEXR = pytest.importorskip("OpenEXR")


def _fd_identity(fd):
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


class StateWatch:
    """Samples, in a thread of its own, what must not change while the work runs: file descriptors
    1 and 2, sys.stdout and sys.stderr, the warning filters (the list and its contents) and
    warnings.showwarning, and the SIGINT and SIGTERM handlers. ``changes`` lists what it saw
    differ from the state at the start."""

    def __init__(self):
        self.start = self._state()
        self.changes = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    @staticmethod
    def _state():
        return {
            "fd 1": _fd_identity(1),
            "fd 2": _fd_identity(2),
            "sys.stdout": id(sys.stdout),
            "sys.stderr": id(sys.stderr),
            "warnings.filters": id(warnings.filters),
            "filter contents": tuple(warnings.filters),
            "warnings.showwarning": id(warnings.showwarning),
            "SIGINT": signal.getsignal(signal.SIGINT),
            "SIGTERM": signal.getsignal(signal.SIGTERM),
            "SIGPIPE": signal.getsignal(signal.SIGPIPE),
        }

    def _watch(self):
        while not self._stop.is_set():
            now = self._state()
            self.changes.extend(
                name for name, value in now.items() if value != self.start[name] and name not in self.changes
            )
            time.sleep(0.0005)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        after = self._state()
        self.changes.extend(f"{name} (afterwards)" for name, value in after.items() if value != self.start[name])


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Good and damaged PNG and OpenEXR files: {name: path}."""
    d = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(3)
    paths = {}
    save_png(d / "good.png", rng.integers(0, 256, (40, 48, 3), dtype=np.uint8))
    paths["good.png"] = d / "good.png"
    data = (d / "good.png").read_bytes()
    (d / "truncated.png").write_bytes(data[: len(data) // 2])
    paths["truncated.png"] = d / "truncated.png"
    save_exr(d / "good.exr", rng.random((3, 40, 48), dtype=np.float32))
    paths["good.exr"] = d / "good.exr"
    data = (d / "good.exr").read_bytes()
    (d / "truncated.exr").write_bytes(data[: len(data) - 300])  # OpenEXR complains about its last chunk
    paths["truncated.exr"] = d / "truncated.exr"
    (d / "header.exr").write_bytes(b"v/1\x01" + b"\0" * 100)
    paths["header.exr"] = d / "header.exr"
    # A PNG header above Pillow's own warning limit (89M pixels), below flip-loss's (2^27).
    import struct
    import zlib

    def chunk(tag, payload):
        return struct.pack(">I", len(payload)) + tag + payload + struct.pack(">I", zlib.crc32(tag + payload))

    (d / "large.png").write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 10000, 10000, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(b""))
        + chunk(b"IEND", b"")
    )
    paths["large.png"] = d / "large.png"
    return paths


def _load(path):
    try:
        return load_image(path)
    except ValueError as exc:
        return exc


def test_loading_images_in_threads_changes_no_process_state(images, capfd):
    """Four threads load good and damaged PNG and OpenEXR files (and read a header above Pillow's
    warning limit) while another prints numbered lines through sys.stdout and straight to file
    descriptors 1 and 2: every printed line arrives, none of OpenEXR's own diagnostics does, the
    damaged files give their clean errors, and nothing the StateWatch samples ever changes."""
    capfd.readouterr()
    errors, results = [], {}
    done = threading.Event()

    def loader(k):
        try:
            for _ in range(25):
                for name in ("good.exr", "truncated.exr", "header.exr", "good.png", "truncated.png"):
                    results.setdefault(name, set()).add(type(_load(images[name])).__name__)
                assert image_size(images["large.png"]) == (10000, 10000)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    def printer():
        i = 0
        while not done.is_set() or i < 200:
            print(f"python line {i}", flush=True)
            os.write(1, f"fd1 line {i}\n".encode())
            os.write(2, f"fd2 line {i}\n".encode())
            i += 1
            time.sleep(0.0002)
        return i

    count = {}
    with StateWatch() as watch:
        threads = [threading.Thread(target=loader, args=(k,)) for k in range(4)]
        printing = threading.Thread(target=lambda: count.setdefault("lines", printer()))
        printing.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        printing.join()
    out, err = capfd.readouterr()
    assert errors == []
    assert watch.changes == []
    n = count["lines"]
    assert out.splitlines().count("python line 0") == 1
    for i in range(n):
        assert f"python line {i}\n" in out and f"fd1 line {i}\n" in out, i
        assert f"fd2 line {i}\n" in err, i
    assert "EXR_ERR" not in out + err and "Warning: Exception raised" not in out + err
    assert "DecompressionBomb" not in out + err
    assert results == {
        "good.exr": {"Tensor"},
        "truncated.exr": {"ValueError"},
        "header.exr": {"ValueError"},
        "good.png": {"Tensor"},
        "truncated.png": {"ValueError"},
    }
    message = str(_load(images["truncated.exr"]))
    assert "truncated.exr': the OpenEXR file is damaged, truncated" in message and "past the end of the file" in message


@pytest.fixture
def pairs(tmp_path):
    """Three pairs of small PNG images in tmp_path/images: [(reference, test)]."""
    d = tmp_path / "images"
    d.mkdir()
    rng = np.random.default_rng(5)
    out = []
    for i in range(3):
        reference = rng.integers(0, 256, (36, 44, 3), dtype=np.uint8)
        test = np.clip(reference.astype(int) + rng.integers(-20, 21, reference.shape), 0, 255).astype(np.uint8)
        Image.fromarray(reference).save(d / f"ref{i}.png")
        Image.fromarray(test).save(d / f"test{i}.png")
        out.append((d / f"ref{i}.png", d / f"test{i}.png"))
    return out


def test_main_in_several_threads_at_once(pairs, tmp_path, capsys):
    """flip_loss.cli.main run by three threads at once, each on its own pairs and outputs: each
    returns 0 with its outputs written, and no warning filter, stream or handler changes on the
    way (evaluating a pair catches no warning process-wide)."""
    codes = {}

    def run(k):
        reference, test = pairs[k]
        out = tmp_path / f"out{k}"
        codes[k] = main(["-r", str(reference), "-t", str(test), "-d", str(out), "-txt", "-v", "0", "--device", "cpu"])

    with StateWatch() as watch:
        for _ in range(3):
            threads = [threading.Thread(target=run, args=(k,)) for k in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    assert codes == {0: 0, 1: 0, 2: 0}
    assert watch.changes == []
    for k in range(3):
        names = sorted(p.name for p in (tmp_path / f"out{k}").iterdir())
        assert names == [f"flip.ref{k}.test{k}.67ppd.ldr.png", f"pooled_values.flip.ref{k}.test{k}.67ppd.ldr.txt"]


def _recording_handler(received):
    def handler(signum, frame):
        received.append(signum)

    return handler


def test_main_leaves_signal_handlers_it_does_not_own_alone(pairs, tmp_path, monkeypatch, capsys):
    """A program that owns SIGINT and SIGTERM (its own handlers) calls flip_loss.cli.main: its
    handlers stay in place the whole run, also while the outputs are renamed into place, and a
    signal meanwhile reaches them; the run still succeeds."""
    received = []
    handler = _recording_handler(received)
    seen = []
    real_replace = os.replace

    def replace(src, dst):  # the commit: the handlers in place now, and a signal delivered
        seen.append((signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)))
        os.kill(os.getpid(), signal.SIGTERM)
        real_replace(src, dst)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        monkeypatch.setattr(os, "replace", replace)
        with StateWatch() as watch:
            code = main(["-r", str(pairs[0][0]), "-t", str(pairs[0][1]), "-d", str(tmp_path / "out"), "-v", "0"])
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
    assert code == 0
    assert watch.changes == []
    assert seen and all(h == (handler, handler) for h in seen)
    assert signal.SIGTERM in received
    assert (tmp_path / "out" / "flip.ref0.test0.67ppd.ldr.png").exists()


def test_main_handles_sigterm_only_while_it_runs(pairs, tmp_path, monkeypatch, capsys):
    """With the default dispositions, main handles SIGTERM (as Ctrl-C) while it runs and restores
    the defaults when it returns; a SIGTERM while the outputs are renamed into place waits until
    all of them are (exit code 130, the outputs written)."""
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    seen = []
    real_replace = os.replace

    def replace(src, dst):
        seen.append(signal.getsignal(signal.SIGTERM))
        if len(seen) == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    out = tmp_path / "out"
    code = main(["-r", str(pairs[0][0]), "-t", str(pairs[0][1]), "-d", str(out), "-txt", "-v", "0"])
    assert code == 130
    assert capsys.readouterr().err == "flip-loss: interrupted; the outputs had been written\n"
    assert len(seen) == 2 and seen[0] not in (signal.SIG_DFL, signal.SIG_IGN)
    assert sorted(p.name for p in out.iterdir()) == [
        "flip.ref0.test0.67ppd.ldr.png",
        "pooled_values.flip.ref0.test0.67ppd.ldr.txt",
    ]
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


class ClosedPipe:
    """A standard stream whose reader has gone: every write fails with EPIPE."""

    encoding = "utf-8"

    def __init__(self):
        self.writes = 0

    def write(self, text):
        self.writes += 1
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    def flush(self):
        pass


def test_streams_closed_by_their_readers_in_threads(pairs, tmp_path, monkeypatch):
    """main in three threads with stdout and stderr closed by their readers (a folder run with a
    pair that fails, so both get lines): each run writes its files and returns its own exit code
    (4: the failed pair), and no handler (SIGPIPE included) changes."""
    refs, tests = tmp_path / "refs", tmp_path / "tests"
    refs.mkdir(), tests.mkdir()
    for i, (reference, test) in enumerate(pairs):
        os.link(reference, refs / f"p{i}.png")
        os.link(test, tests / f"p{i}.png")
    (tests / "p0.png").write_bytes(b"not a PNG")
    out, err = ClosedPipe(), ClosedPipe()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    codes = {}

    def run(k):
        argv = ["--reference-dir", str(refs), "--test-dir", str(tests), "-d", str(tmp_path / f"out{k}"), "-txt"]
        codes[k] = main(argv)

    with StateWatch() as watch:
        threads = [threading.Thread(target=run, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert codes == {0: 4, 1: 4, 2: 4}
    assert watch.changes == [] and out.writes > 0 and err.writes > 0
    for k in range(3):
        names = sorted(p.name for p in (tmp_path / f"out{k}").iterdir())
        assert names == [
            "flip.p1.p1.67ppd.ldr.png",
            "flip.p2.p2.67ppd.ldr.png",
            "pooled_values.flip.p1.p1.67ppd.ldr.txt",
            "pooled_values.flip.p2.p2.67ppd.ldr.txt",
            "summary.csv",
        ]


@pytest.mark.parametrize("how", ["reader gone", "closed before the start"])
def test_the_command_with_its_standard_streams_closed(pairs, tmp_path, how):
    """python -m flip_loss with stdout and stderr closed by their readers (as `| head -1` does) or
    closed before it starts (>&- 2>&-): it writes its outputs and exits 0, with nothing on the
    way out (no 'Exception ignored', no exit code 120 from Python's last flush)."""
    (reference, test), out = pairs[0], tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    command = [sys.executable, "-m", "flip_loss", "-r", str(reference), "-t", str(test), "-d", str(out), "-txt"]
    if how == "reader gone":
        child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        child.stdout.close(), child.stderr.close()  # before the child has printed anything
        code = child.wait(timeout=300)
    else:
        code = subprocess.run(command, env=env, preexec_fn=lambda: (os.close(1), os.close(2)), timeout=300).returncode
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "flip.ref0.test0.67ppd.ldr.png",
        "pooled_values.flip.ref0.test0.67ppd.ldr.txt",
    ]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_standard_output_that_fails_is_an_error_and_nothing_is_written(pairs, tmp_path):
    """stdout on a full disk (/dev/full: every write fails with ENOSPC) is neither a reader gone
    nor a gate failure: one error line, exit code 2, no output, no traceback."""
    (reference, test), out = pairs[0], tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    command = [sys.executable, "-m", "flip_loss", "-r", str(reference), "-t", str(test), "-d", str(out)]
    with open("/dev/full", "w") as full:
        done = subprocess.run(command, env=env, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr == "flip-loss: error: cannot write to standard output: No space left on device\n"
    assert not out.exists()
