"""The Store is the only door: the CLI is written against the library's public names, and no
module outside ``_store.py`` reaches into a Store's internals (maintenance and the CLI not even
into its backend). Read from the source, so a new reach-in fails here before it spreads."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import agent_checkpoint

PACKAGE = Path(agent_checkpoint.__file__).parent

PUBLIC_MODULES = (
    "agent_checkpoint",
    "agent_checkpoint.backends",
    "agent_checkpoint.transcripts",
    "agent_checkpoint.integrations.keys",
)
"""Where the CLI may import from: the package itself, and the subpackages a user imports from
too (``backends`` to write and register one, ``transcripts`` to convert a transcript,
``integrations.keys`` to tell an integration's internal records from runs: no framework)."""

STORE_INTERNALS = {"_codec", "_call", "_now"}

NOT_FOR_MAINTENANCE = {"backend", "codec", "call", "now", "_records", "_writer", "_clock"}


def _trees(paths: list[Path]) -> list[tuple[str, ast.AST]]:
    return [(str(path.relative_to(PACKAGE.parent)), ast.parse(path.read_text())) for path in paths]


def _cli_imports() -> list[tuple[str, str, str]]:
    """(file, absolute module, name) of every library name the CLI imports."""
    found = []
    for where, tree in _trees(sorted((PACKAGE / "_cli").glob("*.py"))):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [
                    (where, alias.name, "*")
                    for alias in node.names
                    if alias.name.split(".")[0] == "agent_checkpoint"
                ]
            elif isinstance(node, ast.ImportFrom) and node.level == 1:
                continue  # the CLI's own modules
            elif isinstance(node, ast.ImportFrom) and node.level >= 2:
                module = ".".join(["agent_checkpoint", *(node.module or "").split(".")]).rstrip(".")
                found += [(where, module, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "agent_checkpoint"
            ):
                found += [(where, node.module or "", alias.name) for alias in node.names]
    return found


def test_the_cli_imports_only_public_names_of_the_library() -> None:
    imports = _cli_imports()
    assert len(imports) > 20  # the walk found the CLI's imports
    for where, module, name in imports:
        assert module in PUBLIC_MODULES, f"{where} imports from {module}, which is not public"
        public = [*importlib.import_module(module).__all__, "__version__"]
        assert name in public, f"{where} imports {name} from {module}, not among its __all__"


def _reach_ins(paths: list[Path], attributes: set[str]) -> list[str]:
    """``x.attr`` for ``attr`` in ``attributes``, where ``x`` is not ``self`` (an object's own
    private attributes are its business)."""
    found = []
    for where, tree in _trees(paths):
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in attributes
                and not (isinstance(node.value, ast.Name) and node.value.id == "self")
            ):
                found.append(f"{where}:{node.lineno}: .{node.attr}")
    return found


def test_no_module_outside_the_store_uses_a_stores_internals() -> None:
    modules = [p for p in sorted(PACKAGE.rglob("*.py")) if p != PACKAGE / "_store.py"]
    assert len(modules) > 50
    assert _reach_ins(modules, STORE_INTERNALS) == []


def test_maintenance_and_the_cli_reach_the_store_only_through_its_public_methods() -> None:
    modules = [PACKAGE / "_maintenance.py", *sorted((PACKAGE / "_cli").glob("*.py"))]
    assert _reach_ins(modules, STORE_INTERNALS | NOT_FOR_MAINTENANCE) == []
