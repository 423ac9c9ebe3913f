"""Build hook: compile lib/'s bytecode when uv builds the project's editable install.

``uv sync`` installs the project editable (a ``.pth`` pointing at this folder) and compiles only
site-packages (``compile-bytecode``), so where ``PYTHONDONTWRITEBYTECODE=1`` is set nothing
ever writes lib/'s caches and every CLI process compiles lib's modules from source again
(1.2-1.3x the CPU of a run with them on the sample sweep, 1.15x on a 20,000-run one:
``bench/bench_cli.py --cold``). Compiling at the build is what
``compile-bytecode`` does for the packages, at the same step: a fresh clone's ``uv sync`` (or
``uv run``), and any after pyproject.toml changed, leaves ``lib/**/__pycache__`` in place, and
removing .venv keeps it. A module edited afterwards has a stale cache, which Python ignores (it
checks the source's time and size): that module alone is compiled again per process until the
next build. uv reuses its cached build until pyproject.toml changes (rebuilding at each edit of
lib/ would cost every next ``uv run`` ~0.5 s), so to rebuild after edits or after the caches were
deleted (``git clean -x``): ``uv sync --reinstall-package tune-spec-k``.
"""

from __future__ import annotations

import compileall
import py_compile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class CompileLibBytecode(BuildHookInterface):
    """Hatchling's ``custom`` hook (``[tool.hatch.build.targets.wheel.hooks.custom]``)."""

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version != "editable":  # a regular wheel ships sources; its installer compiles
            return
        compileall.compile_dir(
            Path(self.root) / "lib",
            quiet=1,
            # what Python itself writes: checked against the source, so edits are never missed
            invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP,
        )
