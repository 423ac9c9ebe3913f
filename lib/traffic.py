"""A traffic mix: how much of a server's time runs each batch size (``docs/traffic.md``).

The schedule's K is looked up per engine step by the number of running requests, so what a
schedule buys on a server depends on how its time is spread over batch sizes. No engine exports
that histogram (``../shared/docs/engines-2026-12.md``, key finding 8 and "Task 4"): it is
sampled from a gauge. :func:`read_traffic` reads, each into one :class:`TrafficMix`:

- a Prometheus range query (``/api/v1/query_range``, JSON) of vLLM's
  ``vllm:num_requests_running`` (a Gauge, "Number of requests in model execution batches":
  ``vllm/v1/metrics/loggers.py`` of vLLM 0.34, ``len(scheduler.running)`` per engine step) or
  SGLang's ``sglang:num_running_reqs`` (a Gauge set from the decode batch every 40 decode
  steps, ``srt/observability/metrics_collector.py`` of SGLang 0.5.23). Every series counts
  (one per engine, a data-parallel rank each runs its own batch), every point one sample:
  a range query's points are evenly spaced, so each stands for the same time;
- a CSV of ``batch_size,weight`` (a histogram, any non-negative weights);
- a CSV of ``timestamp,batch_size`` samples (seconds): each sample holds until the next one,
  so it weighs the time to the next (the last one the median interval).

:func:`sweep_mix` is the mix when no file is given: the batches the sweep's own runs held,
by Little's law (:mod:`lib.effective_batch`), each cell weighted by its runs; where the records
lack the fields, the anchors, equally. It is said as such wherever it is used.

A batch size of 0 is an idle server: it has no engine step and no K; its share is kept
(:attr:`TrafficMix.idle_share`) and said, and the rest is the mix. Every refusal names the
file, the line (a CSV) or the JSON field, the value and what was expected (rule
``invalid-traffic``): nothing is dropped silently.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from lib.files import parse_json, read_file
from lib.keys import LARGEST_WHOLE_NUMBER, MISSING
from lib.problems import Problem, Severity, show_value

if TYPE_CHECKING:
    from lib.effective_batch import EffectiveBatch

__all__ = [
    "GAUGES",
    "TRAFFIC_RULE",
    "MixKind",
    "TrafficMix",
    "mix_of",
    "read_traffic",
    "sweep_mix",
]

#: The rule of every refused traffic file.
TRAFFIC_RULE = "invalid-traffic"
#: The running-requests gauges a range query may hold, and whose they are.
GAUGES: Mapping[str, str] = {
    "vllm:num_requests_running": "vLLM",
    "sglang:num_running_reqs": "SGLang",
}
MixKind = Literal["prometheus", "csv-weights", "csv-samples", "sweep-runs", "sweep-anchors"]
_WEIGHT_HEADER = ("batch_size", "weight")
_SAMPLE_HEADER = ("timestamp", "batch_size")
_EXPECTED_HEADER = "a header batch_size,weight or timestamp,batch_size"
_BATCH_EXPECTED = f"a whole number of running requests from 0 to {LARGEST_WHOLE_NUMBER}"


@dataclass(frozen=True)
class TrafficMix:
    """A distribution of the running batch size: ``batch_sizes`` (ascending, each >= 1) and
    their ``weights`` (summing to 1 over them); ``idle_share``: the share of the samples at
    batch size 0 (left out of the weights). ``source``: the file, or what the sweep mix was
    built from; ``kind``: how it was read; ``samples``: the samples (or histogram rows) behind
    it; ``metric``: the gauge of a range query."""

    source: str
    kind: MixKind
    batch_sizes: tuple[int, ...]
    weights: tuple[float, ...]
    samples: int
    idle_share: float = 0.0
    metric: str | None = None

    @property
    def given(self) -> bool:
        """Whether the mix is the user's (a file), not the sweep's own."""
        return self.kind not in ("sweep-runs", "sweep-anchors")

    def description(self) -> str:
        """What the mix is, in a few words, for every line that uses it."""
        if self.kind == "sweep-runs":
            return (
                "the sweep's own runs (requests in flight by Little's law, each cell weighted"
                " by its runs), not your traffic"
            )
        if self.kind == "sweep-anchors":
            return "the sweep's anchors, equally weighted (not your traffic)"
        if self.kind == "prometheus":
            engine = GAUGES.get(self.metric or "", "")
            return f"{self.source}: {self.samples} samples of {engine} {self.metric}"
        if self.kind == "csv-samples":
            return f"{self.source}: {self.samples} timestamped samples"
        return f"{self.source}: a histogram of {self.samples} rows"

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "kind": self.kind,
            "metric": self.metric,
            "samples": self.samples,
            "idle_share": round(self.idle_share, 6),
            "batch_sizes": list(self.batch_sizes),
            "weights": [round(w, 6) for w in self.weights],
        }


def mix_of(
    weights: Mapping[int, float],
    source: str,
    kind: MixKind,
    samples: int,
    metric: str | None = None,
) -> TrafficMix | None:
    """The mix of per-batch-size weights (batch size 0 the idle share); None when no weight
    falls on a batch size of 1 or more."""
    total = sum(weights.values())
    busy = {b: w for b, w in weights.items() if b >= 1 and w > 0}
    busy_total = sum(busy.values())
    if total <= 0 or busy_total <= 0:
        return None
    ordered = sorted(busy)
    return TrafficMix(
        source,
        kind,
        tuple(ordered),
        tuple(busy[b] / busy_total for b in ordered),
        samples,
        weights.get(0, 0.0) / total,
        metric,
    )


def _error(path: str, message: str, field: str | None, value: Any, expected: str) -> Problem:
    return Problem(
        Severity.ERROR,
        TRAFFIC_RULE,
        message,
        files=(path,),
        field=field,
        value=None if value is MISSING else show_value(value),
        expected=expected,
    )


def _batch_size(value: float) -> int | None:
    """A gauge value or a CSV cell as a batch size: a finite whole number >= 0."""
    if not math.isfinite(value) or value < 0 or value > LARGEST_WHOLE_NUMBER:
        return None
    return int(value) if value.is_integer() else None


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def read_traffic(path: str) -> tuple[TrafficMix | None, list[Problem]]:
    """The mix in ``path``: a range query's JSON, else a CSV (by its first character), or None
    and every problem found."""
    raw, failure = read_file(path)
    if raw is None:
        rule, message = failure or ("unreadable-file", "cannot read the file")
        return None, [Problem(Severity.ERROR, rule, message, files=(path,))]
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        return None, [
            Problem(Severity.ERROR, "unreadable-file", f"not UTF-8 text: {error.reason}", (path,))
        ]
    if text.lstrip().startswith(("{", "[")):
        data, failure, _ = parse_json(raw)
        if failure is not None:
            return None, [Problem(Severity.ERROR, failure[0], failure[1], files=(path,))]
        return _prometheus_mix(data, path)
    return _csv_mix(text, path)


# --------------------------------------------------------------------------- range queries


def _series(data: Any, path: str) -> tuple[list[Any] | None, str, list[Problem]]:
    """The ``result`` list of a range query (the API's whole answer, or its ``data``), and
    the JSON path it was found at."""
    prefix = ""
    if isinstance(data, dict) and "data" in data:
        if data.get("status") not in (None, "success"):
            problem = _error(
                path,
                "the range query did not succeed",
                "status",
                data.get("status"),
                '"success"',
            )
            return None, "", [problem]
        data, prefix = data["data"], "data."
    if not isinstance(data, dict) or "result" not in data:
        problem = _error(
            path,
            "not a Prometheus range query (query_range) answer",
            "data.result",
            MISSING,
            'an object {"status": "success", "data": {"resultType": "matrix", "result": [...]}}',
        )
        return None, "", [problem]
    kind = data.get("resultType", "matrix")
    if kind != "matrix":
        problem = _error(
            path,
            "a range query's result is a matrix (an instant query gives one sample per series)",
            f"{prefix}resultType",
            kind,
            '"matrix" (GET /api/v1/query_range)',
        )
        return None, "", [problem]
    result = data["result"]
    if not isinstance(result, list) or not result:
        problem = _error(
            path, "no series in the range query", f"{prefix}result", result, "a non-empty list"
        )
        return None, "", [problem]
    return result, f"{prefix}result", []


def _prometheus_mix(data: Any, path: str) -> tuple[TrafficMix | None, list[Problem]]:
    """A range query of one of :data:`GAUGES`: every point of every series is one sample."""
    result, at, problems = _series(data, path)
    if result is None:
        return None, problems
    weights: dict[int, float] = {}
    samples = 0
    metrics: set[str] = set()
    for i, series in enumerate(result):
        where = f"{at}[{i}]"
        metric = series.get("metric") if isinstance(series, dict) else None
        name = metric.get("__name__") if isinstance(metric, dict) else MISSING
        if name not in GAUGES:
            problems.append(
                _error(
                    path,
                    "not a running-requests gauge (a query that sums or averages the ranks"
                    " drops the name: query the gauge itself)",
                    f"{where}.metric.__name__",
                    name,
                    " or ".join(GAUGES),
                )
            )
            continue
        metrics.add(str(name))
        values = series.get("values") if isinstance(series, dict) else None
        if not isinstance(values, list):
            problems.append(
                _error(path, "no samples", f"{where}.values", values, "a list of [time, value]")
            )
            continue
        for j, point in enumerate(values):
            batch = None
            if isinstance(point, list) and len(point) == 2 and isinstance(point[1], str):
                number = _number(point[1])
                batch = None if number is None else _batch_size(number)
            if batch is None:
                shown = point[1] if isinstance(point, list) and len(point) == 2 else point
                problems.append(
                    _error(
                        path,
                        "a sample is not a number of running requests",
                        f"{where}.values[{j}][1]",
                        shown,
                        f'{_BATCH_EXPECTED}, as a string ("12")',
                    )
                )
                continue
            weights[batch] = weights.get(batch, 0.0) + 1.0
            samples += 1
    if len(metrics) > 1:
        problems.append(
            _error(
                path,
                "the range query mixes engines' gauges",
                f"{at}[*].metric.__name__",
                " and ".join(sorted(metrics)),
                "one gauge",
            )
        )
    if problems:
        return None, problems
    metric = next(iter(metrics))
    return _busy_mix(weights, path, "prometheus", samples, metric)


def _busy_mix(
    weights: Mapping[int, float],
    path: str,
    kind: MixKind,
    samples: int,
    metric: str | None = None,
) -> tuple[TrafficMix | None, list[Problem]]:
    mix = mix_of(weights, path, kind, samples, metric)
    if mix is None:
        problem = _error(
            path,
            "no sample has a running request (an idle server, or an empty file): nothing to weigh",
            None,
            MISSING,
            "samples with at least one running request",
        )
        return None, [problem]
    return mix, []


# --------------------------------------------------------------------------- CSV


def _csv_mix(text: str, path: str) -> tuple[TrafficMix | None, list[Problem]]:
    rows = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    for row in rows:
        if any(cell.strip() for cell in row):
            header = [cell.strip().lower() for cell in row]
            break
    line = rows.line_num
    if header is None:
        return None, [_error(path, "an empty file", None, MISSING, _EXPECTED_HEADER)]
    if sorted(header) == sorted(_WEIGHT_HEADER) and len(header) == 2:
        return _weights_csv(rows, header, path)
    if sorted(header) == sorted(_SAMPLE_HEADER) and len(header) == 2:
        return _samples_csv(rows, header, path)
    return None, [
        _error(
            path, "not a traffic CSV", f"line {line}: header", ",".join(header), _EXPECTED_HEADER
        )
    ]


def _cells(
    rows: Iterable[list[str]], header: Sequence[str], path: str, line_of: Any
) -> tuple[list[tuple[int, dict[str, str]]], list[Problem]]:
    """The data rows as (line, {column: text}); a row of another width is refused."""
    found = []
    problems = []
    for row in rows:
        if not any(cell.strip() for cell in row):
            continue
        line = line_of()
        if len(row) != len(header):
            problems.append(
                _error(
                    path,
                    f"{len(row)} fields where the header has {len(header)}",
                    f"line {line}",
                    ",".join(row),
                    ",".join(header),
                )
            )
            continue
        found.append((line, {name: cell.strip() for name, cell in zip(header, row, strict=True)}))
    return found, problems


def _batch_cell(path: str, line: int, text: str) -> tuple[int | None, Problem | None]:
    number = _number(text)
    batch = None if number is None else _batch_size(number)
    if batch is None:
        return None, _error(
            path, "not a batch size", f"line {line}: batch_size", text, _BATCH_EXPECTED
        )
    return batch, None


def _weights_csv(
    rows: Any, header: Sequence[str], path: str
) -> tuple[TrafficMix | None, list[Problem]]:
    """``batch_size,weight`` rows; a batch size listed twice adds its weights."""
    found, problems = _cells(rows, header, path, lambda: rows.line_num)
    weights: dict[int, float] = {}
    for line, cells in found:
        batch, problem = _batch_cell(path, line, cells["batch_size"])
        weight = _number(cells["weight"])
        if weight is None or not math.isfinite(weight) or weight < 0:
            problems.append(
                _error(
                    path,
                    "not a weight",
                    f"line {line}: weight",
                    cells["weight"],
                    "a finite number >= 0 (a share, a count or seconds)",
                )
            )
        if problem is not None:
            problems.append(problem)
        if batch is not None and weight is not None and not problems:
            weights[batch] = weights.get(batch, 0.0) + weight
    if problems:
        return None, problems
    return _busy_mix(weights, path, "csv-weights", len(found))


def _samples_csv(
    rows: Any, header: Sequence[str], path: str
) -> tuple[TrafficMix | None, list[Problem]]:
    """``timestamp,batch_size`` samples in time order: each weighs the time to the next."""
    found, problems = _cells(rows, header, path, lambda: rows.line_num)
    samples: list[tuple[float, int]] = []
    previous: float | None = None
    for line, cells in found:
        batch, problem = _batch_cell(path, line, cells["batch_size"])
        stamp = _number(cells["timestamp"])
        if stamp is None or not math.isfinite(stamp):
            problems.append(
                _error(
                    path,
                    "not a timestamp",
                    f"line {line}: timestamp",
                    cells["timestamp"],
                    "seconds as a number (e.g. Unix time 1764921600.5)",
                )
            )
        elif previous is not None and stamp <= previous:
            problems.append(
                _error(
                    path,
                    "timestamps must increase (samples in time order, no repeats)",
                    f"line {line}: timestamp",
                    cells["timestamp"],
                    f"> {previous:g}",
                )
            )
        else:
            previous = stamp
        if problem is not None:
            problems.append(problem)
        if batch is not None and stamp is not None and not problems:
            samples.append((stamp, batch))
    if problems:
        return None, problems
    return _busy_mix(_held_time(samples), path, "csv-samples", len(samples))


def _held_time(samples: Sequence[tuple[float, int]]) -> dict[int, float]:
    """Seconds at each batch size: a sample holds until the next; the last one for the median
    interval (one sample alone: weight 1).

    >>> _held_time([(0.0, 1), (1.0, 4), (3.0, 4)])
    {1: 1.0, 4: 3.5}
    """
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(samples)]
    last = statistics.median(gaps) if gaps else 1.0
    weights: dict[int, float] = {}
    for (_, batch), gap in zip(samples, [*gaps, last], strict=True):
        weights[batch] = weights.get(batch, 0.0) + gap
    return weights


# --------------------------------------------------------------------------- the sweep's own


def sweep_mix(found: EffectiveBatch | None, anchors: Sequence[int]) -> TrafficMix | None:
    """The mix when no file is given: each cell's effective batch (Little's law, rounded to
    the nearest whole batch, at least 1) weighted by its runs; where the records lack the
    fields (:attr:`~lib.effective_batch.EffectiveBatch.missing`), the ``anchors`` equally.
    None without anchors."""
    weights: dict[int, float] = {}
    if found is not None and not found.missing and found.cells.height:
        runs = 0
        for value, _, count in found.by_cell().values():
            batch = max(1, round(value))
            weights[batch] = weights.get(batch, 0.0) + count
            runs += count
        return mix_of(weights, "the sweep's runs", "sweep-runs", runs)
    for anchor in anchors:
        weights[anchor] = weights.get(anchor, 0.0) + 1.0
    return mix_of(weights, "the sweep's anchors", "sweep-anchors", len(anchors))
