"""The torch releases flip-loss supports: the one source for the build's refusal of an older torch
(setup.py loads this file on its own, before the package can be imported), the import-time check
and the documents. It imports nothing, so that setup.py can load it without torch's extension
machinery.

MIN_TORCH is the oldest release the package works with: the Python layer registers ops with
``torch.library`` features (custom-op tags such as ``cudagraph_unsafe``) that older releases lack,
so there an import would fail half-way with an AttributeError. NEWEST_TORCH is the newest release
the test suite has been run against."""

MIN_TORCH = (2, 11)
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
    """Why this torch cannot run flip-loss, in words a user can act on; None when it can."""
    if release_of(version) < MIN_TORCH:
        return (
            f"flip-loss needs torch >= {spelled(MIN_TORCH)} (tested up to {spelled(NEWEST_TORCH)}); "
            f"this is torch {version}. Upgrade torch (pip install 'torch>={spelled(MIN_TORCH)}'), then "
            "rebuild flip-loss against it (pip install --no-build-isolation .)"
        )
    return None


def requirement() -> str:
    """The package's torch requirement: the supported range. The upper bound is the release after
    the newest one tested, so that pip refuses an untested torch instead of installing next to it."""
    return f"torch>={spelled(MIN_TORCH)},<{NEWEST_TORCH[0]}.{NEWEST_TORCH[1] + 1}"


def target_version_macro() -> str:
    """TORCH_TARGET_VERSION for the stable-ABI build: (major << 56) | (minor << 48) of MIN_TORCH,
    so that the headers use nothing the oldest supported release lacks."""
    return f"0x{(MIN_TORCH[0] << 56) | (MIN_TORCH[1] << 48):016x}"
