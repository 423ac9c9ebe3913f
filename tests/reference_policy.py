"""A plain, independent reference implementation of the seed's K-selection policy.

Written only from ``docs/vllm-formats.md`` (sections 1-5: the sweep layout, the record fields,
the key lookup rules and the policy of vLLM PR #49163), without looking at ``lib/``. Tests use it
to cross-check the real implementation, so it favours obviously-correct loops over speed and
uses nothing but the standard library.

``reference_tune(experiment_dir, ...)`` (or ``reference_tune_records(records_by_file, ...)`` on
records already parsed) returns::

    {
        "schedule": [[lo, hi, k], ...],
        "configured_global_num_speculative_tokens": int | None,
        "decisions": [  # one per anchor, ascending
            {
                "batch_size": b,
                "selected_k": k,
                "selected_median_objective": float,
                "selected_conservative_objective": float,
                "vs_best_percent": float,  # 100 * (selected / best - 1), best / selected minimising
                "vs_k0_percent": float | None,  # the same against K=0; None without K=0 or at 0
                "candidates": {
                    k: {"num_runs", "median", "mad", "conservative", "relative_mad",
                        "median_acceptance", "acceptance_relative_mad"},  # None: not every run
                },                                                        # has an acceptance
            },
        ],
        "max_num_speculative_tokens_observed": int,  # the largest K of any (anchor, K) group
        "max_batch_size": int,  # as given, else the largest anchor
        "input_files": [str, ...],  # the files read, relative, in pathlib.Path order
    }

or raises ``ReferenceRejected`` whose ``problems`` lists every problem found in the phase that
failed (files and records first, then groups, then anchors) and ``kinds`` the seed's error each
stands for, in the seed's words (``"unstable objective"``, ``"too few runs"``, ...).
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple

DEFAULT_K_VAR = "speculative_config.num_speculative_tokens_per_batch_size"
GLOBAL_K_VAR = "speculative_config.num_speculative_tokens"
SPECULATIVE_CONFIG_VAR = "speculative_config"
MAD_TO_SIGMA = 1.4826


class Finding(NamedTuple):
    """One problem: its ``kind`` (the seed's error it stands for, in the seed's words, e.g.
    ``"unstable objective"``) and a readable line naming the file or cell."""

    kind: str
    message: str


class ReferenceRejected(Exception):
    """The sweep cannot be tuned; ``problems`` holds one readable line per problem found and
    ``kinds`` the kind of each, in the same order."""

    def __init__(self, findings: list[Finding]) -> None:
        self.findings: list[Finding] = list(findings)
        self.problems: list[str] = [finding.message for finding in self.findings]
        self.kinds: list[str] = [finding.kind for finding in self.findings]
        super().__init__("\n".join(self.problems))


# --------------------------------------------------------------------------------------------
# Reading the experiment folder
# --------------------------------------------------------------------------------------------


def _is_run_file(name: str) -> bool:
    """``run=N.json`` with N a non-negative integer (not a failure file, not warmup.json)."""
    if not (name.startswith("run=") and name.endswith(".json")):
        return False
    number = name[len("run=") : -len(".json")]
    return number.isdigit()


def _is_failure_file(name: str) -> bool:
    """``run=N.failure.json``: a run that failed under ``--continue-on-error``."""
    if not (name.startswith("run=") and name.endswith(".failure.json")):
        return False
    number = name[len("run=") : -len(".failure.json")]
    return number.isdigit()


def _run_number_of(name: str) -> int:
    return int(name[len("run=") : -len(".json")])


def _load_json(path: Path, problems: list[Finding], label: str) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as error:
        problems.append(Finding("unreadable file", f"{label}: cannot read JSON ({error})"))
        return None


def _collect_records(root: Path) -> tuple[list[tuple[str, dict[str, Any]]], list[Finding]]:
    """Every record of the experiment as (label, record), plus the problems found on the way.

    A folder with a ``summary.json`` contributes that file's list; a folder without one
    contributes its ``run=N.json`` files. ``warmup.json`` is never read; any
    ``run=N.failure.json`` is a failed run and therefore a problem.
    """
    records: list[tuple[str, dict[str, Any]]] = []
    problems: list[Finding] = []
    for folder, subfolders, files in os.walk(root):
        subfolders.sort()
        folder_path = Path(folder)
        names = sorted(files)

        for name in names:
            if _is_failure_file(name):
                label = (folder_path / name).relative_to(root).as_posix()
                problems.append(
                    Finding(
                        "failure file",
                        f"{label}: a failed run (failure file); the sweep is not healthy",
                    )
                )

        if "summary.json" in names:
            label = (folder_path / "summary.json").relative_to(root).as_posix()
            content = _load_json(folder_path / "summary.json", problems, label)
            if content is None:
                continue
            if not isinstance(content, list):
                problems.append(
                    Finding("summary not a list", f"{label}: expected a JSON list of run records")
                )
                continue
            for index, record in enumerate(content):
                record_label = f"{label}[{index}]"
                if isinstance(record, dict):
                    records.append((record_label, record))
                else:
                    problems.append(
                        Finding(
                            "record not an object",
                            f"{record_label}: a run record must be a JSON object",
                        )
                    )
            continue

        run_names = [name for name in names if _is_run_file(name)]
        run_names.sort(key=_run_number_of)
        for name in run_names:
            label = (folder_path / name).relative_to(root).as_posix()
            record = _load_json(folder_path / name, problems, label)
            if record is None:
                continue
            if isinstance(record, dict):
                records.append((label, record))
            else:
                problems.append(
                    Finding("record not an object", f"{label}: a run record must be a JSON object")
                )
    return records, problems


# --------------------------------------------------------------------------------------------
# Key lookup
# --------------------------------------------------------------------------------------------


def _maybe_parse_json(value: Any) -> Any:
    """A string that parses as JSON becomes the parsed value; anything else is unchanged."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def lookup(record: dict[str, Any], key: str, *, parse_value: bool = True) -> tuple[bool, Any]:
    """Return (found, value) for ``key`` in ``record``.

    The literal key first; then a dotted path through nested dicts, trying the part as written
    and its all-'_' and all-'-' spellings. A string met at any step is parsed as JSON when it
    parses (so a JSON-encoded ``speculative_config`` can be walked into); the value found is
    parsed too unless ``parse_value`` is false (a measured metric written as a string is not a
    measurement, only parameters such as K and the anchor may be JSON strings).
    """
    parse = _maybe_parse_json if parse_value else _unchanged
    if key in record:
        return True, parse(record[key])
    current: Any = record
    for part in key.split("."):
        current = _maybe_parse_json(current)
        if not isinstance(current, dict):
            return False, None
        spellings = [part, part.replace("-", "_"), part.replace("_", "-")]
        for spelling in spellings:
            if spelling in current:
                current = current[spelling]
                break
        else:
            return False, None
    return True, parse(current)


def _unchanged(value: Any) -> Any:
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_measurement(value: Any) -> Any:
    """A measured value as the seed reads it with ``float()``: a JSON string of a finite number
    (``"110.0"``) is that number. Booleans stay booleans: the one place where tune-spec-k is
    stricter than ``float(True) == 1.0`` (README, "Where tune-spec-k differs from the seed")."""
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value
        return number if math.isfinite(number) else value
    return value


def _as_int(value: Any) -> int | None:
    """An int, or a float with an integral value, as int; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def _has_speculative_config(record: dict[str, Any]) -> bool:
    """False for a server without speculation (no ``speculative_config``, or a null one).

    Literal dotted keys such as ``"speculative_config.num_speculative_tokens"`` (a params file
    with dotted keys, section 1) are a speculative_config too.
    """
    found, value = lookup(record, SPECULATIVE_CONFIG_VAR)
    dotted = any(key.replace("-", "_").startswith(SPECULATIVE_CONFIG_VAR + ".") for key in record)
    return (found and value is not None) or dotted


def _k_from_value(value: Any, anchor: int) -> tuple[int | None, str | None]:
    """(K, None) from a static K or a ``[[lo, hi, k], ...]`` schedule, else (None, problem)."""
    static = _as_int(value)
    if static is not None:
        if static < 0:
            return None, f"K must be >= 0, got {value!r}"
        return static, None
    if isinstance(value, list) and value:
        ranges: list[tuple[int, int, int]] = []
        for entry in value:
            if not isinstance(entry, list) or len(entry) != 3:
                return None, f"schedule entry {entry!r} is not a [lo, hi, k] triple"
            lo, hi, k = (_as_int(item) for item in entry)
            if lo is None or hi is None or k is None:
                return None, f"schedule entry {entry!r} must hold three integers"
            if k < 0:
                return None, f"schedule entry {entry!r} has a negative K"
            ranges.append((lo, hi, k))
        ranges.sort()
        chosen: int | None = None
        for lo, _hi, k in ranges:
            if lo <= anchor:
                chosen = k
        if chosen is None:
            return None, f"schedule {value!r} has no range starting at or below {anchor}"
        return chosen, None
    return None, f"K value {value!r} is neither a number nor a [[lo, hi, k], ...] schedule"


# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------


def _median_mad_relative(values: list[float]) -> tuple[float, float, float]:
    """median, MAD = median(|x - median|) (unscaled), and MAD / |median|.

    With a zero median the relative MAD is 0 when the MAD is 0, else infinity.
    """
    median = float(statistics.median(values))
    mad = float(statistics.median([abs(value - median) for value in values]))
    if median != 0:
        return median, mad, mad / abs(median)
    if mad == 0:
        return median, mad, 0.0
    return median, mad, math.inf


def _ratio_to_best(value: float, best: float, maximize: bool) -> float:
    """How close a conservative objective is to the best one: 1.0 means as good.

    Maximising: value / best (with best == 0 every value is 0, and 0 counts as a tie).
    Minimising: best / value (value > 0 because every objective is > 0 then).
    """
    if not maximize:
        return best / value
    if best == 0:
        return 1.0 if value == 0 else 0.0
    return value / best


# --------------------------------------------------------------------------------------------
# The policy
# --------------------------------------------------------------------------------------------


def _check_settings(
    objective_direction: str,
    min_runs: int,
    uncertainty_penalty: float,
    max_objective_relative_mad: float,
    max_acceptance_relative_mad: float,
    relative_tolerance: float,
) -> None:
    problems: list[Finding] = []
    if objective_direction not in ("maximize", "minimize"):
        problems.append(
            Finding(
                "invalid setting",
                "objective_direction must be 'maximize' or 'minimize', "
                f"got {objective_direction!r}",
            )
        )
    if _as_int(min_runs) is None or min_runs < 1:
        problems.append(
            Finding("invalid setting", f"min_runs must be an integer >= 1, got {min_runs!r}")
        )
    if not (_is_number(uncertainty_penalty) and 0 <= uncertainty_penalty < math.inf):
        problems.append(
            Finding(
                "invalid setting",
                f"uncertainty_penalty must be finite and >= 0, got {uncertainty_penalty!r}",
            )
        )
    if not (_is_number(max_objective_relative_mad) and max_objective_relative_mad >= 0):
        problems.append(
            Finding(
                "invalid setting",
                f"max_objective_relative_mad must be >= 0, got {max_objective_relative_mad!r}",
            )
        )
    if not (_is_number(max_acceptance_relative_mad) and max_acceptance_relative_mad >= 0):
        problems.append(
            Finding(
                "invalid setting",
                f"max_acceptance_relative_mad must be >= 0, got {max_acceptance_relative_mad!r}",
            )
        )
    if not (_is_number(relative_tolerance) and 0 <= relative_tolerance < 1):
        problems.append(
            Finding(
                "invalid setting",
                f"relative_tolerance must be in [0, 1), got {relative_tolerance!r}",
            )
        )
    if problems:
        raise ReferenceRejected(problems)


def reference_tune(experiment_dir: str | Path, **flags: Any) -> dict[str, Any]:
    """Pick the schedule the seed's policy picks for the sweep in ``experiment_dir``; ``flags``
    are the seed's settings by name (see :func:`_policy` for the names and defaults)."""
    return _policy(lambda: _read_experiment(Path(experiment_dir)), **flags)


def reference_tune_records(records_by_file: dict[str, list[Any]], **flags: Any) -> dict[str, Any]:
    """The same policy on records parsed beforehand: file label -> the records it holds (a
    summary.json's list). Lets bench/ time the policy without the file reading."""
    return _policy(lambda: _label_records(records_by_file), **flags)


def _read_experiment(root: Path) -> tuple[list[tuple[str, dict[str, Any]]], list[Finding]]:
    if not root.is_dir():
        raise ReferenceRejected([Finding("no records", f"{root}: not a directory")])
    records, problems = _collect_records(root)
    if not records and not problems:
        problems.append(Finding("no records", f"{root}: no summary.json or run=N.json files found"))
    return records, problems


def _label_records(
    records_by_file: dict[str, list[Any]],
) -> tuple[list[tuple[str, dict[str, Any]]], list[Finding]]:
    records: list[tuple[str, dict[str, Any]]] = []
    problems: list[Finding] = []
    for file, content in records_by_file.items():
        for index, record in enumerate(content):
            label = f"{file}[{index}]"
            if isinstance(record, dict):
                records.append((label, record))
            else:
                problems.append(
                    Finding("record not an object", f"{label}: a run record must be a JSON object")
                )
    if not records and not problems:
        problems.append(Finding("no records", "no run records given"))
    return records, problems


def _policy(
    read: Callable[[], tuple[list[tuple[str, dict[str, Any]]], list[Finding]]],
    *,
    batch_size_var: str = "max_concurrency",
    k_var: str = DEFAULT_K_VAR,
    objective_var: str = "output_throughput",
    objective_direction: str = "maximize",
    acceptance_var: str | None = None,
    min_runs: int = 3,
    uncertainty_penalty: float = 1.0,
    max_objective_relative_mad: float = 0.1,
    max_acceptance_relative_mad: float = 0.1,
    strict_acceptance_stability: bool = False,
    relative_tolerance: float = 0.01,
    max_batch_size: int | None = None,
    allow_mixed_global_k: bool = False,
) -> dict[str, Any]:
    """The policy on the records ``read`` returns (with the problems met reading them)."""
    _check_settings(
        objective_direction,
        min_runs,
        uncertainty_penalty,
        max_objective_relative_mad,
        max_acceptance_relative_mad,
        relative_tolerance,
    )
    maximize = objective_direction == "maximize"

    # Phase 1: files and records ------------------------------------------------------------
    records, problems = read()

    # (anchor, K) -> list of (objective, acceptance or None)
    groups: dict[tuple[int, int], list[tuple[float, float | None]]] = {}
    global_values: set[int] = set()
    for label, record in records:
        record_problems: list[Finding] = []

        # Health.
        failed = record.get("failed", 0)
        if _is_number(failed) and failed > 0:
            record_problems.append(
                Finding("failed requests", f"{label}: unhealthy run, failed={failed!r}")
            )
        completed = record.get("completed")
        num_prompts = record.get("num_prompts")
        if completed is not None and num_prompts is not None and completed != num_prompts:
            record_problems.append(
                Finding(
                    "incomplete requests",
                    f"{label}: unhealthy run, completed={completed!r} "
                    f"!= num_prompts={num_prompts!r}",
                )
            )

        # Anchor.
        found, anchor_value = lookup(record, batch_size_var)
        anchor: int | None = None
        if not found or anchor_value is None:
            record_problems.append(
                Finding(
                    "missing anchor", f"{label}: no batch-size anchor ({batch_size_var} is null)"
                )
            )
        else:
            anchor = _as_int(anchor_value)
            if anchor is None:
                record_problems.append(
                    Finding(
                        "invalid anchor",
                        f"{label}: anchor {batch_size_var}={anchor_value!r} is not an integer",
                    )
                )

        # K.
        speculative = _has_speculative_config(record)
        k: int | None = None
        found, k_value = lookup(record, k_var)
        if found and k_value is not None:
            if anchor is not None:
                k, k_problem = _k_from_value(k_value, anchor)
                if k_problem is not None:
                    record_problems.append(Finding("invalid K", f"{label}: {k_var}: {k_problem}"))
        elif not speculative:
            k = 0  # a server without speculation
        else:
            record_problems.append(Finding("missing K", f"{label}: {k_var} is missing"))

        # Global K (servers without speculation are exempt), with the default k-var only: with
        # another (a static-K sweep reads num_speculative_tokens itself) the seed checks none.
        if speculative and k_var == DEFAULT_K_VAR:
            found, global_value = lookup(record, GLOBAL_K_VAR)
            if found and global_value is not None:
                global_k = _as_int(global_value)
                if global_k is None:
                    record_problems.append(
                        Finding(
                            "invalid global K",
                            f"{label}: {GLOBAL_K_VAR}={global_value!r} is not an integer",
                        )
                    )
                else:
                    global_values.add(global_k)
                    if k is not None and k > global_k:
                        record_problems.append(
                            Finding(
                                "K exceeds global K",
                                f"{label}: K={k} is above {GLOBAL_K_VAR}={global_k}",
                            )
                        )
            else:
                record_problems.append(
                    Finding(
                        "missing global K",
                        f"{label}: {GLOBAL_K_VAR} is missing (required with the default k-var)",
                    )
                )

        # Objective.
        found, objective_value = lookup(record, objective_var, parse_value=False)
        objective_value = _as_measurement(objective_value)
        objective: float | None = None
        if not found or objective_value is None:
            record_problems.append(
                Finding("missing objective", f"{label}: objective {objective_var} is missing")
            )
        elif not _is_number(objective_value):
            record_problems.append(
                Finding(
                    "non-numeric objective",
                    f"{label}: objective {objective_var}={objective_value!r} is not a number",
                )
            )
        elif not math.isfinite(objective_value):
            record_problems.append(
                Finding(
                    "non-finite objective",
                    f"{label}: objective {objective_var}={objective_value!r} is not finite",
                )
            )
        elif maximize and objective_value < 0:
            record_problems.append(
                Finding(
                    "negative objective",
                    f"{label}: objective {objective_var}={objective_value!r} must be >= 0",
                )
            )
        elif not maximize and objective_value <= 0:
            record_problems.append(
                Finding(
                    "non-positive objective",
                    f"{label}: objective {objective_var}={objective_value!r} must be > 0 "
                    "when minimising",
                )
            )
        else:
            objective = float(objective_value)

        # Acceptance (optional; absent or null means the run has none).
        acceptance: float | None = None
        if acceptance_var is not None:
            found, acceptance_value = lookup(record, acceptance_var, parse_value=False)
            acceptance_value = _as_measurement(acceptance_value)
            if found and acceptance_value is not None:
                if _is_number(acceptance_value) and not math.isfinite(acceptance_value):
                    record_problems.append(
                        Finding(
                            "non-numeric acceptance",
                            f"{label}: acceptance {acceptance_var}={acceptance_value!r} "
                            "is not a finite number",
                        )
                    )
                elif _is_number(acceptance_value) and acceptance_value < 0:
                    record_problems.append(
                        Finding(
                            "negative acceptance",
                            f"{label}: acceptance {acceptance_var}={acceptance_value!r} "
                            "is negative",
                        )
                    )
                elif _is_number(acceptance_value):
                    acceptance = float(acceptance_value)
                else:
                    record_problems.append(
                        Finding(
                            "non-numeric acceptance",
                            f"{label}: acceptance {acceptance_var}={acceptance_value!r} "
                            "is not a finite number",
                        )
                    )

        if record_problems:
            problems.extend(record_problems)
            continue
        assert anchor is not None and k is not None and objective is not None
        groups.setdefault((anchor, k), []).append((objective, acceptance))

    configured_global: int | None = None
    if len(global_values) > 1 and not allow_mixed_global_k:
        problems.append(
            Finding(
                "mixed global K",
                f"{GLOBAL_K_VAR} differs between records ({sorted(global_values)}); the seed keeps "
                "it fixed and varies K through num_speculative_tokens_per_batch_size",
            )
        )
    elif global_values:
        configured_global = max(global_values)

    if problems:
        raise ReferenceRejected(problems)

    # Phase 2: per (anchor, K) statistics ------------------------------------------------------
    candidates_by_anchor: dict[int, dict[int, dict[str, Any]]] = {}
    for anchor, k in sorted(groups):
        runs = groups[(anchor, k)]
        where = f"batch size {anchor}, K={k}"
        if len(runs) < min_runs:
            problems.append(
                Finding("too few runs", f"{where}: {len(runs)} run(s), need at least {min_runs}")
            )
            continue
        objectives = [objective for objective, _ in runs]
        median, mad, relative_mad = _median_mad_relative(objectives)
        if relative_mad > max_objective_relative_mad:
            problems.append(
                Finding(
                    "unstable objective",
                    f"{where}: objective relative MAD {relative_mad:.4g} is above "
                    f"{max_objective_relative_mad}",
                )
            )
        spread = uncertainty_penalty * MAD_TO_SIGMA * mad
        conservative = max(median - spread, 0.0) if maximize else median + spread

        # Acceptance statistics exist only where every run of the group has a value.
        median_acceptance: float | None = None
        acceptance_relative_mad: float | None = None
        if acceptance_var is not None:
            acceptances = [value for _, value in runs if value is not None]
            if not acceptances:
                if k > 0:
                    problems.append(
                        Finding("missing acceptance", f"{where}: no run has {acceptance_var}")
                    )
            elif len(acceptances) < len(runs):
                problems.append(
                    Finding(
                        "inconsistent missing acceptance",
                        f"{where}: only {len(acceptances)} of {len(runs)} runs have "
                        f"{acceptance_var}",
                    )
                )
            else:
                median_acceptance, _, acceptance_relative_mad = _median_mad_relative(acceptances)
                if strict_acceptance_stability and (
                    acceptance_relative_mad > max_acceptance_relative_mad
                ):
                    problems.append(
                        Finding(
                            "unstable acceptance",
                            f"{where}: acceptance relative MAD {acceptance_relative_mad:.4g} is "
                            f"above {max_acceptance_relative_mad}",
                        )
                    )

        candidates_by_anchor.setdefault(anchor, {})[k] = {
            "num_runs": len(runs),
            "median": median,
            "mad": mad,
            "conservative": conservative,
            "relative_mad": relative_mad,
            "median_acceptance": median_acceptance,
            "acceptance_relative_mad": acceptance_relative_mad,
        }
    if problems:
        raise ReferenceRejected(problems)

    # Phase 3: anchors ------------------------------------------------------------------------
    anchors = sorted(candidates_by_anchor)
    if anchors[0] != 1:
        problems.append(
            Finding(
                "smallest batch size not 1",
                f"the smallest batch-size anchor must be 1, got {anchors[0]}",
            )
        )
    first_ks = sorted(candidates_by_anchor[anchors[0]])
    for anchor in anchors[1:]:
        ks = sorted(candidates_by_anchor[anchor])
        if ks != first_ks:
            problems.append(
                Finding(
                    "different K candidates",
                    f"batch size {anchor} has K {ks}, but batch size {anchors[0]} has K "
                    f"{first_ks}; every anchor needs the same set of K",
                )
            )
    largest = anchors[-1]
    if max_batch_size is None:
        max_batch_size = largest
    elif max_batch_size != largest:
        problems.append(
            Finding(
                "max batch size not the largest anchor",
                f"max_batch_size must equal the largest anchor {largest}, got {max_batch_size}",
            )
        )
    if problems:
        raise ReferenceRejected(problems)

    # Phase 4: choose K per anchor ------------------------------------------------------------
    decisions: list[dict[str, Any]] = []
    for anchor in anchors:
        candidates = candidates_by_anchor[anchor]
        conservatives = {k: candidates[k]["conservative"] for k in candidates}
        best = max(conservatives.values()) if maximize else min(conservatives.values())
        if maximize and best <= 0:
            problems.append(
                Finding(
                    "no positive conservative objective",
                    f"batch size {anchor}: no positive conservative objective",
                )
            )
            continue
        tied: list[int] = []
        for k in sorted(conservatives):
            if _ratio_to_best(conservatives[k], best, maximize) >= 1 - relative_tolerance:
                tied.append(k)
        selected = min(tied)
        chosen = conservatives[selected]
        decisions.append(
            {
                "batch_size": anchor,
                "selected_k": selected,
                "selected_median_objective": candidates[selected]["median"],
                "selected_conservative_objective": chosen,
                "vs_best_percent": _percent_better(chosen, best, maximize),
                "vs_k0_percent": (
                    None
                    if conservatives.get(0, 0.0) == 0
                    else _percent_better(chosen, conservatives[0], maximize)
                ),
                "candidates": {k: candidates[k] for k in sorted(candidates)},
            }
        )

    if problems:
        raise ReferenceRejected(problems)

    # Phase 5: the schedule -------------------------------------------------------------------
    schedule: list[list[int]] = []
    for index, decision in enumerate(decisions):
        lo = decision["batch_size"]
        hi = anchors[index + 1] - 1 if index + 1 < len(anchors) else max_batch_size
        k = decision["selected_k"]
        if schedule and schedule[-1][2] == k:
            schedule[-1][1] = hi
        else:
            schedule.append([lo, hi, k])

    return {
        "schedule": schedule,
        "configured_global_num_speculative_tokens": configured_global,
        "max_num_speculative_tokens_observed": max(k for _, k in groups),
        "max_batch_size": max_batch_size,
        "decisions": decisions,
        "input_files": _input_files(label for label, _ in records),
    }


def _percent_better(value: float, other: float, maximize: bool) -> float:
    """How much better ``value`` is than ``other`` in percent, in the objective's direction:
    ``100 * (value / other - 1)`` maximising, ``100 * (other / value - 1)`` minimising (so a
    positive percent is better either way). ``other`` (maximising) or ``value`` (minimising)
    must not be 0."""
    ratio = value / other if maximize else other / value
    return 100.0 * (ratio - 1.0)


def _input_files(labels: Iterable[str]) -> list[str]:
    """The files the records came from (a label without its ``[index]``), each once, in the
    seed's order: it sorts ``pathlib.Path`` objects, which compare part by part, so
    ``A/summary.json`` comes before ``A-2/summary.json`` (as text ``-`` sorts before ``/``)."""
    files = {re.sub(r"\[\d+\]$", "", label) for label in labels}
    return sorted(files, key=lambda file: PurePosixPath(file).parts)
