"""The tree is linted and formatted by its own rules: ruff (pyproject.toml's [tool.ruff]) for Python,
clang-format (.clang-format) for C++ and CUDA, with the versions requirements-test.txt pins. To fix
what these tests report: `.venv/bin/ruff format . && .venv/bin/ruff check --fix .` and
`git ls-files '*.h' '*.cpp' '*.cu' '*.inc' | xargs .venv/bin/clang-format -i`. And flip_loss's
modules import each other without a cycle, and no file opens with a header of more than 20 lines."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CXX_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inc")


def tool(name):
    # The pinned tools live beside this interpreter (the project's .venv); PATH is the fallback.
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -r requirements-test.txt installs it)")
    return found


def tracked(suffixes):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    files = [n for n in names.decode().split("\0") if n.endswith(suffixes) and (ROOT / n).exists()]
    assert files, "no tracked files found"
    return files


def run(cmd):
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)


def test_python_passes_ruff_check():
    result = run([tool("ruff"), "check", "--no-cache", "--output-format", "concise", *tracked((".py",))])
    assert result.returncode == 0, result.stdout + result.stderr


def test_python_is_formatted():
    result = run([tool("ruff"), "format", "--no-cache", "--check", *tracked((".py",))])
    assert result.returncode == 0, "not formatted (run `ruff format`):\n" + result.stdout + result.stderr


def test_cxx_is_formatted():
    files = tracked(CXX_SUFFIXES)
    result = run([tool("clang-format"), "--dry-run", "--Werror", *files])
    assert result.returncode == 0, "not formatted (run `clang-format -i`):\n" + result.stderr[-4000:]


# Compiled modules of the package: imported like a sibling, with no Python source to follow.
EXTENSION_MODULES = {"flip_loss._C", "flip_loss._C_cuda"}  # compiled: they import no Python module of the package


def package_imports():
    """flip_loss's modules (dotted names; a package is its __init__) and, for each, the modules of
    the package it imports anywhere in its source, at the top level or inside a function (an import
    deferred into a function still runs, and only hides a cycle until then)."""
    import ast

    package = ROOT / "flip_loss"
    modules = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    graph = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in modules:  # `from . import options`: the module
                        edges.add(sub)
                    elif sub not in EXTENSION_MODULES and target in modules:  # a name of the module
                        edges.add(target)
            elif isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names if alias.name in modules)
        edges.discard(name)
        graph[name] = edges
    return graph


def test_package_modules_import_each_other_without_a_cycle():
    """No import cycle among flip_loss's modules, counting the imports inside functions: a cycle
    makes which module is complete when depend on which is imported first."""
    graph = package_imports()
    assert {"flip_loss.options", "flip_loss.constants", "flip_loss.cli.run"} <= set(graph)
    assert "flip_loss.constants" in graph["flip_loss.options"]
    state = {}  # module: "visiting" or "done"

    def walk(module, path):
        if state.get(module) == "done":
            return
        assert state.get(module) != "visiting", f"import cycle: {' -> '.join(path + [module])}"
        state[module] = "visiting"
        for imported in sorted(graph[module]):
            walk(imported, path + [module])
        state[module] = "done"

    for module in sorted(graph):
        walk(module, [])


# A module's header (a Python module's docstring; the comment block a C++, CUDA or shell file opens
# with) says why the file exists in a few lines; the details go beside the code they explain.
HEADER_LINES = 20


def header_lines(path: Path) -> int:
    """Lines of the header ``path`` opens with: a Python module's docstring; the comment lines a C++,
    CUDA or shell file starts with (after a shebang); 0 without one."""
    import ast

    text = path.read_text()
    if path.suffix == ".py":
        body = ast.parse(text, str(path)).body
        first = body[0] if body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            return first.end_lineno - first.lineno + 1
        return 0
    marker = "//" if path.suffix in CXX_SUFFIXES else "#"
    lines = text.splitlines()
    if lines and lines[0].startswith("#!"):
        lines = lines[1:]
    count = 0
    for line in lines:
        if not line.startswith(marker):
            break
        count += 1
    return count


def test_module_headers_are_at_most_20_lines():
    files = tracked((".py", ".sh", *CXX_SUFFIXES)) + [".ci/run"]
    long = {name: n for name in files if (n := header_lines(ROOT / name)) > HEADER_LINES}
    assert not long, f"headers over {HEADER_LINES} lines (move the details beside their code): {long}"
