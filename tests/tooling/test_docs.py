"""The reference documents against the code: every long option of the command line is in
docs/cli.md, every FLIP_LOSS_* variable the product reads is in docs/environment.md's table (and
every name there is used), every public name of flip_loss is in docs/api.md, every document of
docs/ is in its index, and every relative link of README.md and docs/*.md reaches a file (and, with
an #anchor into Markdown, a heading of it); every list of tone mappers in them, and the table of
their coefficients, is the registry's (flip_loss/tone_mappers.inc)."""

import re
import unicodedata
from pathlib import Path

import pytest

import flip_loss
from flip_loss import constants
from flip_loss.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MARKDOWN = [ROOT / "README.md"] + sorted(DOCS.glob("*.md"))
ENV_NAME = re.compile(r"FLIP_LOSS_[A-Z0-9_]+")
FENCE = re.compile(r"^(`{3,}|~{3,})")


def prose_lines(path):
    """The lines of a Markdown file outside fenced code blocks."""
    fence = None
    for line in path.read_text(encoding="utf-8").splitlines():
        match = FENCE.match(line.lstrip())
        if match:
            marker = match.group(1)[0] * 3
            if fence is None:
                fence = marker
            elif marker == fence:
                fence = None
            continue
        if fence is None:
            yield line


def code_spans(path):
    return re.findall(r"`([^`\n]+)`", "\n".join(prose_lines(path)))


def github_anchor(heading):
    """GitHub's anchor for a heading: Markdown markup dropped, lower case, every character but
    letters, digits, '_', '-' and spaces removed, spaces turned into '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = text.replace("`", "").replace("*", "")
    text = unicodedata.normalize("NFC", text.strip().lower())
    text = "".join(c for c in text if c.isalnum() or c in "_- ")
    return text.replace(" ", "-")


def anchors(path):
    """Every heading's anchor in a Markdown file, with GitHub's -1, -2 ... for repeats."""
    seen, result = {}, set()
    for line in prose_lines(path):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = github_anchor(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def relative_links(path):
    """(target, anchor) of every relative Markdown link and image in ``path``'s prose."""
    text = "\n".join(prose_lines(path))
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans hold no links
    for target in re.findall(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        yield file_part, anchor


def files_under(*parts, suffixes=None):
    for part in parts:
        path = ROOT / part
        candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for p in candidates:
            if suffixes is None or p.suffix in suffixes:
                yield p


def env_names_in(paths):
    found = {}
    for path in paths:
        data = path.read_bytes()
        if b"\0" in data:  # a compiled file (flip_loss/_C*.so names the variables it reads)
            continue
        for name in ENV_NAME.findall(data.decode("utf-8", errors="replace")):
            found.setdefault(name, path.relative_to(ROOT).as_posix())
    return found


def product_files():
    """The package, the C++ sources, the build files, the scripts and the benchmarks."""
    yield from files_under("flip_loss", suffixes={".py"})
    yield from files_under("csrc", "setup.py", "CMakeLists.txt", "cmake", "scripts")
    yield from files_under("benchmarks", suffixes={".py", ".cpp", ".h", ".sh"})


def environment_table_names():
    names = set()
    for line in prose_lines(DOCS / "environment.md"):
        if line.startswith("|"):
            first_cell = line.split("|")[1]
            names.update(ENV_NAME.findall(first_cell))
    return names


def test_every_long_option_of_the_command_line_is_in_cli_md():
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    parser = build_parser()
    options = sorted({o for action in parser._actions for o in action.option_strings if o.startswith("--")})
    assert "--fail-above" in options and "--reference-dir" in options  # the parser is the one read
    missing = [o for o in options if not re.search(re.escape(o) + r"(?![\w-])", text)]
    assert not missing, f"docs/cli.md does not document these options of flip-loss: {missing}"
    commands = [name for action in parser._actions if action.dest == "command" for name in action.choices]
    assert commands, "flip-loss has no commands to look for"
    missing = [c for c in commands if f"flip-loss {c}" not in text]
    assert not missing, f"docs/cli.md does not document these commands of flip-loss: {missing}"


def test_every_flip_loss_variable_is_in_the_environment_table_and_every_one_there_is_used():
    table = environment_table_names()
    assert table, "docs/environment.md has no table of FLIP_LOSS_* names"
    used_by_product = env_names_in(product_files())
    assert "FLIP_LOSS_CUDA" in used_by_product  # the scan reaches setup.py
    missing = {name: where for name, where in sorted(used_by_product.items()) if name not in table}
    assert not missing, f"docs/environment.md's table lacks these variables (name: a file using it): {missing}"
    used = set(used_by_product) | set(
        env_names_in(p for p in files_under("tests", "examples") if p.name != Path(__file__).name)
    )
    unused = sorted(table - used)
    assert not unused, f"docs/environment.md's table names variables nothing uses: {unused}"


def test_every_public_name_of_flip_loss_is_in_api_md():
    documented = {word for span in code_spans(DOCS / "api.md") for word in re.findall(r"[A-Za-z_]\w*", span)}
    missing = [name for name in flip_loss.__all__ if name not in documented]
    assert not missing, f"docs/api.md does not document these names of flip_loss.__all__: {missing}"


def test_every_document_of_docs_is_in_its_index():
    index = {target for target, _ in relative_links(DOCS / "README.md")}
    missing = [p.name for p in DOCS.glob("*.md") if p.name != "README.md" and p.name not in index]
    assert not missing, f"docs/README.md does not list {missing}"


def test_every_relative_link_resolves():
    assert len(anchors(ROOT / "README.md")) > 10  # the heading parser reads the README's headings
    broken = []
    for path in MARKDOWN:
        for target, anchor in relative_links(path):
            where = path.relative_to(ROOT).as_posix()
            destination = (path.parent / target).resolve() if target else path
            if not destination.exists():
                broken.append(f"{where}: {target} does not exist")
            elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
                broken.append(f"{where}: {target}#{anchor} names no heading of {destination.name}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_anchor_rule_is_githubs():
    assert github_anchor("Migrating from NVIDIA's flip_loss.py") == "migrating-from-nvidias-flip_losspy"
    assert github_anchor("Quick start: C++") == "quick-start-c"
    assert github_anchor("9.4 Exact sums in `FLIPMetric`") == "94-exact-sums-in-flipmetric"
    assert github_anchor("Error maps: `ldr_flip`, `hdr_flip`") == "error-maps-ldr_flip-hdr_flip"


def test_the_exit_code_table_lists_the_codes_of_the_tool():
    from flip_loss.cli.errors import EXIT_CODES

    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    section = text[text.index("## Exit codes") :]
    section = section[: section.index("\n## ", 1)]
    documented = [int(code) for code in re.findall(r"^\| (\d+) \|", section, flags=re.M)]
    assert documented == [code for code, _ in EXIT_CODES]


def prose_units(path):
    """The paragraphs and table rows of a Markdown file's prose, each as one string."""
    paragraph = []
    for line in list(prose_lines(path)) + [""]:
        if line.lstrip().startswith("|"):
            yield line
        elif line.strip():
            paragraph.append(line)
            continue
        if paragraph:
            yield " ".join(paragraph)
            paragraph = []


def tone_mappers_named(text):
    return {span.strip('"') for span in re.findall(r"`([^`\n]+)`", text)} & set(constants.TONE_MAPPERS)


def test_every_list_of_tone_mappers_is_the_registrys():
    """A paragraph or table row of the documents that names two or more tone mappers (`aces`,
    `"aces"`) names every tone mapper of the registry, flip_loss/tone_mappers.inc."""
    incomplete = []
    for path in MARKDOWN:
        for unit in prose_units(path):
            named = tone_mappers_named(unit)
            if len(named) >= 2 and named != set(constants.TONE_MAPPERS):
                missing = sorted(set(constants.TONE_MAPPERS) - named)
                incomplete.append(f"{path.relative_to(ROOT).as_posix()}: {unit[:80]}... lacks {missing}")
    assert not incomplete, "lists of tone mappers without all of them:\n" + "\n".join(incomplete)
    assert any(len(tone_mappers_named(u)) >= 2 for u in prose_units(DOCS / "cli.md"))  # the -tm row is seen


def test_the_tone_mapper_table_is_the_registrys():
    """docs/algorithm.md §5.3's table has one row per tone mapper of the registry, each with its
    kernels' coefficients k0..k5 (the value a cell ends with, rounded as the table prints it)."""
    lines = list(prose_lines(DOCS / "algorithm.md"))
    start = lines.index("### 5.3 Tone mappers")
    section = lines[start + 1 : next(i for i in range(start + 1, len(lines)) if lines[i].startswith("#"))]
    rows = [line for line in section if line.startswith("| `")]
    assert sorted(next(iter(tone_mappers_named(r.split("|")[1]))) for r in rows) == sorted(constants.TONE_MAPPERS)
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        (name,) = tone_mappers_named(cells[0])
        printed = [float(re.split(r"=\s*", c)[-1]) for c in cells[1:]]
        assert printed == pytest.approx(constants.tone_coefficients(name), rel=1e-6, abs=0), name
