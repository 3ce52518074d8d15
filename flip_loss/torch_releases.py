"""The torch releases flip-loss supports: the one source for the build's choice (setup.py loads this
file on its own, before the package can be imported), the import-time check and the documents. It
imports nothing, so that setup.py can load it without torch's extension machinery.

MIN_TORCH is the oldest release the compiled kernels work with: they are built on PyTorch's stable
ABI, and the Python layer that registers them uses ``torch.library`` features (custom-op tags such
as ``cudagraph_unsafe``) that older releases lack. PORTABLE_MIN_TORCH is the oldest release the
package works with at all: from there up to MIN_TORCH it is pure Python, and every device runs the
portable path (flip_loss/oracle.py), whose operations torch 2.1 has. NEWEST_TORCH is the newest
release the test suite has been run against."""

MIN_TORCH = (2, 11)
PORTABLE_MIN_TORCH = (2, 1)
NEWEST_TORCH = (2, 15)


def release_of(version: str) -> tuple:
    """(major, minor) of a torch version string: '2.11.0', '2.11.0+cu130', '2.12.0a0+git1234'."""
    parts = version.split("+")[0].split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or "0")
    except (IndexError, ValueError):
        raise ValueError(f"unrecognised torch version {version!r}") from None


def spelled(release: tuple) -> str:
    return ".".join(str(n) for n in release)


def unsupported_reason(version: str):
    """Why this torch cannot run flip-loss at all, in words a user can act on; None when it can."""
    if release_of(version) < PORTABLE_MIN_TORCH:
        return (
            f"flip-loss needs torch >= {spelled(PORTABLE_MIN_TORCH)} (its compiled kernels torch >= "
            f"{spelled(MIN_TORCH)}; tested up to {spelled(NEWEST_TORCH)}); this is torch {version}. Upgrade "
            f"torch (pip install 'torch>={spelled(MIN_TORCH)}'), then reinstall flip-loss against it "
            "(pip install --no-build-isolation .)"
        )
    return None


def kernels_unsupported_reason(version: str):
    """Why the compiled kernels cannot run with this torch (the package then runs the portable
    path on every device), in words a user can act on; None when they can."""
    if release_of(version) < MIN_TORCH:
        return (
            f"flip-loss's compiled kernels need torch >= {spelled(MIN_TORCH)} (PyTorch's stable ABI); this is "
            f"torch {version}. For them, upgrade torch (pip install 'torch>={spelled(MIN_TORCH)}') and "
            "reinstall flip-loss against it (pip install --no-build-isolation .)"
        )
    return None


def requirement(kernels: bool = True) -> str:
    """The package's torch requirement: the supported range, from MIN_TORCH for a build with the
    compiled kernels, from PORTABLE_MIN_TORCH for one without. The upper bound is the release after
    the newest one tested, so that pip refuses an untested torch instead of installing next to it."""
    oldest = MIN_TORCH if kernels else PORTABLE_MIN_TORCH
    return f"torch>={spelled(oldest)},<{NEWEST_TORCH[0]}.{NEWEST_TORCH[1] + 1}"


def target_version_macro() -> str:
    """TORCH_TARGET_VERSION for the stable-ABI build: (major << 56) | (minor << 48) of MIN_TORCH,
    so that the headers use nothing the oldest supported release lacks."""
    return f"0x{(MIN_TORCH[0] << 56) | (MIN_TORCH[1] << 48):016x}"
