"""The catalogue of record fields a tuning can optimise: name, unit, direction and meaning.

One table (:data:`OBJECTIVES`) for every front end: the CLI warns from it when a latency is
maximised (:func:`direction_problems`), the app takes its default direction from it
(:func:`catalogue_direction`) and offers its fields first, and README's table of objectives is
:func:`markdown_table` (a test compares the two). The fields are those of one ``vllm bench
serve --save-result`` record (``vllm/benchmarks/serve.py``; ``/work/shared/docs``'s
vllm-formats.md, section 2); the latency percentiles are whatever ``--metric-percentiles``
asked for (``p99`` by default), so any ``p<N>_<metric>_ms`` is known too.

A field not in the catalogue has no known direction: the settings' direction stands (the
seed's default, maximize) and nothing is said about it. This module imports only the standard
library: ``tune-spec-k --help`` must not wait for Polars.

>>> catalogue_direction("median_tpot_ms"), catalogue_direction("p90_ttft_ms")
('minimize', 'minimize')
>>> catalogue_direction("output_throughput"), catalogue_direction("my_field") is None
('maximize', True)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lib.flags import flag_name
from lib.problems import Problem, Severity
from lib.settings import Direction, Settings

__all__ = [
    "OBJECTIVES",
    "OBJECTIVES_BY_NAME",
    "Objective",
    "catalogue_direction",
    "direction_problems",
    "find_objective",
    "latency_maximized",
    "markdown_table",
]


@dataclass(frozen=True)
class Objective:
    """One record field that can rank K: its name in the record, its unit, whether larger
    (``maximize``) or smaller (``minimize``) is better, and what it measures."""

    name: str
    unit: str
    direction: Direction
    meaning: str


#: The latencies vLLM measures per request: what each is, and what to know about it.
_LATENCIES = {
    "ttft": ("time to first token", "queueing and prefill"),
    "tpot": ("time per output token after the first", "the decode speed a user sees"),
    "itl": (
        "inter-token latency",
        "per streamed chunk: under speculative decoding a chunk may carry several tokens",
    ),
    "e2el": ("end-to-end latency", "from sending a request to its last token"),
}
#: How each latency is summarised over the requests of a run (``p99``: the bench's default
#: ``--metric-percentiles``; :func:`find_objective` knows the others).
_STATISTICS = {"mean": "mean", "median": "median", "p99": "99th percentile"}

_THROUGHPUTS = (
    Objective("output_throughput", "tok/s", "maximize", "output tokens per second over the run"),
    Objective(
        "total_token_throughput",
        "tok/s",
        "maximize",
        "prompt and output tokens per second over the run",
    ),
    Objective("request_throughput", "req/s", "maximize", "completed requests per second"),
    Objective(
        "request_goodput",
        "req/s",
        "maximize",
        "requests per second that met every --goodput SLO (null without --goodput)",
    ),
    Objective(
        "max_output_tokens_per_s",
        "tok/s",
        "maximize",
        "the highest output tokens per second of any second of the run",
    ),
    Objective("duration", "s", "minimize", "wall time of the run for its fixed prompts"),
)

_LATENCY_OBJECTIVES = tuple(
    Objective(f"{statistic}_{metric}_ms", "ms", "minimize", f"{described} {what} ({note})")
    for metric, (what, note) in _LATENCIES.items()
    for statistic, described in _STATISTICS.items()
) + tuple(
    Objective(
        f"std_{metric}_ms", "ms", "minimize", f"standard deviation of the {what} over the requests"
    )
    for metric, (what, _) in _LATENCIES.items()
)

_ACCEPTANCE = (
    Objective(
        "spec_decode_acceptance_length",
        "tokens",
        "maximize",
        "tokens a verification step yields: 1 + accepted / drafts (absent for K=0)",
    ),
    Objective(
        "spec_decode_acceptance_rate",
        "%",
        "maximize",
        "accepted draft tokens per draft token, in percent (absent for K=0)",
    ),
)

#: Every known objective, throughputs first (the app offers them in this order).
OBJECTIVES: tuple[Objective, ...] = (*_THROUGHPUTS, *_LATENCY_OBJECTIVES, *_ACCEPTANCE)

#: The catalogue by field name, in its order.
OBJECTIVES_BY_NAME: dict[str, Objective] = {objective.name: objective for objective in OBJECTIVES}
#: ``p<N>_<metric>_ms``: a percentile ``--metric-percentiles`` asked for (``p99.9`` too).
_PERCENTILE = re.compile(r"p(\d+(?:\.\d+)?)_(" + "|".join(_LATENCIES) + r")_ms")


def find_objective(name: str) -> Objective | None:
    """The catalogue's entry for record field ``name``: a listed field, or any latency
    percentile ``p<N>_<metric>_ms``; None for a field the catalogue does not know.

    >>> find_objective("p99.9_e2el_ms").direction
    'minimize'
    >>> find_objective("p99_tpot") is None, find_objective("x_ms") is None
    (True, True)
    """
    if name in OBJECTIVES_BY_NAME:
        return OBJECTIVES_BY_NAME[name]
    match = _PERCENTILE.fullmatch(name)
    if match is None:
        return None
    percentile, metric = match.groups()
    what, note = _LATENCIES[metric]
    return Objective(name, "ms", "minimize", f"{percentile}th percentile {what} ({note})")


def catalogue_direction(name: str) -> Direction | None:
    """The direction that means "better" for record field ``name`` (None: not known)."""
    found = find_objective(name)
    return None if found is None else found.direction


def latency_maximized(settings: Settings) -> Problem | None:
    """A warning when the objective is a field the catalogue says to minimise (a latency, the
    run's duration) and the settings maximise it: the schedule would pick the K that makes it
    worst. The seed's default direction is maximize, so ``--objective-var median_tpot_ms``
    alone gets here; the warning names the flag that fixes it.

    No warning for a field to maximise, for a minimised objective, or for a field the
    catalogue does not know (its direction is the user's call).
    """
    found = find_objective(settings.objective)
    if found is None or found.direction != "minimize" or settings.direction != "maximize":
        return None
    flag = flag_name(Settings, "direction")
    return Problem(
        Severity.WARNING,
        "latency-maximized",
        f"the objective {found.name} ({found.unit}, smaller is better) is maximised, so the"
        f" K that makes it largest wins; give {flag} minimize to pick the fastest K",
        field=flag,
        value="maximize",
        expected="minimize",
    )


def direction_problems(settings: Settings) -> list[Problem]:
    """What the catalogue says about the settings' direction (:func:`latency_maximized`)."""
    found = latency_maximized(settings)
    return [] if found is None else [found]


def markdown_table() -> str:
    """The catalogue as the Markdown table README shows (one row per field; the
    percentile rows stand for every ``p<N>``)."""
    rows = [
        "| field | unit | better | meaning |",
        "| --- | --- | --- | --- |",
        *(
            f"| `{o.name}` | {o.unit} | {'larger' if o.direction == 'maximize' else 'smaller'}"
            f" | {o.meaning} |"
            for o in OBJECTIVES
        ),
    ]
    return "\n".join(rows) + "\n"
