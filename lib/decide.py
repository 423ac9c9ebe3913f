"""The decision stage of the seed's policy (vLLM PR #49163): one K per anchor from the gated
cells (:class:`lib.gates.GatedSweep`).

:func:`tie_rule` ranks the kept cells of each anchor by their conservative score and marks
the K tied with the best, selecting the smallest; :func:`zero_score_problems` names the anchors
where nothing can be ranked; :func:`decide` makes one row per anchor (:data:`DECISION_SCHEMA`).
The seed's rule and the confident rule (:func:`lib.policy.apply_policy`) share :func:`decide`.
"""

from __future__ import annotations

from typing import Literal

import polars as pl

from lib.flags import flag_name
from lib.problems import Problem, Severity, show_value
from lib.settings import Settings

__all__ = ["DECISION_SCHEMA", "decide", "tie_rule", "zero_score_problems"]


def tie_rule(cells: pl.DataFrame, relative_tolerance: float, maximize: bool) -> pl.DataFrame:
    """Add ``ratio``, ``tied`` and ``selected`` to the kept cells (``status == "kept"``).

    Per anchor, ``best`` is the highest conservative score (lowest when minimising);
    ``ratio = conservative / best`` (``best / conservative`` when minimising), so 1 is the best
    and smaller is worse. Every K with ``ratio >= 1 - relative_tolerance`` is tied with the
    best, and the smallest tied K is selected: fewer draft tokens cost less when the benefit is
    the same. Edge case: when maximising and the best score is 0 (every K scored 0, or its
    penalty clipped it to 0), nothing is ranked: no ratio, no pick, as the seed refuses such an
    anchor (:func:`zero_score_problems` says so). Rejected cells get null ratio and are never
    tied or selected.
    """
    kept = pl.col("status") == "kept"
    score = pl.when(kept).then(pl.col("conservative"))
    best = (score.max() if maximize else score.min()).over("anchor")
    ratio = pl.when(best > 0).then(score / best) if maximize else best / score
    with_ratio = cells.with_columns(ratio.alias("ratio")).with_columns(
        (pl.col("ratio") >= 1 - relative_tolerance).fill_null(False).alias("tied")
    )
    chosen = pl.col("k").filter(pl.col("tied")).min().over("anchor")
    return with_ratio.with_columns((pl.col("tied") & (pl.col("k") == chosen)).alias("selected"))


def zero_score_problems(cells: pl.DataFrame, maximize: bool) -> list[Problem]:
    """One ``no-positive-objective`` error per anchor where kept cells exist and none scores
    above 0 (maximising): the seed's "No positive conservative objective for batch_size=B".
    A score is the median less ``penalty x 1.4826 x MAD``, clipped at 0, so it is 0 when every
    K measured 0 or when the noise penalty eats the whole median. Minimising never meets it
    (a latency must be > 0, so its score is too)."""
    if not maximize:
        return []
    kept = cells.filter(pl.col("status") == "kept")
    best = kept.group_by("anchor").agg(
        pl.col("conservative").max().alias("best"), pl.col("files").explode().alias("files")
    )
    return [
        Problem(
            Severity.ERROR,
            "no-positive-objective",
            "no K scores above 0 here: every kept cell's conservative objective is 0, so"
            " nothing can be ranked",
            files=tuple(dict.fromkeys(files)),
            anchor=anchor,
            field="conservative objective",
            value=show_value(value),
            expected="> 0 for some K (a measured objective above 0, or a smaller"
            f" {flag_name(Settings, 'uncertainty_penalty')})",
        )
        for anchor, value, files in best.filter(pl.col("best") <= 0).sort("anchor").rows()
    ]


#: Schema of the decision frame (one row per anchor).
DECISION_SCHEMA = {
    "anchor": pl.Int64,
    "selected_k": pl.Int64,
    "selected_median": pl.Float64,
    "selected_conservative": pl.Float64,
    "vs_best_percent": pl.Float64,
    "vs_k0_percent": pl.Float64,
    "tied_k": pl.List(pl.Int64),
    "complete": pl.Boolean,
}


def decide(
    cells: pl.DataFrame, maximize: bool, score: Literal["conservative", "median"] = "conservative"
) -> pl.DataFrame:
    """One row per anchor (:data:`DECISION_SCHEMA`) from cells with ``selected`` / ``tied``.

    ``vs_best_percent``: ``(ratio - 1) * 100`` of the selected cell, i.e. its score against the
    best one's (0 when the best itself was selected, negative when a smaller tied K won).
    ``vs_k0_percent``: the selected K's ``score`` column (the seed ranks by the conservative
    score; the confident rule by the median) against K=0's, positive = better (for a minimised
    objective, ``k0 / selected - 1``); null without a kept K=0 cell or when K=0 scored 0.
    ``complete`` is false when any cell at the anchor was rejected, so the pick was made among
    fewer K than were measured. An anchor with no kept cell has a null K.
    """
    k0 = cells.filter((pl.col("k") == 0) & (pl.col("status") == "kept")).select(
        "anchor", pl.col(score).alias("_k0")
    )
    per_anchor = cells.group_by("anchor").agg(
        pl.col("k").filter(pl.col("tied")).alias("tied_k"),
        (pl.col("status") == "kept").all().alias("complete"),
    )
    selected = cells.filter(pl.col("selected")).select(
        "anchor",
        pl.col("k").alias("selected_k"),
        pl.col("median").alias("selected_median"),
        pl.col("conservative").alias("selected_conservative"),
        ((pl.col("ratio") - 1) * 100).alias("vs_best_percent"),
    )
    selected_score = pl.col("selected_" + score)
    gain = selected_score / pl.col("_k0") if maximize else pl.col("_k0") / selected_score
    return (
        per_anchor.join(selected, on="anchor", how="left")
        .join(k0, on="anchor", how="left")
        .with_columns(
            pl.when(pl.col("_k0") > 0).then((gain - 1) * 100).alias("vs_k0_percent"),
            pl.col("tied_k").list.sort(),
        )
        .sort("anchor")
        .select(list(DECISION_SCHEMA))
        .cast(DECISION_SCHEMA)  # type: ignore[arg-type]
    )
