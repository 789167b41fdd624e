"""The package's layers, read from its source: the ground floor (``errors.py``, the model in
``_model/`` and ``_resumable.py``, which ``errors.py`` builds a message with) imports nothing
above it, and no module imports itself back through others at run time. An import under
``if TYPE_CHECKING:`` runs only for the type checker and is left out; one inside a function runs
when the function does, and counts."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import agent_checkpoint

PACKAGE = Path(agent_checkpoint.__file__).parent
GROUND = ("agent_checkpoint.errors", "agent_checkpoint._resumable", "agent_checkpoint._model")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of ``tree`` that run at run time: all but those under
    ``if TYPE_CHECKING:`` (its ``else:`` runs)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.orelse:
                yield from runtime_imports(ast.Module(body=[inner], type_ignores=[]))
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from runtime_imports(node)


def imported(name: str) -> set[str]:
    """The package's modules that module ``name`` imports at run time. ``from .x import y``
    imports ``x.y`` when that is a module, else ``x``; the parent packages every import runs
    first are not counted (each would close a circle through ``__init__``)."""
    path = MODULES[name]
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
        modules = {f"{base}.{alias.name}" for alias in node.names} & MODULES.keys()
        found |= modules if len(modules) == len(node.names) else modules | {base}
    return {module for module in found if module in MODULES and module != name}


GRAPH = {name: imported(name) for name in MODULES}


def on_ground(name: str) -> bool:
    return any(name == floor or name.startswith(floor + ".") for floor in GROUND)


def test_the_graph_sees_the_imports_it_should() -> None:
    # a walk that found nothing would pass everything below
    assert "agent_checkpoint._model.checkpoint" in GRAPH["agent_checkpoint._validation"] or (
        "agent_checkpoint._model" in GRAPH["agent_checkpoint._validation"]
    )
    assert "agent_checkpoint.errors" in GRAPH["agent_checkpoint._store"]
    assert "agent_checkpoint._home" in GRAPH["agent_checkpoint._shared"]  # from . import _home
    assert any(on_ground(name) for name in MODULES if name != "agent_checkpoint")


def test_the_ground_floor_imports_nothing_above_it() -> None:
    above = {
        name: sorted(target for target in GRAPH[name] if not on_ground(target))
        for name in MODULES
        if on_ground(name)
    }
    assert {name: targets for name, targets in above.items() if targets} == {}


def test_no_module_imports_itself_back_at_run_time() -> None:
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done
    path: list[str] = []

    def walk(name: str) -> None:
        state[name] = 1
        path.append(name)
        for target in sorted(GRAPH[name]):
            if state.get(target) == 1:
                circles.append([*path[path.index(target) :], target])
            elif target not in state:
                walk(target)
        path.pop()
        state[name] = 2

    for name in MODULES:
        if name not in state:
            walk(name)
    assert circles == []
