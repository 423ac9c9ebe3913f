"""Differential test: on generated sweeps, tune-spec-k's CLI does what the seed's policy does.

Hypothesis writes sweeps in the layout of `vllm bench sweep serve` (random batch sizes, K sets,
run counts, levels and noise; maximised throughput or minimised TPOT; with or without
``--acceptance-var`` and ``--strict-acceptance-stability``), one class of case per test
parameter:

- valid sweeps, and valid sweeps with a twist the seed handles in its own way: objectives and
  acceptances written as numeric text (``"110.0"``: the seed's ``float()`` reads it), a
  static-K sweep read with ``--k-var speculative_config.num_speculative_tokens`` (no global
  check, a null global), combo folders under sibling folders ``A`` and ``A-2``
  (``input_summary_files`` in ``pathlib.Path`` order, where ``A/`` comes first),
  ``--output-json`` into folders that do not exist (the seed makes them);
- near-valid sweeps, each broken in one way the seed refuses: a cell with too few runs, a noisy
  cell, every K scoring 0 at an anchor, a negative acceptance, an acceptance that is text
  (``"n/a"``, at any K), an unstable acceptance (strict).

tests/reference_policy.py (an independent plain-Python reading of the seed's policy) gives the
expected outcome. Both must succeed or both fail; on success tune-spec-k's stdout starts with
the seed's lines recomputed from the reference's numbers and ends with ``Wrote PATH``, and its
JSON holds the seed's keys in the seed's order with every value equal to the reference's: the
configured global, the schedule, each candidate's runs, median, MAD, conservative objective,
relative MAD and acceptance statistics, the selected K and both percents. Equality is exact:
both compute each value with the same operations in the same order (the median of the same
floats, ``median - penalty * 1.4826 * MAD``, ``100 * (a / b - 1)``). On failure tune-spec-k
exits 2, prints nothing on stdout, writes nothing, and reports a rule standing for each of the
reference's errors (tests/seed_outputs.py's ``SEED_ERRORS``) and no error that none stands
for, but for the follow-ons :data:`FOLLOW_ON` (where the seed stops at its first error,
tune-spec-k goes on, and says what the cause left behind).

The examples are derandomised (the same ones every run, so CI is deterministic) and few per
class, so the module runs in seconds.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_policy import GLOBAL_K_VAR, ReferenceRejected, reference_tune
from seed_outputs import (
    RULES_OF_KIND,
    Outcome,
    assert_rejected_alike,
    assert_seed_success,
    reference_document,
    run_tune,
)
from sweep_builder import combo_name, record, write_combo

ACCEPTANCE = "spec_decode_acceptance_length"
#: Errors tune-spec-k reports beside the cause, true of the sweep once it is: an anchor left with
#: no cell to choose from, a cell left with no usable run (every run excluded for the cause).
FOLLOW_ON = re.compile(
    r"^\s*error \[(undecided-anchor\]|too-few-runs\].*\(field 'num_runs'; value 0;)",
    re.MULTILINE,
)

#: Classes whose sweeps the seed tunes, and classes broken in one way it refuses.
VALID = ("valid", "numeric-text", "static-k", "sibling-folders", "new-output-folder")
BROKEN = (
    "too-few-runs",
    "noisy",
    "all-zero",
    "negative-acceptance",
    "text-acceptance",
    "unstable-acceptance",
)


@dataclass(frozen=True)
class Case:
    """A generated sweep: (batch size, K) -> objective values and acceptances (None: no
    field), with the flags to tune it, by the reference's names."""

    kind: str
    cells: dict[tuple[int, int], list[tuple[Any, Any]]]
    flags: dict[str, Any]

    @property
    def objective(self) -> str:
        return str(self.flags.get("objective_var", "output_throughput"))

    def cli_flags(self) -> list[str]:
        """The flags as the command line spells them (the seed's)."""
        words = []
        for name, value in self.flags.items():
            flag = "--" + name.replace("_", "-")
            if value is True:
                words.append(flag)
            elif value is not False:
                words += [flag, str(value)]
        return words


def _folder(case: Case, anchor: int, k: int) -> str:
    """Where a cell's combo folder goes: for one class, by turns in sibling folders ``A`` and
    ``A-2`` (as text ``A-2/...`` sorts first, as a ``Path`` ``A/...`` does)."""
    name = combo_name(anchor, k)
    if case.kind == "sibling-folders":
        place = sorted(case.cells).index((anchor, k))
        return f"{'A' if place % 2 == 0 else 'A-2'}/{name}"
    return name


def write_case(root: Path, case: Case) -> None:
    """Each cell as a combo folder of ``run=N.json`` files and a ``summary.json``."""
    spec = "static" if case.kind == "static-k" else "schedule"
    for (anchor, k), runs in case.cells.items():
        records = []
        for number, (objective, acceptance) in enumerate(runs):
            run = record(anchor, k, run_number=number, spec=spec, **{case.objective: objective})
            run.pop(ACCEPTANCE, None)
            if acceptance is not None:
                run[ACCEPTANCE] = acceptance
            records.append(run)
        write_combo(root / _folder(case, anchor, k), records)


@st.composite
def cases(draw: st.DrawFn, kind: str) -> Case:
    """A sweep of class ``kind`` (:data:`VALID` or :data:`BROKEN`)."""
    anchors = [1, *sorted(draw(st.sets(st.sampled_from([2, 8, 32, 64, 256]), max_size=2)))]
    ks = sorted(
        draw(st.sets(st.integers(0, 7), min_size=2 if kind == "sibling-folders" else 1, max_size=3))
    )
    maximize = kind == "all-zero" or draw(st.booleans())
    flags: dict[str, Any] = {}
    if not maximize:
        flags["objective_var"] = "median_tpot_ms"
        flags["objective_direction"] = "minimize"
    if kind.endswith("-acceptance") or draw(st.booleans()):
        flags["acceptance_var"] = ACCEPTANCE
    if kind == "unstable-acceptance" or draw(st.booleans()):
        flags["strict_acceptance_stability"] = True
    if kind == "static-k":
        flags["k_var"] = GLOBAL_K_VAR
    flags.update(
        draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "relative_tolerance": st.sampled_from([0.0, 0.05]),
                    "uncertainty_penalty": st.sampled_from([0.0, 2.0]),
                    "max_batch_size": st.just(anchors[-1]),
                },
            )
        )
    )
    noise = draw(st.sampled_from([0.0, 0.01, 0.03]))
    cells: dict[tuple[int, int], list[tuple[Any, Any]]] = {}
    for anchor in anchors:
        for k in ks:
            level = draw(st.sampled_from([100.0, 100.5, 110.0, 130.0])) * anchor
            if not maximize:
                level = 1000.0 / level
            count = draw(st.integers(3, 4))
            offsets = draw(
                st.lists(st.sampled_from([-1.0, -0.5, 0.0, 1.0]), min_size=count, max_size=count)
            )
            acceptance = 1.0 + 0.5 * k if k > 0 else None
            cells[(anchor, k)] = [
                (round(level * (1 + noise * offset), 3), acceptance) for offset in offsets
            ]
    _break(draw, kind, cells, anchors, ks)
    if kind == "numeric-text":
        chosen = draw(st.sampled_from(sorted(cells)))
        cells[chosen] = [
            (f"{value}", None if acceptance is None else f"{acceptance}")
            for value, acceptance in cells[chosen]
        ]
    return Case(kind, cells, flags)


def _break(
    draw: st.DrawFn,
    kind: str,
    cells: dict[tuple[int, int], list[tuple[Any, Any]]],
    anchors: list[int],
    ks: list[int],
) -> None:
    """Break ``cells`` in the one way ``kind`` names (nothing for a valid class)."""
    anchor = draw(st.sampled_from(anchors))
    k = draw(st.sampled_from(ks))
    runs = cells[(anchor, k)]
    if kind == "too-few-runs":
        cells[(anchor, k)] = runs[: draw(st.integers(1, 2))]
    elif kind == "noisy":
        value = float(runs[0][0])
        cells[(anchor, k)] = [
            (value * f, a) for f, (_, a) in zip([1.0, 1.5, 2.0], runs[:3], strict=True)
        ]
    elif kind == "all-zero":
        for other in ks:
            cells[(anchor, other)] = [(0.0, a) for _, a in cells[(anchor, other)]]
    elif kind == "negative-acceptance":
        cells[(anchor, k)] = [(value, -1.5) for value, _ in runs]
    elif kind == "text-acceptance":
        cells[(anchor, k)] = [(value, "n/a") for value, _ in runs]
    elif kind == "unstable-acceptance":
        cells[(anchor, k)] = [(value, 1.0 + n) for n, (value, _) in enumerate(runs)]


def _reference(root: Path, case: Case) -> tuple[dict[str, Any] | None, list[str]]:
    """The reference's result (None when it rejects the sweep) and its kinds of error."""
    try:
        return reference_tune(root, **case.flags), []
    except ReferenceRejected as rejected:
        return None, rejected.kinds


@pytest.mark.parametrize("kind", VALID + BROKEN)
@settings(
    max_examples=15,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_tune_spec_k_does_what_the_seeds_policy_does(
    kind: str, data: st.DataObject, capsys: pytest.CaptureFixture[str]
) -> None:
    case = data.draw(cases(kind))
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "sweep"
        write_case(root, case)
        output = Path(folder) / "schedule.json"
        if kind == "new-output-folder":
            output = Path(folder) / "out" / "new" / "schedule.json"
        reference, kinds = _reference(root, case)
        outcome = run_tune(capsys, root, output, *case.cli_flags())
        # The generator makes what its class says: the reference tunes it exactly when valid.
        assert (reference is not None) == (kind in VALID), kinds
        if reference is None:
            assert_rejected_alike(outcome, kinds)
            standing = frozenset().union(*(RULES_OF_KIND[k] for k in kinds))
            causes = Outcome(**{**vars(outcome), "stderr": FOLLOW_ON.sub("", outcome.stderr)})
            assert causes.error_rules <= standing, outcome.stderr
            return
        assert_seed_success(outcome, reference_document(reference, case.flags))
        if kind == "static-k":
            assert outcome.document is not None
            assert outcome.document["configured_global_num_speculative_tokens"] is None
        if kind == "sibling-folders":
            assert outcome.document is not None
            files = outcome.document["input_summary_files"]
            folders = [file.split("/")[0] for file in files]
            # Both siblings, A's files first (the reference's order, compared above).
            assert folders == ["A"] * folders.count("A") + ["A-2"] * folders.count("A-2")
            assert "A" in folders and "A-2" in folders
