"""The modules of xsweep import each other without a cycle, and the kernels import nothing
of xsweep.

Every import counts, those inside functions too (a function-level import that dodges a
cycle is still one); only imports under ``if TYPE_CHECKING:`` do not, since they never
run. A name imported from a package that is a module of it (``from xsweep.spec import
ranges``) is an edge to that module.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO_ROOT

PACKAGES = ("xsweep", "xsweep.spec", "xsweep.plan", "xsweep.sim", "xsweep.evaluator",
            "xsweep.search", "xsweep.search.space", "xsweep.search.sweep",
            "xsweep.search.optimize", "xsweep.search.validate", "xsweep.workers", "xsweep.cli",
            "xsweep.report")
#: The folders of ``xsweep.search`` that hold one command each.
COMMANDS = ("xsweep.search.sweep", "xsweep.search.optimize", "xsweep.search.validate")


def module_files() -> dict[str, Path]:
    files = {}
    for package in PACKAGES:
        folder = REPO_ROOT.joinpath(*package.split("."))
        for path in sorted(folder.glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            files[name] = path
    return files


def _runtime_nodes(tree: ast.AST):
    """The nodes of ``tree`` but those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports."""
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    found = set()
    for node in _runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                       for alias in node.names]
        else:
            continue
        found.update(target for target in targets if target in known and target != name)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_imports_without_a_cycle():
    files = module_files()
    graph = {name: imports(name, path, set(files)) for name, path in files.items()}
    assert graph["xsweep.spec.validate"] >= {"xsweep.spec.program_size", "xsweep.spec.resolve"}
    assert "xsweep.evaluator.evaluator" in graph["xsweep.search.evaluation"] or \
        "xsweep.evaluator" in graph["xsweep.search.evaluation"]  # function-level imports count
    found = cycles(graph)
    assert not found, f"import cycles: {found}"


def test_the_commands_of_a_search_share_only_the_space_and_the_search_package():
    """A command's folder of ``xsweep.search`` imports no other command's folder, and the
    space and the shared modules import no command's: what two commands use lives in the
    space or beside it, in ``xsweep.search`` itself."""
    files = module_files()
    graph = {name: imports(name, path, set(files)) for name, path in files.items()}

    def folder(module: str) -> str | None:
        return next((c for c in COMMANDS if module == c or module.startswith(c + ".")), None)

    found = sorted((name, other) for name in graph if name.startswith("xsweep.search")
                   for other in graph[name]
                   if folder(other) is not None and folder(other) != folder(name))
    assert not found, f"imports across the commands' folders: {found}"


def test_the_kernels_import_nothing_of_xsweep():
    """``kernels/`` stays pure JAX: it can be read, tested and reused alone."""
    for path in sorted((REPO_ROOT / "kernels").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and
                     not node.level else [])
            assert not any(n == "xsweep" or n.startswith("xsweep.") for n in names), \
                f"{path.name} imports {names}"


def test_a_cycle_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
