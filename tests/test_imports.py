"""Our modules import each other without cycles, and the packages in one direction only:
engine -> runner -> sandbox. A cycle hidden in a function-level import still counts."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGES = ("engine", "runner", "sandbox")


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Each module of ours and the modules of ours it imports, anywhere in its text."""
    paths = {_module(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from engine import _x` imports the module engine._x.
                targets.add(node.module)
                targets.update(f"{node.module}.{alias.name}" for alias in node.names)
        graph[name] = {t for t in targets if t in paths and t != name}
    return graph


def _package_inits() -> set[str]:
    """Every package of ours, subpackages included (``engine.log``): a module that imports
    ``from engine.log import _records`` is read by Python after that package's ``__init__``
    began, which is not a cycle."""
    return {_module(p) for package in PACKAGES for p in (ROOT / package).rglob("__init__.py")}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle between modules other than a package's ``__init__``, if any."""
    packages = _package_inits()
    inner = {m: {t for t in ts if t not in packages} for m, ts in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        stack.append(module)
        for target in sorted(inner[module]):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        stack.pop()
        state[module] = 2
        return None

    for module in sorted(inner):
        if module not in packages and module not in state and (found := visit(module)):
            return found
    return None


def test_no_import_cycles() -> None:
    """No module of ours imports itself back through others (engine._mcp <-> engine._tools
    did, through a late import)."""
    cycle = _cycle({m: ts for m, ts in import_graph().items() if m not in PACKAGES})
    assert cycle is None, " -> ".join(cycle or [])


def test_packages_import_in_one_direction() -> None:
    """runner never imports engine; sandbox imports nothing of ours but itself."""
    for module, targets in import_graph().items():
        package = module.split(".")[0]
        below = PACKAGES[PACKAGES.index(package) :]
        wrong = {t for t in targets if t.split(".")[0] not in below}
        assert not wrong, f"{module} imports {sorted(wrong)}"


def test_a_package_takes_another_s_public_names_only() -> None:
    """A module imports another package's names from that package (its ``__init__``, which
    pins them), never from its private modules: engine took the stall rule, task endings and
    address parsing from runner._conversation, runner._tasks and runner._wire."""
    for module, targets in import_graph().items():
        package = module.split(".")[0]
        private = {
            t
            for t in targets
            if t.split(".")[0] != package and any(p.startswith("_") for p in t.split(".")[1:])
        }
        assert not private, f"{module} imports {sorted(private)}"
