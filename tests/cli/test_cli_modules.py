"""flip_loss.cli's modules: how they import each other (no cycle)."""

import ast


from cli_runs import ROOT


# ----------------------------------------------------------------------------------------------
# flip_loss.cli's modules: how they import each other
# ----------------------------------------------------------------------------------------------

CLI_PACKAGE = ("flip_loss", "cli")
CLI_DIR = ROOT.joinpath(*CLI_PACKAGE)
CLI_MODULES = sorted(p.stem for p in CLI_DIR.glob("*.py"))


def cli_imports(module):
    """The imports of flip_loss.cli's ``module`` ("__init__" is the package) from its siblings:
    [(sibling, names imported from it, whether the import is inside a function)]."""
    tree = ast.parse((CLI_DIR / f"{module}.py").read_text(), f"{module}.py")
    found = []

    def sibling_of(parts):
        if tuple(parts[:2]) != CLI_PACKAGE:
            return None
        return parts[2] if len(parts) > 2 else "__init__"

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    sibling = sibling_of(alias.name.split("."))
                    if sibling is not None:
                        found.append((sibling, [], in_function))
            elif isinstance(child, ast.ImportFrom):
                base = list(CLI_PACKAGE[: len(CLI_PACKAGE) - child.level + 1]) if child.level else []
                parts = base + (child.module.split(".") if child.module else [])
                sibling = sibling_of(parts)
                if sibling == "__init__":  # from . import x: x a submodule, or a name of the package
                    for alias in child.names:
                        if alias.name in CLI_MODULES:
                            found.append((alias.name, [], in_function))
                        else:
                            found.append(("__init__", [alias.name], in_function))
                elif sibling is not None:
                    found.append((sibling, [alias.name for alias in child.names], in_function))
            visit(child, nested)

    visit(tree, False)
    return found


def test_cli_modules_import_each_other_without_a_cycle():
    """The import graph of flip_loss.cli's modules is acyclic, every sibling import is at a
    module's top level (none in a function, where it would hide a cycle) except the package's
    imports of the runs, which come when it runs one (parsing imports no torch; they count in the
    graph), and no module imports another one's underscore-private name."""
    graph = {}
    for module in CLI_MODULES:
        imports = cli_imports(module)
        lazy = [s for s, _, in_function in imports if in_function]
        assert lazy == [] or (module == "__init__" and set(lazy) <= {"run", "shard"}), f"{module}: lazy imports {lazy}"
        private = [(s, n) for s, names, _ in imports for n in names if n.startswith("_")]
        assert private == [], f"{module} imports private names of its siblings: {private}"
        graph[module] = {s for s, _, _ in imports if s != module}
    assert set().union(*graph.values()) <= set(CLI_MODULES)
    state = {}  # module: "visiting" or "done"

    def walk(module, path):
        if state.get(module) == "done":
            return
        assert state.get(module) != "visiting", f"import cycle: {' -> '.join(path + [module])}"
        state[module] = "visiting"
        for sibling in sorted(graph[module]):
            walk(sibling, path + [module])
        state[module] = "done"

    for module in CLI_MODULES:
        walk(module, [])
    # The choice between one process and a torchrun launch is the package's: neither run knows the other.
    assert "shard" not in graph["run"] and {"run", "shard"} <= graph["__init__"]
