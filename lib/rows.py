"""A sweep's records turned into rows: the derived columns of each run (where it came from,
its run number, anchor, K), its metrics (:class:`lib.records.MetricColumns`), and a problem
for what cannot be used: a record that is not an object, a health field that is no count, a
run number that is not one, params that give no anchor or K (:mod:`lib.run_params`), a run
read twice (:mod:`lib.repeated_runs`). Used by :mod:`lib.sweep_files`.
"""

from __future__ import annotations

from typing import Any

from lib.keys import LARGEST_WHOLE_NUMBER, MISSING, whole_number
from lib.problems import ProblemLog, Severity, show_value
from lib.records import MetricColumns
from lib.repeated_runs import RecordFile, RepeatedRuns
from lib.run_params import SPECULATIVE_PREFIXES, ParamsReader
from lib.settings import DERIVED_COLUMNS, HEALTH_FIELDS

__all__ = ["Rows", "place_failures"]


class Rows:
    """Turns records into rows, logging what cannot be used.

    The derived columns are kept as one list each (``derived``), the metrics in ``metrics``;
    ``params`` holds the distinct configs met.
    """

    def __init__(
        self, batch_size_var: str, k_var: str, log: ProblemLog, kept: tuple[str, ...] | None
    ) -> None:
        self.log = log
        self.derived: dict[str, list[Any]] = {name: [] for name in DERIVED_COLUMNS}
        self.params = ParamsReader(batch_size_var, k_var)
        self.metrics = MetricColumns(kept)
        self._protected = frozenset(
            (*self.params.names, *HEALTH_FIELDS, "run_number", *(kept or ()))
        )
        self.repeats = RepeatedRuns(log, self.protected)

    def protected(self, name: str) -> bool:
        """Whether a top-level field is read by name (the lookups, the health gate, the kept
        metrics), so that its list, if it is one, must not be replaced (:mod:`lib.bulky_lists`).
        """
        return name in self._protected or name.startswith(SPECULATIVE_PREFIXES)

    def _unhealthy(self, record: dict[str, Any], where: str) -> bool:
        """Whether a health field the record has is not a count (logging each one).

        The health gate trusts ``failed``, ``completed`` and ``num_prompts`` to be what vLLM
        writes: whole numbers >= 0. ``"5"``, ``true``, ``[1]``, ``-1`` or null would pass it
        as healthy (a text or a list is no number to compare), so such a run is not used and
        the problem says why. A record without the field is another matter: older benches do
        not write every one, and the gate skips what is absent."""
        unhealthy = False
        for name in HEALTH_FIELDS:
            value = record.get(name, MISSING)
            if value is MISSING or (type(value) is int and 0 <= value <= LARGEST_WHOLE_NUMBER):
                continue
            if whole_number(value) is not None:
                continue
            unhealthy = True
            self.log.add(
                "invalid-health-field",
                "a health field is not a count, so whether the run was healthy is unknown;"
                " the run is not used",
                where,
                field=name,
                value=show_value(value),
                expected=f"a whole number from 0 to {LARGEST_WHOLE_NUMBER}",
            )
        return unhealthy

    def add_records(
        self,
        records: list[Any],
        file: RecordFile,
        combo: str,
        run_number: int | None,
        parsed_by_orjson: bool,
        indexed: bool,
    ) -> None:
        """The records of one file: a summary.json's list (``run_number`` None: a record
        without its own ``run_number`` gets its position) or ``[record]`` of a run=N.json
        (``run_number`` N). Records that are not objects are reported and give no row.
        ``indexed``: a problem names the record (``file[position]``), so the user finds the
        run among many."""
        source = file.source
        derived = self.derived
        first_row = len(derived["source"])
        rows: list[dict[str, Any]] = []
        positions = derived["position"].append
        numbers = derived["run_number"].append
        speculations = derived["speculation"].append
        anchors = derived["anchor"].append
        ks = derived["k"].append
        global_ks = derived["global_k"].append
        read_params = self.params.read
        repeated = self.repeats.repeated
        for position, record in enumerate(records):
            if not isinstance(record, dict):
                self.log.add(
                    "record-not-object",
                    f"record {position} is not a JSON object",
                    source,
                    value=show_value(record),
                    expected="an object with the fields of a `vllm bench serve` result",
                )
                continue
            where = f"{source}[{position}]" if indexed else source
            if self._unhealthy(record, where):
                continue
            raw = record.get("run_number")
            number = whole_number(raw)
            if number is None:
                number = position if run_number is None else run_number
                if raw is not None:
                    self.log.add(
                        "invalid-run-number",
                        f"the run number is not a usable number; run {number} is used instead"
                        " (from the file name or the record's place in the file)",
                        where,
                        severity=Severity.WARNING,
                        field="run_number",
                        value=show_value(raw),
                        expected=f"a whole number from 0 to {LARGEST_WHOLE_NUMBER}",
                    )
            params = read_params(record, parsed_by_orjson)
            run = (combo, params.anchor, params.k, number)
            if repeated(record, file, position, records, parsed_by_orjson, run):
                continue
            if params.findings:
                for rule, message, name, value, expected in params.findings:
                    self.log.add(rule, message, where, field=name, value=value, expected=expected)
            positions(position)
            numbers(number)
            speculations(params.speculation)
            anchors(params.anchor)
            ks(params.k)
            global_ks(params.global_k)
            rows.append(record)
        derived["source"].extend([source] * len(rows))
        derived["combo"].extend([combo] * len(rows))
        derived["failure_file"].extend([False] * len(rows))
        self.metrics.add(rows, first_row, parsed_by_orjson)

    def add_failure(self, record: Any, source: str, combo: str, run_number: int) -> int:
        """A failed run: a row with no metrics; anchor and K come from the file if it has
        them, else from the combo's other runs (:func:`place_failures`, once all are read).
        Returns its row."""
        anchor, k = self.params.of_failure(record)
        row = {
            "source": source,
            "position": 0,
            "combo": combo,
            "run_number": run_number,
            "failure_file": True,
            "speculation": None,
            "anchor": anchor,
            "k": k,
            "global_k": None,
        }
        for name, value in row.items():
            self.derived[name].append(value)
        self.metrics.add_empty()
        return len(self.derived["source"]) - 1


def place_failures(derived: dict[str, list[Any]], failures: list[tuple[int, str]]) -> None:
    """A failure file usually holds no parameters: it belongs to its combo's anchor and K,
    those of the combo's first run that is not a failure (one pass over the runs, then a
    lookup per failure: a sweep may hold thousands of both)."""
    if not failures:
        return
    anchors, ks = derived["anchor"], derived["k"]
    first_run: dict[str, int] = {}
    for row, (combo, failed) in enumerate(
        zip(derived["combo"], derived["failure_file"], strict=True)
    ):
        if not failed:
            first_run.setdefault(combo, row)
    for row, combo in failures:
        sibling = first_run.get(combo)
        if sibling is None or (anchors[row] is not None and ks[row] is not None):
            continue
        anchors[row] = anchors[row] or anchors[sibling]
        ks[row] = ks[sibling] if ks[row] is None else ks[row]
