"""The bench scripts the tests check (scripts, not a package: loaded from their paths)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from paths import REPO


def load_bench_script(name: str) -> ModuleType:
    """``bench/<name>.py`` as a module named ``name``, registered in ``sys.modules`` (its
    dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
