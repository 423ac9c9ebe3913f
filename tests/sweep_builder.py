"""Synthetic sweeps written in the layout of `vllm bench sweep serve`, for tests.

A sweep is a folder of combo folders ``SERVE--<serve>-BENCH--<bench>/`` holding ``run=N.json``
files and a ``summary.json`` (the list of the same records); optionally ``warmup.json`` and
``run=N.failure.json``. Records carry what the sweep adds (``run_number``, the serve and bench
params) and the fields of a ``vllm bench serve --save-result`` record the tuner reads.

Typical use::

    write_grid(tmp_path, {(1, 0): [100, 101, 99], (1, 3): [150, 151, 149]})

K can be recorded four ways (``spec``):

- ``"schedule"``: the seed's design, a fixed global ``num_speculative_tokens`` and the effective
  K as a one-range schedule ``[[1, MAX_NUM_SEQS, K]]``;
- ``"static"``: ``num_speculative_tokens`` is K itself (no schedule);
- ``"none"``: a server without speculation, no ``speculative_config`` at all (K=0 only);
- a dict: used verbatim as the ``speculative_config``.

and the ``speculative_config`` can be spelled three ways (``keys``): ``"nested"`` (a dict),
``"dotted"`` (literal keys ``"speculative_config.<field>"``, as a params file with dotted keys
leaves them) or ``"json-string"`` (the whole config as one JSON string).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from paths import BAD_INPUTS

from lib.problems import Problem
from lib.settings import DEFAULT_K_VAR
from lib.sweep_files import SweepFiles, read_sweep_files

MAX_NUM_SEQS = 256
DEFAULT_GLOBAL_K = 7
NUM_PROMPTS = 100


def speculative_config(
    k: int, spec: str | Mapping[str, Any] = "schedule", global_k: int | None = DEFAULT_GLOBAL_K
) -> dict[str, Any] | None:
    """The ``speculative_config`` a run with effective K was served with (None: no speculation).

    ``global_k=None`` leaves ``num_speculative_tokens`` out of a ``"schedule"`` config.
    """
    if isinstance(spec, Mapping):
        return dict(spec)
    if spec == "none":
        assert k == 0, "only K=0 can be a server without speculation"
        return None
    config: dict[str, Any] = {"method": "eagle3", "model": "drafter"}
    if spec == "static":
        config["num_speculative_tokens"] = k
    elif spec == "schedule":
        if global_k is not None:
            config["num_speculative_tokens"] = global_k
        config["num_speculative_tokens_per_batch_size"] = [[1, MAX_NUM_SEQS, k]]
    else:
        raise ValueError(f"unknown spec style {spec!r}")
    return config


def record(
    anchor: int | None,
    k: int,
    *,
    run_number: int = 0,
    spec: str | Mapping[str, Any] = "schedule",
    keys: str = "nested",
    global_k: int | None = DEFAULT_GLOBAL_K,
    **fields: Any,
) -> dict[str, Any]:
    """One run record at batch size ``anchor`` (``max_concurrency``) and K.

    Healthy by default (``completed == num_prompts``, ``failed == 0``) with made-up metrics;
    ``fields`` override or add any field (``output_throughput=123.0``, ``failed=2``, ...).
    A field given as ``None`` is kept as a JSON null.
    """
    result: dict[str, Any] = {
        "backend": "vllm",
        "model_id": "test/model",
        "num_prompts": NUM_PROMPTS,
        "request_rate": "inf",
        "completed": NUM_PROMPTS,
        "failed": 0,
        "duration": 10.0,
        "output_throughput": 1000.0,
        "request_goodput": None,
        "median_tpot_ms": 10.0,
        "mean_tpot_ms": 10.5,
        # Little's law: anchor requests in flight (lib/effective_batch.py), as a bench keeps.
        "request_throughput": float(anchor or 1),
        "mean_e2el_ms": 1000.0,
        "run_number": run_number,
        "max_concurrency": anchor,
    }
    if k > 0:
        result["spec_decode_acceptance_length"] = 1.0 + 0.5 * k
        result["spec_decode_per_position_acceptance_rates"] = [0.8**i for i in range(1, k + 1)]
    config = speculative_config(k, spec, global_k)
    if config is not None:
        if keys == "nested":
            result["speculative_config"] = config
        elif keys == "json-string":
            result["speculative_config"] = json.dumps(config)
        elif keys == "dotted":
            for name, value in config.items():
                result[f"speculative_config.{name}"] = value
        else:
            raise ValueError(f"unknown key style {keys!r}")
    result.update(fields)
    return result


def combo_name(anchor: int | None, k: int, spec: str | Mapping[str, Any] = "schedule") -> str:
    serve = "no-spec" if spec == "none" else f"k{k}"
    return f"SERVE--{serve}-BENCH--c{anchor}"


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def write_combo(
    folder: Path,
    records: Sequence[Mapping[str, Any]],
    *,
    summary: bool = True,
    run_files: bool = True,
    warmup: Mapping[str, Any] | None = None,
    failures: Mapping[int, Any] | None = None,
) -> Path:
    """Write one combo folder: ``run=N.json`` per record (N = its ``run_number``) and/or a
    ``summary.json`` of all of them, an optional ``warmup.json`` and ``run=N.failure.json``
    files (``failures`` maps N to the file's content)."""
    folder.mkdir(parents=True, exist_ok=True)
    if run_files:
        for position, run in enumerate(records):
            write_json(folder / f"run={run.get('run_number', position)}.json", run)
    if summary:
        write_json(folder / "summary.json", list(records))
    if warmup is not None:
        write_json(folder / "warmup.json", warmup)
    for number, content in (failures or {}).items():
        write_json(folder / f"run={number}.failure.json", content)
    return folder


def write_grid(
    root: Path,
    cells: Mapping[tuple[int, int], Iterable[float]],
    *,
    objective: str = "output_throughput",
    spec: str = "schedule",
    keys: str = "nested",
    global_k: int | None = DEFAULT_GLOBAL_K,
    summary: bool = True,
    run_files: bool = True,
    **fields: Any,
) -> Path:
    """A whole sweep: one combo per (anchor, K) with one run per objective value.

    ``spec="none"`` applies to K=0 only (K>0 cells use ``"schedule"``); ``fields`` go into
    every record. Returns ``root``.
    """
    for (anchor, k), values in cells.items():
        cell_spec = spec if k == 0 or spec != "none" else "schedule"
        records = [
            record(
                anchor,
                k,
                run_number=number,
                spec=cell_spec,
                keys=keys,
                global_k=global_k,
                **{**fields, objective: value},
            )
            for number, value in enumerate(values)
        ]
        write_combo(
            root / combo_name(anchor, k, cell_spec),
            records,
            summary=summary,
            run_files=run_files,
        )
    return root


def write_replicated_grid(
    root: Path,
    cells: Mapping[tuple[int, int], Sequence[Iterable[float]]],
    *,
    replica_var: str = "seed",
    objective: str = "output_throughput",
) -> Path:
    """A sweep with server replicas: per (anchor, K) one list of objective values per server
    start, server r in the folder ``SERVE--k<K>-<replica_var>=<r>-BENCH--c<anchor>`` (the
    names ``tune-spec-k plan --server-replicas`` gives; one serve combo per (K, r) serves
    every anchor, as in the sweep). Returns ``root``."""
    for (anchor, k), servers in cells.items():
        for replica, values in enumerate(servers):
            records = [
                record(anchor, k, run_number=number, **{objective: value})
                for number, value in enumerate(values)
            ]
            name = f"SERVE--k{k}-{replica_var}={replica}-BENCH--c{anchor}"
            write_combo(root / name, records)
    return root


def grid(
    anchors: Iterable[int], values: Mapping[int, Sequence[float]]
) -> dict[tuple[int, int], Sequence[float]]:
    """The same runs per K at every anchor: ``grid([1, 64], {0: [...], 3: [...]})``."""
    return {(anchor, k): runs for anchor in anchors for k, runs in values.items()}


#: The worked example of docs/confidence.md (3 runs per cell, maximise tok/s,
#: tie tolerance 1 %), as (anchor, K) -> runs. At batch size 1 the seed's rule picks K=2 (its
#: MAD penalty ties K=2 with K=3 and keeps the smaller) while the confident rule finds no K with
#: P(eps-good) >= 0.9 (published 0.35 / 0.65 / 0.24 for K=2/3/4) and flags K=4's 160 run; at
#: batch size 64 both rules pick K=1 (P(eps-good) 0.97).
WORKED_EXAMPLE: dict[tuple[int, int], list[float]] = {
    (1, 0): [98.0, 100.0, 101.0],
    (1, 1): [148.0, 150.0, 151.0],
    (1, 2): [181.0, 183.0, 184.0],
    (1, 3): [183.0, 186.0, 190.0],
    (1, 4): [160.0, 185.0, 200.0],
    (64, 0): [4000.0, 4040.0, 4050.0],
    (64, 1): [4330.0, 4350.0, 4360.0],
    (64, 2): [4150.0, 4330.0, 4345.0],
    (64, 3): [3900.0, 3950.0, 4000.0],
    (64, 4): [3600.0, 3700.0, 3720.0],
}


# --------------------------------------------------------------------------- validation sweeps

#: A validation sweep (``tune-spec-k plan --validate``): the schedule under test as a dynamic
#: server next to static-K servers and a server without speculation.
SCHEDULE = [[1, 63, 7], [64, 256, 0]]
DYNAMIC: dict[str, Any] = {
    "method": "eagle3",
    "model": "drafter",
    "num_speculative_tokens": 7,
    "num_speculative_tokens_per_batch_size": SCHEDULE,
}


def arm_spec(arm: str) -> tuple[str | dict[str, Any], int]:
    """(sweep_builder spec, K) of an arm name: dynamic, static-k<K>, no-spec."""
    if arm == "dynamic":
        return DYNAMIC, 0
    if arm == "no-spec":
        return "none", 0
    return "static", int(arm.removeprefix("static-k"))


def write_validation(
    root: Path,
    values: dict[tuple[int, str], list[float]],
    prompt_tokens: int | None = None,
    *,
    dynamic: Mapping[str, Any] | None = None,
    output_len: int | None = None,
) -> Path:
    """One combo per (anchor, arm), one run per value, named as `plan --validate` names them;
    with ``prompt_tokens``, every run at that swept ``random_input_len`` (its combos named
    ``-p<tokens>``), as a validation sweep over prompt lengths holds one set per length.
    ``dynamic``: the dynamic arm's ``speculative_config`` (default :data:`DYNAMIC`);
    ``output_len``: every run's measured ``total_output_tokens`` per prompt (default: none)."""
    swept: dict[str, Any] = {}
    suffix = ""
    if prompt_tokens is not None:
        swept = {"random_input_len": prompt_tokens, "total_input_tokens": prompt_tokens * 100}
        suffix = f"-p{prompt_tokens}"
    if output_len is not None:
        swept["total_output_tokens"] = output_len * NUM_PROMPTS
    for (anchor, arm), runs in values.items():
        spec, k = arm_spec(arm)
        if arm == "dynamic" and dynamic is not None:
            spec = dict(dynamic)
        records = [
            record(anchor, k, run_number=n, spec=spec, output_throughput=value, **swept)
            for n, value in enumerate(runs)
        ]
        write_combo(root / f"SERVE--{arm}-BENCH--c{anchor}{suffix}", records)
    return root


def spread(center: float, relative: float = 0.005) -> list[float]:
    """Three runs within +-relative of center."""
    return [center * (1 - relative), center, center * (1 + relative)]


#: At batch size 1 the schedule runs K=7 and at 64 it runs K=0: it is as good as every
#: alternative.
GOOD_VALIDATION = {
    (1, "dynamic"): spread(318.0),
    (1, "static-k3"): spread(298.0),
    (1, "static-k7"): spread(318.0),
    (1, "no-spec"): spread(206.0),
    (64, "dynamic"): spread(3520.0),
    (64, "static-k3"): spread(3075.0),
    (64, "static-k7"): spread(3035.0),
    (64, "no-spec"): spread(3524.0),
}


# --------------------------------------------------------------------------- context sweeps


def write_context_grid(
    root: Path,
    cells: Mapping[tuple[int, int, int], Iterable[float]],
    *,
    prompt_fields: Mapping[str, Any] | None = None,
    output_len: int = 128,
    **fields: Any,
) -> Path:
    """A sweep that varied the prompt length: one combo per (anchor, K, prompt tokens), one run
    per value of ``output_throughput``. Each record holds the swept ``random_input_len`` and the
    measured ``total_input_tokens`` / ``total_output_tokens`` of its prompts (every prompt that
    long); ``prompt_fields`` replaces ``random_input_len`` by other fields (a function of the
    prompt length may be given as a value: ``{"prefix_repetition_prefix_len": lambda p: p - 96}``).
    """
    for (anchor, k, prompt), values in cells.items():
        swept = (
            {"random_input_len": prompt}
            if prompt_fields is None
            else {
                name: value(prompt) if callable(value) else value
                for name, value in prompt_fields.items()
            }
        )
        records = [
            record(
                anchor,
                k,
                run_number=number,
                total_input_tokens=prompt * NUM_PROMPTS,
                total_output_tokens=output_len * NUM_PROMPTS,
                **{**swept, **fields, "output_throughput": value},
            )
            for number, value in enumerate(values)
        ]
        write_combo(root / f"SERVE--k{k}-BENCH--c{anchor}-p{prompt}", records)
    return root


#: A two-length context sweep, (anchor, K, prompt tokens) -> runs. Speculation (K=3) pays at
#: batch 1 at both lengths; at batch 64 it loses at 512 prompt tokens (3000 < 4000) and wins
#: at 8192 (2600 > 2000): the shape of PR #48944's table. Pooled over both lengths, batch 1 K=0
#: holds 99.5..100.5 and 79.6..80.4: median 90, MAD about 10, relative MAD 0.11 > 0.1, so the
#: seed's rules reject the pooled sweep.
CONTEXT_GRID = {
    (1, 0, 512): spread(100.0),
    (1, 3, 512): spread(180.0),
    (64, 0, 512): spread(4000.0),
    (64, 3, 512): spread(3000.0),
    (1, 0, 8192): spread(80.0),
    (1, 3, 8192): spread(150.0),
    (64, 0, 8192): spread(2000.0),
    (64, 3, 8192): spread(2600.0),
}


# --------------------------------------------------------------------------- tables of medians

#: The K of each column of a table of medians (:func:`write_table`).
TABLE_KS = (0, 1, 3, 5)

#: Median output_throughput per batch size for K = 0, 1, 3, 5: the issue's GB200 shape, K=5
#: 605 -> 228 tok/s from batch 4 to 8 (here 650, so that K=5 is the pick at 4 and the switch
#: to K=3 at 8 crosses the cliff) while the other Ks grow 1.6-1.9x.
GB200_LIKE = {
    1: (100.0, 140.0, 180.0, 200.0),
    2: (195.0, 270.0, 340.0, 370.0),
    4: (380.0, 520.0, 620.0, 650.0),
    8: (700.0, 900.0, 1000.0, 228.0),
    16: (1200.0, 1500.0, 1600.0, 400.0),
}


def write_table(root: Path, table: Mapping[int, Sequence[float]], **fields: Any) -> Path:
    """A sweep from a table of medians, batch size -> one value per K of :data:`TABLE_KS`:
    three runs per cell within +-0.5 % of it (:func:`spread`); ``fields`` as in
    :func:`write_grid`."""
    cells = {
        (batch, k): spread(value)
        for batch, values in table.items()
        for k, value in zip(TABLE_KS, values, strict=True)
    }
    return write_grid(root, cells, **fields)


# --------------------------------------------------------------------------- context validation

#: A validation sweep over two prompt lengths (512 and 8192 tokens, 128 output tokens: decode-
#: time contexts 576 and 8256, PR #48944-style boundary isqrt(576 x 8256) = 2180), per prompt
#: length (anchor, arm) -> runs of the static and plain servers. Speculation (K=3) pays at
#: batch 1 at both lengths and at batch 64 at 512 tokens (3500 > 3000); at batch 64 and 8192
#: tokens the plain server wins (2600 > 2000): the right K is 3 there except (64, 8192): 0.
CONTEXT_ARMS: dict[int, dict[tuple[int, str], list[float]]] = {
    512: {
        (1, "static-k3"): spread(300.0),
        (1, "no-spec"): spread(200.0),
        (64, "static-k3"): spread(3500.0),
        (64, "no-spec"): spread(3000.0),
    },
    8192: {
        (1, "static-k3"): spread(250.0),
        (1, "no-spec"): spread(180.0),
        (64, "static-k3"): spread(2000.0),
        (64, "no-spec"): spread(2600.0),
    },
}
#: The output length of every run of a context validation sweep.
CONTEXT_OUTPUT_LEN = 128


def write_context_validation(
    root: Path,
    arms: Mapping[int, Mapping[tuple[int, str], list[float]]],
    dynamic: Mapping[str, Any],
    dynamic_ks: Mapping[tuple[int, int], int],
) -> Path:
    """A validation sweep per prompt length (:func:`write_validation`, ``output_len``
    :data:`CONTEXT_OUTPUT_LEN`): the static and plain servers' ``arms`` per prompt length, and
    the dynamic arm served with the ``speculative_config`` ``dynamic``, measuring at each
    (anchor, prompt) what the server of the K it runs there (``dynamic_ks``, derived by the
    test) measured: ``static-k<K>``'s runs, ``no-spec``'s for K=0."""
    for prompt, values in arms.items():
        runs = dict(values)
        for (anchor, at), k in dynamic_ks.items():
            if at == prompt:
                runs[(anchor, "dynamic")] = list(
                    values[(anchor, f"static-k{k}" if k else "no-spec")]
                )
        write_validation(root, runs, prompt, dynamic=dynamic, output_len=CONTEXT_OUTPUT_LEN)
    return root


def read_sweep(folder: Path, metrics: Sequence[str] | None = None, **split: int) -> SweepFiles:
    """``read_sweep_files`` of ``folder`` with batch size ``max_concurrency`` and the default K
    field; ``split``: its ``processes``/``split_from_bytes``, to compare a split read with one
    reader's."""
    return read_sweep_files(
        folder, batch_size_var="max_concurrency", k_var=DEFAULT_K_VAR, metrics=metrics, **split
    )


def fields_shown(files: SweepFiles) -> dict[str, str]:
    """Every field of a read as its repr: order counts (dicts, problems, files) and a NaN
    equals a NaN."""
    return {field: repr(value) for field, value in vars(files).items()}


#: The healthy 2-anchor x 2-K x 3-run sweep of the bad-input corpus (null-goodput is unbroken;
#: only its goodput is null): anchor 1 picks K=3, anchor 4 picks K=0.
HEALTHY = BAD_INPUTS / "null-goodput"


def healthy_copy(tmp_path: Path) -> Path:
    """A copy of :data:`HEALTHY` in ``tmp_path``, to break."""
    experiment = tmp_path / "experiment"
    shutil.copytree(HEALTHY, experiment)
    return experiment


def by_rule(problems: Iterable[Problem]) -> dict[str, list[Problem]]:
    """The problems by their rule."""
    found: dict[str, list[Problem]] = {}
    for problem in problems:
        found.setdefault(problem.rule, []).append(problem)
    return found
