"""The seed's outputs, as the conformance tests expect them, and tune-spec-k's CLI run in-process.

The seed is vLLM PR #49163's ``vllm bench sweep tune_speculative_k`` at commit 318528f6. On
success it writes a JSON file whose keys (at every level) come in its order, and prints the
schedule as JSON on one line, one line per anchor and ``Wrote PATH`` last; on an error it
writes nothing and prints nothing on stdout (its traceback goes to stderr). tune-spec-k keeps
each of those and adds keys after the seed's and lines between the seed's per-anchor lines and
``Wrote PATH``; on an error it exits 2 with every problem on stderr as ``error [rule] ...``.

:data:`SEED_ERRORS` maps each of the seed's errors to the rules of tune-spec-k that report it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lib.cli.main import main

#: The seed's top-level keys, in its order (``run_main`` appends ``input_summary_files``).
SEED_KEYS = (
    "num_speculative_tokens_per_batch_size",
    "configured_global_num_speculative_tokens",
    "max_num_speculative_tokens_observed",
    "selection",
    "batch_decisions",
    "input_summary_files",
)
#: ``selection``: every setting, by flag name (``_metric`` for the fields), in its order.
SEED_SELECTION_KEYS = (
    "batch_size_metric",
    "k_metric",
    "objective_metric",
    "objective_direction",
    "acceptance_metric",
    "min_runs",
    "relative_tolerance",
    "uncertainty_penalty",
    "max_objective_relative_mad",
    "max_acceptance_relative_mad",
    "strict_acceptance_stability",
    "max_batch_size",
)
#: One ``batch_decisions`` entry.
SEED_DECISION_KEYS = (
    "batch_size",
    "selected_k",
    "selected_median_objective",
    "selected_conservative_objective",
    "selected_vs_best_percent",
    "selected_vs_k0_percent",
    "candidates",
)
#: One candidate: the fields of the seed's ``SpecKMeasurement`` dataclass, in their order.
SEED_CANDIDATE_KEYS = (
    "batch_size",
    "k",
    "num_runs",
    "median_objective",
    "mad_objective",
    "conservative_objective",
    "objective_relative_mad",
    "median_acceptance",
    "acceptance_relative_mad",
)

#: The seed's defaults (``SweepTuneSpeculativeKArgs.add_cli_args``), as ``selection`` holds them.
SEED_DEFAULT_SELECTION: dict[str, Any] = {
    "batch_size_metric": "max_concurrency",
    "k_metric": "speculative_config.num_speculative_tokens_per_batch_size",
    "objective_metric": "output_throughput",
    "objective_direction": "maximize",
    "acceptance_metric": None,
    "min_runs": 3,
    "relative_tolerance": 0.01,
    "uncertainty_penalty": 1.0,
    "max_objective_relative_mad": 0.1,
    "max_acceptance_relative_mad": 0.1,
    "strict_acceptance_stability": False,
    "max_batch_size": None,
}

#: Each error the seed raises (its message, shortened), the kind tests/reference_policy.py gives
#: it, and the rules of tune-spec-k that report it (exit 2, ``error [rule]`` on stderr).
SEED_ERRORS: tuple[tuple[str, str, frozenset[str]], ...] = tuple(
    (message, kind, frozenset(rules))
    for message, kind, rules in (
        ("Sweep record contains N failed request(s)", "failed requests", {"failed-requests"}),
        ("Sweep record completed C of P prompts", "incomplete requests", {"incomplete-run"}),
        (
            "Cannot find 'max_concurrency' in result keys / Expected numeric, got None",
            "missing anchor",
            {"missing-anchor", "invalid-anchor"},
        ),
        ("Expected positive integer max_concurrency", "invalid anchor", {"invalid-anchor"}),
        ("Cannot find '<k-var>' in result keys", "missing K", {"missing-k"}),
        ("Expected non-negative integer K", "invalid K", {"invalid-k", "invalid-schedule"}),
        (
            "Cannot find 'speculative_config.num_speculative_tokens'",
            "missing global K",
            {"missing-global-k"},
        ),
        (
            "Expected positive integer speculative_config.num_speculative_tokens",
            "invalid global K",
            {"invalid-global-k", "missing-global-k"},
        ),
        ("Scheduled K=k exceeds configured global K=g", "K exceeds global K", {"k-above-global"}),
        (
            "All sweep records must use the same global num_speculative_tokens; found [..]",
            "mixed global K",
            {"mixed-global-k"},
        ),
        (
            "Cannot find '<objective-var>' in result keys",
            "missing objective",
            {"missing-objective"},
        ),
        (
            # Text in every run leaves no number at all: "no run has the field as a number".
            "Expected numeric <objective-var>",
            "non-numeric objective",
            {"non-numeric-objective", "missing-objective"},
        ),
        ("Expected finite <objective-var>", "non-finite objective", {"non-finite-objective"}),
        ("Expected non-negative objective", "negative objective", {"out-of-range-objective"}),
        ("Expected positive objective", "non-positive objective", {"out-of-range-objective"}),
        (
            "Expected numeric <acceptance-var>, got None / Cannot find '<acceptance-var>'",
            "missing acceptance",
            {"missing-acceptance", "partial-acceptance"},
        ),
        (
            "Inconsistent missing <acceptance-var> values",
            "inconsistent missing acceptance",
            {"partial-acceptance"},
        ),
        (
            "Expected numeric / finite <acceptance-var>",
            "non-numeric acceptance",
            {"non-numeric-acceptance", "non-finite-acceptance"},
        ),
        ("Expected non-negative acceptance", "negative acceptance", {"negative-acceptance"}),
        ("batch_size=B, K=k has N runs; at least M are required", "too few runs", {"too-few-runs"}),
        ("Unstable objective for batch_size=B, K=k", "unstable objective", {"noisy-objective"}),
        (
            "Unstable acceptance for batch_size=B, K=k",
            "unstable acceptance",
            {"unstable-acceptance"},
        ),
        (
            "The smallest tuned batch size must be 1",
            "smallest batch size not 1",
            {"anchors-not-from-1"},
        ),
        (
            "batch_size=B has K candidates [..], expected [..]",
            "different K candidates",
            {"unequal-k-sets"},
        ),
        (
            "max_batch_size must be the largest tuned batch-size anchor",
            "max batch size not the largest anchor",
            {"max-batch-size"},
        ),
        (
            "No positive conservative objective for batch_size=B",
            "no positive conservative objective",
            {"no-positive-objective"},
        ),
        ("No benchmark measurements found", "no records", {"empty-experiment"}),
    )
)
#: The reference's kind of each seed error -> the rules of tune-spec-k that report it.
RULES_OF_KIND: dict[str, frozenset[str]] = {kind: rules for _, kind, rules in SEED_ERRORS}

_ERROR_LINE = re.compile(r"^\s*error \[([a-z0-9-]+)\]", re.MULTILINE)


@dataclass(frozen=True)
class Outcome:
    """What ``tune-spec-k ARGS`` did: exit status, stdout lines, stderr, the JSON it wrote."""

    status: int
    stdout: list[str]
    stderr: str
    output: Path
    document: dict[str, Any] | None

    @property
    def error_rules(self) -> set[str]:
        """The rules of the errors on stderr (``error [rule] ...``)."""
        return set(_ERROR_LINE.findall(self.stderr))


def run_tune(
    capsys: pytest.CaptureFixture[str], experiment: Path, output: Path, *flags: str
) -> Outcome:
    """``tune-spec-k EXPERIMENT --output-json OUTPUT FLAGS...`` in this process."""
    capsys.readouterr()
    status = main([str(experiment), "--output-json", str(output), *flags])
    captured = capsys.readouterr()
    document = json.loads(output.read_text(encoding="utf-8")) if output.is_file() else None
    return Outcome(status, captured.out.splitlines(), captured.err, output, document)


def seed_view(document: Mapping[str, Any]) -> dict[str, Any]:
    """Only the seed's keys of a result document, at every level (tune-spec-k's additions
    dropped), so that it compares equal to the seed's document."""
    view = {key: document[key] for key in SEED_KEYS if key in document}
    if "selection" in view:
        view["selection"] = {k: view["selection"][k] for k in SEED_SELECTION_KEYS}
    if "batch_decisions" in view:
        view["batch_decisions"] = [
            {
                **{k: decision[k] for k in SEED_DECISION_KEYS[:-1]},
                "candidates": [
                    {k: candidate[k] for k in SEED_CANDIDATE_KEYS}
                    for candidate in decision["candidates"]
                ],
            }
            for decision in view["batch_decisions"]
        ]
    return view


def assert_seed_key_order(document: Mapping[str, Any]) -> None:
    """Every level of ``document`` starts with the seed's keys, in the seed's order."""
    assert tuple(document)[: len(SEED_KEYS)] == SEED_KEYS
    selection = document["selection"]
    assert tuple(selection)[: len(SEED_SELECTION_KEYS)] == SEED_SELECTION_KEYS
    for decision in document["batch_decisions"]:
        assert tuple(decision)[: len(SEED_DECISION_KEYS)] == SEED_DECISION_KEYS
        for candidate in decision["candidates"]:
            assert tuple(candidate)[: len(SEED_CANDIDATE_KEYS)] == SEED_CANDIDATE_KEYS


def seed_stdout(expected: Mapping[str, Any], output: Path) -> list[str]:
    """The seed's stdout for its result document ``expected`` written to ``output``: the
    schedule as ``json.dumps`` writes it, a line per anchor (``%.2f`` for the conservative
    objective and the percent against the best, ``str`` of the percent against K=0, ``None``
    without one), ``Wrote PATH``."""
    lines = [json.dumps(expected["num_speculative_tokens_per_batch_size"])]
    for decision in expected["batch_decisions"]:
        lines.append(
            f"batch_size={decision['batch_size']}: K={decision['selected_k']}, "
            f"conservative_objective={decision['selected_conservative_objective']:.2f}, "
            f"vs_best={decision['selected_vs_best_percent']:.2f}%, "
            f"vs_k0={decision['selected_vs_k0_percent']}"
        )
    return [*lines, f"Wrote {output}"]


def assert_seed_success(outcome: Outcome, expected: Mapping[str, Any]) -> None:
    """Exit 0; the seed's lines first (tune-spec-k's own lines may follow them), ``Wrote
    PATH`` last; the file holds the seed's document (``expected``), its keys first in the
    seed's order at every level."""
    assert outcome.status == 0, outcome.stderr
    lines = seed_stdout(expected, outcome.output)
    assert outcome.stdout[: len(lines) - 1] == lines[:-1]
    assert outcome.stdout[-1] == lines[-1]
    assert outcome.document is not None
    assert_seed_key_order(outcome.document)
    assert seed_view(outcome.document) == expected


def assert_rejected_alike(outcome: Outcome, kinds: Sequence[str]) -> None:
    """Exit 2, nothing on stdout, no file written, and for each kind of error the reference
    found (tests/reference_policy.py's ``ReferenceRejected.kinds``) an error of a rule that
    stands for it (:data:`RULES_OF_KIND`)."""
    assert outcome.status == 2
    assert outcome.stdout == []
    assert not outcome.output.exists()
    unreported = [
        kind for kind in dict.fromkeys(kinds) if not RULES_OF_KIND[kind] & outcome.error_rules
    ]
    assert unreported == [], outcome.stderr


def assert_seed_error(outcome: Outcome, rules: str | Sequence[str]) -> None:
    """Exit 2, nothing on stdout, no file written, and an error of each of ``rules``."""
    wanted = {rules} if isinstance(rules, str) else set(rules)
    assert outcome.status == 2
    assert outcome.stdout == []
    assert not outcome.output.exists()
    assert wanted <= outcome.error_rules, outcome.stderr


def reference_document(reference: Mapping[str, Any], flags: Mapping[str, Any]) -> dict[str, Any]:
    """The seed's result document from tests/reference_policy.py's result and the flags."""
    selection = {
        **SEED_DEFAULT_SELECTION,
        **{
            name.replace("_var", "_metric"): value
            for name, value in flags.items()
            if name != "allow_mixed_global_k"
        },
        "max_batch_size": reference["max_batch_size"],
    }
    decisions = []
    for decision in reference["decisions"]:
        candidates = [
            {
                "batch_size": decision["batch_size"],
                "k": k,
                "num_runs": cell["num_runs"],
                "median_objective": cell["median"],
                "mad_objective": cell["mad"],
                "conservative_objective": cell["conservative"],
                "objective_relative_mad": cell["relative_mad"],
                "median_acceptance": cell["median_acceptance"],
                "acceptance_relative_mad": cell["acceptance_relative_mad"],
            }
            for k, cell in decision["candidates"].items()
        ]
        decisions.append(
            {
                "batch_size": decision["batch_size"],
                "selected_k": decision["selected_k"],
                "selected_median_objective": decision["selected_median_objective"],
                "selected_conservative_objective": decision["selected_conservative_objective"],
                "selected_vs_best_percent": decision["vs_best_percent"],
                "selected_vs_k0_percent": decision["vs_k0_percent"],
                "candidates": candidates,
            }
        )
    return {
        "num_speculative_tokens_per_batch_size": reference["schedule"],
        "configured_global_num_speculative_tokens": reference[
            "configured_global_num_speculative_tokens"
        ],
        "max_num_speculative_tokens_observed": reference["max_num_speculative_tokens_observed"],
        "selection": selection,
        "batch_decisions": decisions,
        "input_summary_files": [f for f in reference["input_files"] if f.endswith("summary.json")],
    }
