"""Which images a ``flip-loss`` run compares: the pairs (one reference and its test images, the
bundled example, or two folders paired by file name), whether they are LDR or HDR images, and
their sizes from the headers."""

import os
from typing import Dict, List, NamedTuple, Sequence, Tuple

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
    """True when the run is HDR-FLIP: as in NVIDIA's tool an OpenEXR reference selects HDR-FLIP.
    Every pair must be of one kind (an .exr reference with .exr test images, or LDR images only);
    Radiance .hdr and .pfm files are not supported."""
    from ..imageio import UNSUPPORTED_HDR_EXTENSIONS, is_exr_path

    for path in (p for pair in pairs for p in pair):
        ext = os.path.splitext(path)[1]
        if ext.lower() in UNSUPPORTED_HDR_EXTENSIONS:
            raise UsageError(
                f"'{path}': {ext} files (Radiance HDR / PFM) are not supported; convert "
                "the image to OpenEXR (.exr), which selects HDR-FLIP"
            )
    for ref, test in pairs:
        if is_exr_path(ref) != is_exr_path(test):
            hdr_file, ldr_file = (ref, test) if is_exr_path(ref) else (test, ref)
            raise UsageError(
                f"cannot mix HDR and LDR images: '{hdr_file}' is an OpenEXR (HDR) image "
                f"but '{ldr_file}' is not; an .exr reference (HDR-FLIP) needs .exr test "
                "images, an LDR reference LDR test images"
            )
    kinds = {is_exr_path(ref) for ref, _ in pairs}
    if len(kinds) > 1:
        hdr_ref = next(ref for ref, _ in pairs if is_exr_path(ref))
        ldr_ref = next(ref for ref, _ in pairs if not is_exr_path(ref))
        raise UsageError(
            f"cannot mix HDR and LDR images in one run: '{hdr_ref}' is an OpenEXR (HDR) "
            f"image but '{ldr_ref}' is not; evaluate them in separate runs (e.g. separate "
            "folders)"
        )
    return kinds == {True}


def _scan_folder(directory: str, what: str) -> Tuple[Dict[str, str], List[str], List[str]]:
    """{stem: path} of the supported images in ``directory`` (not recursive; hidden files are
    ignored), plus the names of unsupported HDR files (.hdr, .pfm) and of other files that were
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
    found: Dict[str, str] = {}
    hdr: List[str] = []
    other: List[str] = []
    for name in entries:
        path = os.path.join(directory, name)
        if name.startswith(".") or not os.path.isfile(path):
            continue
        ext = os.path.splitext(name)[1].lower()
        if ext in FOLDER_EXTENSIONS:
            stem = os.path.splitext(name)[0]
            if stem in found:
                raise UsageError(
                    f"{what} '{directory}' has two images named '{stem}' "
                    f"({os.path.basename(found[stem])} and {name}); the pairing by "
                    "name would be ambiguous: rename or remove one"
                )
            found[stem] = path
        elif is_hdr_path(name):
            hdr.append(name)
        else:
            other.append(name)
    return found, hdr, other


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


def _pair_folders(reference_dir: str, test_dir: str) -> Pairing:
    """The pairs of images of the same name, the images without a partner, and warnings about the
    other files left out."""
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
            f"'{test_dir}': {_list_names([os.path.basename(refs[s]) for s in only_ref])}"
        )
    if only_test:
        lines.append(
            f"{len(only_test)} test image(s) without a reference image of the same name in "
            f"'{reference_dir}': {_list_names([os.path.basename(tests[s]) for s in only_test])}"
        )
    unmatched = sorted(
        [Unmatched(refs[s], "", f"no test image of the same name in '{test_dir}'") for s in only_ref]
        + [Unmatched("", tests[s], f"no reference image of the same name in '{reference_dir}'") for s in only_test],
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
    return Pairing([(refs[s], tests[s]) for s in stems], warnings, unmatched, lines)


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
    if args.output is not None and len(tests) != 1:
        raise UsageError(f"--output can only be used with one test image, got {len(tests)}")
    if args.basename is not None and len(tests) != 1:
        raise UsageError(f"--basename can only be used with one test image, got {len(tests)}")
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
