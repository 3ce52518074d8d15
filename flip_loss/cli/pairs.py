"""Which images a ``flip-loss`` run compares: the pairs (one reference and its test images, the
bundled example, or two folders paired by file name), whether they are LDR or HDR images, and
their sizes from the headers."""

import os
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from .errors import UsageError

_DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")

# Image files the folder mode pairs up (case-insensitive). Radiance .hdr and .pfm files are reported
# and skipped (not supported; OpenEXR is the HDR format).
FOLDER_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tga", ".exr")

Pair = Tuple[str, str]  # (reference, test)


def example_paths() -> Tuple[str, str]:
    """Absolute paths of the bundled example pair ``(reference, test)`` (PNG, 256 x 192, sRGB;
    see ``flip_loss/data/LICENSE.md`` for their origin and licence)."""
    return (os.path.join(_DATA_DIR, "example_reference.png"), os.path.join(_DATA_DIR, "example_test.png"))


def stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def _list_names(names: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def uses_hdr(pairs: Sequence[Pair]) -> bool:
    """True when a run of one reference (``-r``/``-t``) is HDR-FLIP: as in NVIDIA's tool an OpenEXR
    reference selects HDR-FLIP, and its test images must be of its kind (UsageError otherwise);
    Radiance .hdr and .pfm files are not supported. (Folder mode gives each pair its own kind.)"""
    from ..imageio import UNSUPPORTED_HDR_EXTENSIONS, is_exr_path

    for path in (p for pair in pairs for p in pair):
        ext = os.path.splitext(path)[1]
        if ext.lower() in UNSUPPORTED_HDR_EXTENSIONS:
            raise UsageError(
                f"'{path}': {ext} files (Radiance HDR / PFM) are not supported; convert "
                "the image to OpenEXR (.exr), which selects HDR-FLIP"
            )
    for ref, test in pairs:
        mismatch = kind_mismatch(ref, test)
        if mismatch is not None:
            raise UsageError(mismatch)
    return any(is_exr_path(ref) for ref, _ in pairs)


def _scan_folder(directory: str, what: str) -> Tuple[Dict[str, List[str]], List[str], List[str]]:
    """{stem: [paths]} of the supported images in ``directory`` (not recursive; hidden files are
    ignored; more than one path under a stem, e.g. ``a.png`` beside ``a.exr``, makes that name
    ambiguous), plus the names of unsupported HDR files (.hdr, .pfm) and of other files that were
    skipped."""
    from ..imageio import is_hdr_path

    if not os.path.exists(directory):
        raise UsageError(f"{what} '{directory}' does not exist")
    if not os.path.isdir(directory):
        raise UsageError(f"{what} '{directory}' is not a directory")
    try:
        entries = sorted(os.listdir(directory))
    except OSError as exc:
        raise UsageError(f"cannot list {what} '{directory}': {exc.strerror or exc}") from None
    found: Dict[str, List[str]] = {}
    hdr: List[str] = []
    other: List[str] = []
    for name in entries:
        path = os.path.join(directory, name)
        if name.startswith(".") or not os.path.isfile(path):
            continue
        ext = os.path.splitext(name)[1].lower()
        if ext in FOLDER_EXTENSIONS:
            found.setdefault(os.path.splitext(name)[0], []).append(path)
        elif is_hdr_path(name):
            hdr.append(name)
        else:
            other.append(name)
    return found, hdr, other


def _ambiguous(paths: Sequence[str], directory: str, what: str) -> str:
    """Why a name with more than one image in one folder is not evaluated."""
    stem_ = stem(paths[0])
    return (
        f"the {what} '{directory}' has {len(paths)} images named '{stem_}' "
        f"({', '.join(os.path.basename(p) for p in paths)}); the pairing by name would be "
        "ambiguous: rename or remove all but one"
    )


def kind_mismatch(reference: str, test: str) -> Optional[str]:
    """Why a pair of an OpenEXR (HDR) image and an LDR image cannot be evaluated, or None: an .exr
    reference selects HDR-FLIP and needs an .exr test image, an LDR reference an LDR one."""
    from ..imageio import is_exr_path

    if is_exr_path(reference) == is_exr_path(test):
        return None
    hdr_file, ldr_file = (reference, test) if is_exr_path(reference) else (test, reference)
    return (
        f"cannot mix HDR and LDR images: '{hdr_file}' is an OpenEXR (HDR) image but "
        f"'{ldr_file}' is not; an .exr reference (HDR-FLIP) needs an .exr test image, an LDR "
        "reference an LDR test image"
    )


class Unmatched(NamedTuple):
    """A folder-mode image without a partner of the same name: its path in one folder, "" in the
    other, and why it was not evaluated."""

    reference: str
    test: str
    reason: str


class Pairing(NamedTuple):
    pairs: List[Pair]  # (reference, test), in file-name order
    warnings: List[str]  # files left out that are not images of a pair
    unmatched: List[Unmatched]  # folder mode: images without a partner, in file-name order
    unmatched_lines: List[str]  # the same, summed up for the console (one line per folder)
    # folder mode: the pairs that cannot be evaluated whatever their pixels hold, by 1-based position
    # among ``pairs``, with the reason (a name shared by two images of one folder, an OpenEXR image
    # paired with an LDR one): each is that pair's error, not the run's
    refused: Dict[int, str] = {}


def _pair_folders(reference_dir: str, test_dir: str) -> Pairing:
    """The pairs of images of the same name (with the reasons of those that cannot be evaluated),
    the images without a partner, and warnings about the other files left out."""
    refs, ref_hdr, ref_other = _scan_folder(reference_dir, "reference folder")
    tests, test_hdr, test_other = _scan_folder(test_dir, "test folder")
    stems = sorted(set(refs) & set(tests))
    warnings: List[str] = []
    lines: List[str] = []
    only_ref = sorted(set(refs) - set(tests))
    only_test = sorted(set(tests) - set(refs))
    if only_ref:
        lines.append(
            f"{len(only_ref)} reference image(s) without a test image of the same name in "
            f"'{test_dir}': {_list_names([os.path.basename(p) for s in only_ref for p in refs[s]])}"
        )
    if only_test:
        lines.append(
            f"{len(only_test)} test image(s) without a reference image of the same name in "
            f"'{reference_dir}': {_list_names([os.path.basename(p) for s in only_test for p in tests[s]])}"
        )
    unmatched = sorted(
        [Unmatched(refs[s][0], "", f"no test image of the same name in '{test_dir}'") for s in only_ref]
        + [Unmatched("", tests[s][0], f"no reference image of the same name in '{reference_dir}'") for s in only_test],
        key=lambda u: os.path.basename(u.reference or u.test),
    )
    hdr = ref_hdr + test_hdr
    if hdr:
        warnings.append(
            f"{len(hdr)} Radiance HDR / PFM file(s) skipped (not supported; convert them to "
            f"OpenEXR .exr): {_list_names(hdr)}"
        )
    other = ref_other + test_other
    if other:
        warnings.append(
            f"{len(other)} file(s) without a supported image extension "
            f"({' '.join(FOLDER_EXTENSIONS)}) ignored: {_list_names(other)}"
        )
    if not stems:
        raise UsageError(
            f"no image in the test folder '{test_dir}' has a reference of the same name "
            f"in '{reference_dir}' (pairs are matched by file name without extension; "
            f"supported extensions: {' '.join(FOLDER_EXTENSIONS)})"
        )
    pairs: List[Pair] = []
    refused: Dict[int, str] = {}
    for index, s in enumerate(stems, 1):
        reference, test = refs[s][0], tests[s][0]
        reasons = [
            _ambiguous(paths, directory, what)
            for paths, directory, what in (
                (refs[s], reference_dir, "reference folder"),
                (tests[s], test_dir, "test folder"),
            )
            if len(paths) > 1
        ]
        if len(refs[s]) == 1 and len(tests[s]) > 1:  # the reference's kind picks the test image named
            test = next((t for t in tests[s] if kind_mismatch(reference, t) is None), test)
        elif len(tests[s]) == 1 and len(refs[s]) > 1:
            reference = next((r for r in refs[s] if kind_mismatch(r, test) is None), reference)
        mismatch = kind_mismatch(reference, test)
        if mismatch is not None and not reasons:
            reasons.append(mismatch)
        pairs.append((reference, test))
        if reasons:
            refused[index] = "; ".join(reasons)
    return Pairing(pairs, warnings, unmatched, lines, refused)


def pairs_of(args) -> Pairing:
    """The (reference, test) pairs the run compares, from the folders, --example or -r/-t; in
    folder mode also the images without a partner and warnings about the other files left out."""
    if args.reference_dir is not None:
        return _pair_folders(args.reference_dir, args.test_dir)
    if args.example:
        reference, test = example_paths()
        tests = [test]
    else:
        missing = [n for n, v in (("--reference/-r", args.reference), ("--test/-t", args.test)) if v is None]
        if missing:
            raise UsageError(
                f"the following arguments are required: {', '.join(missing)} "
                "(or use --example, or --reference-dir/--test-dir)"
            )
        reference, tests = args.reference, list(args.test)
    return Pairing([(reference, t) for t in tests], [], [], [])


def check_sizes(reference: str, test: str, sizes: Dict[str, Tuple[int, int]]) -> None:
    """Both images are readable image files of one size, from their headers (``sizes`` caches the
    sizes already read)."""
    from ..imageio import image_size

    try:
        for path in (reference, test):
            if path not in sizes:
                sizes[path] = image_size(path)
    except (FileNotFoundError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if sizes[test] != sizes[reference]:
        (tw, th), (rw, rh) = sizes[test], sizes[reference]
        raise UsageError(
            f"test image '{test}' is {tw}x{th} pixels but the reference '{reference}' is "
            f"{rw}x{rh}; they must have the same size"
        )
