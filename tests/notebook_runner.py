"""Running the app's notebook in-process, the way `python notebooks/tune_spec_k.py` does."""

from __future__ import annotations

import ast
import importlib.util
import sys
from types import ModuleType
from typing import Any

import pytest
from paths import NOTEBOOK


def load_notebook() -> ModuleType:
    """The notebook as a module; importing it runs no cell."""
    spec = importlib.util.spec_from_file_location("tune_spec_k_notebook", NOTEBOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_sections() -> ModuleType:
    """notebooks/sections.py, the module of the page's sections the notebook imports."""
    spec = importlib.util.spec_from_file_location(
        "tune_spec_k_sections", NOTEBOOK.parent / "sections.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_notebook(
    notebook: ModuleType, monkeypatch: pytest.MonkeyPatch, *argv: str, **controls: Any
) -> dict[str, Any]:
    """Run every cell with ``sys.argv`` as ``python notebooks/tune_spec_k.py ARGV`` sets it,
    with ``controls`` overriding the named UI elements; returns the defs."""
    return run_notebook_with_outputs(notebook, monkeypatch, *argv, **controls)[1]


def run_notebook_with_outputs(
    notebook: ModuleType, monkeypatch: pytest.MonkeyPatch, *argv: str, **controls: Any
) -> tuple[list[Any], dict[str, Any]]:
    """:func:`run_notebook`, with what each cell shows (its last expression), in cell order.

    marimo replaces a cell only when it is given every name the cell defines: the names a
    control shares its cell with (the controls that depend on nothing but the experiments
    share one) are taken from a run with the same arguments and no control replaced.
    """
    monkeypatch.setattr(sys, "argv", [str(NOTEBOOK), *argv])
    return run_with_controls(notebook, controls)


def run_with_controls(
    notebook: ModuleType, controls: dict[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """Every cell's output and the defs, with ``controls`` replacing the named UI elements
    (under the ``sys.argv`` the caller set)."""
    siblings = {name for cell in _cell_definitions() if cell & controls.keys() for name in cell}
    if siblings - controls.keys():
        defaults = dict(notebook.app.run()[1])
        controls = {name: defaults[name] for name in siblings} | controls
    outputs, defs = notebook.app.run(defs=controls)
    return list(outputs), dict(defs)


def _cell_definitions() -> list[set[str]]:
    """The names each cell of the notebook defines: what its function returns."""
    cells = []
    for node in ast.parse(NOTEBOOK.read_text()).body:
        if isinstance(node, ast.FunctionDef) and any(
            ast.unparse(decorator) == "app.cell" for decorator in node.decorator_list
        ):
            returned = [part for part in node.body if isinstance(part, ast.Return)]
            value = returned[-1].value if returned else None
            names = value.elts if isinstance(value, ast.Tuple) else [value] if value else []
            cells.append({name.id for name in names if isinstance(name, ast.Name)})
    return cells
