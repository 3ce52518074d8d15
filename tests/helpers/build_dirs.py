"""Where the tests build what they compile against torch (the C++ programs, the GPU emulator):
one directory tree per torch release, build/torch-<major>.<minor>/. The C++ programs link torch's
C++ library and the emulator is compiled with the running torch's headers, so a build made with
one release is never reused with another: scripts/test.sh runs the suite with two, side by side,
from the same checkout. Each directory can be moved with its own environment variable
(docs/environment.md)."""

import os
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
TORCH_RELEASE = ".".join(torch.__version__.split("+")[0].split(".")[:2])
TORCH_BUILD_ROOT = ROOT / "build" / f"torch-{TORCH_RELEASE}"


def build_dir(env_var: str, name: str) -> Path:
    """The directory env_var names, else build/torch-<release>/<name>."""
    return Path(os.environ.get(env_var) or TORCH_BUILD_ROOT / name)
