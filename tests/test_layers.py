"""The package's layers (README, "Development"): each folder of lib/ imports only from the
layers below it, Altair lives only in the presentation layer, and the CLI's paths load only
what they need.

    lib/*.py      core: settings, loading, the policy, confidence, the analysis
    lib/deploy/   the result file, decisions, constraints, the formats, the verdict, tuning
                  (imports the core; inside, in the order of DEPLOY_ORDER)
    lib/loop/     plan, check, diff, export       (imports the deploy layer and the core)
    lib/present/  text, tables, charts            (imports the loop and the core)
    lib/cli/      the command line                (imports all of the above)
    lib/app/      the app's support module        (imports all of the above, not the CLI)
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO, SAMPLE_SWEEPS

LIB = REPO / "lib"
#: Layer of each folder of lib/, lowest first; the two interfaces share the top.
LAYERS = {"": 0, "deploy": 1, "loop": 2, "present": 3, "cli": 4, "app": 4}
#: Third-party packages only the named modules may import.
CONFINED = {"altair": {"lib.present.charts"}, "vl_convert": {"lib.present.charts"}}
#: Never imported by lib at all: the app's framework and the optional vLLM.
FORBIDDEN = ("marimo", "vllm")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer_of(module: str) -> str:
    """The folder below lib/ holding ``module`` ("" for the core)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYERS) else ""


def _imports(path: Path) -> list[str]:
    """Every module ``path`` imports, at the top or inside a function (a lazy import is an
    import all the same)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            found.append(node.module)
            if node.module == "lib":
                found += [f"lib.{alias.name}" for alias in node.names]
    return found


MODULES = {_module_name(path): path for path in sorted(LIB.rglob("*.py"))}


def test_every_folder_of_lib_has_a_layer() -> None:
    # A layer may hold packages of its own (lib/loop/plan/): the first folder names the layer.
    folders = {
        path.parent.relative_to(LIB).parts[0] if path.parent != LIB else ""
        for path in MODULES.values()
    }
    assert folders <= set(LAYERS), folders - set(LAYERS)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_the_layers(module: str) -> None:
    layer = _layer_of(module)
    upward = []
    for imported in _imports(MODULES[module]):
        if not imported.startswith("lib."):
            continue
        target = _layer_of(imported)
        sideways = {layer, target} == {"cli", "app"}
        if LAYERS[target] > LAYERS[layer] or sideways:
            upward.append(imported)
    assert not upward, f"{module} ({layer or 'core'}) imports {upward} from above or beside it"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_presentation_packages_stay_in_their_modules(module: str) -> None:
    for imported in _imports(MODULES[module]):
        top = imported.split(".")[0]
        assert top not in FORBIDDEN, f"{module} imports {imported}"
        allowed = CONFINED.get(top)
        assert allowed is None or any(
            module == owner or module.startswith(f"{owner}.") for owner in allowed
        ), f"{module} imports {imported}"


#: The deployment layer's modules, lowest first: each imports only those before it (a format
#: module stands for every module of lib/deploy/formats/). The order a reader follows: the
#: export's settings, the engines' facts by release, what is known of the engine, its capture
#: ceiling and rule, the result file (data, read and written), the decisions, the constraints,
#: what a format is built on, what the context formats share, the formats, a deployed context
#: schedule read back, the registry, the verdict, the tuning entry point.
DEPLOY_ORDER = (
    "settings",
    "releases",
    "engine",
    "ceiling",
    "result_file",
    "decisions",
    "constraints",
    "engine_format",
    "grid",
    "formats",
    "deployed",
    "registry",
    "verdict",
    "tuning",
    "traffic",
)


def _deploy_rank(module: str) -> int | None:
    """The place of a module of lib/deploy/ in :data:`DEPLOY_ORDER` (None: not in deploy)."""
    parts = module.split(".")
    if parts[:2] != ["lib", "deploy"] or len(parts) < 3:
        return None
    return DEPLOY_ORDER.index(parts[2])


def test_every_module_of_deploy_has_a_place_in_its_order() -> None:
    inside = {name.split(".")[2] for name in MODULES if name.startswith("lib.deploy.")}
    assert inside == set(DEPLOY_ORDER)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("lib.deploy.")))
def test_deploy_imports_only_what_comes_before_it(module: str) -> None:
    """Inside lib/deploy/, at the top, inside a function or for type checking alike (a type
    from a later module is a dependency on it all the same)."""
    rank = _deploy_rank(module)
    assert rank is not None
    later = [
        imported
        for imported in _imports(MODULES[module])
        if imported in MODULES and (_deploy_rank(imported) or -1) > rank
    ]
    assert not later, f"{module} imports {later}, after it in {DEPLOY_ORDER}"


def _import_graph() -> dict[str, set[str]]:
    return {
        module: {
            imported for imported in _imports(path) if imported in MODULES and imported != module
        }
        for module, path in MODULES.items()
    }


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_import_graph_of_lib_has_no_circle() -> None:
    """Counting every import: at the top, inside a function, under ``TYPE_CHECKING``."""
    assert _circles(_import_graph()) == []


def test_a_circle_is_caught() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_a_lower_layer_importing_a_higher_one_is_caught(tmp_path: Path) -> None:
    """The check itself: a core module that imports the presentation layer is an upward
    import by the rule above."""
    fake = tmp_path / "module.py"
    fake.write_text("from lib.present import charts\nimport lib.cli.main\n")
    targets = [_layer_of(imported) for imported in _imports(fake)]
    assert [LAYERS[target] > LAYERS[""] for target in targets] == [True, True]


_PROBE = """
import json, sys
from lib.cli.main import main
try:
    status = main(sys.argv[1:])
except SystemExit as stop:
    status = stop.code
print(json.dumps({"status": status, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _loaded(*argv: str) -> tuple[int, set[str]]:
    """(exit status, modules loaded) of ``tune-spec-k ARGV`` in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["status"], {name.split(".")[0] for name in report["modules"]} | set(
        report["modules"]
    )


def test_tuning_loads_neither_altair_nor_the_loop(tmp_path: Path) -> None:
    status, modules = _loaded(
        str(SAMPLE_SWEEPS / "sonnet-like"), "--output-json", str(tmp_path / "out.json")
    )
    assert status == 0
    for name in ("altair", "vl_convert", "marimo", "scipy", "lib.present.charts", "lib.loop"):
        assert name not in modules, name


def test_help_loads_neither_polars_nor_numpy() -> None:
    status, modules = _loaded("--help")
    assert status == 0
    for name in ("polars", "numpy", "orjson", "altair", "lib.schedule", "lib.sweeps"):
        assert name not in modules, name
