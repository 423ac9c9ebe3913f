"""Which server start each run came from: the serve combo of its folder, and its replica marker.

`vllm bench sweep serve` starts one server per serve combo and runs every bench combo on it,
``--num-runs`` times (``SERVE--<serve combo>-BENCH--<bench combo>/``). The serve combo's name
is the params file's dict key, or its ``key=value`` pairs joined by ``-``; the records hold the
serve params, except a key the bench params also set (bench keys win: vLLM's ``--seed`` is
both a serve and a bench flag), so the folder's name is the one place a run's server is named.

A **replica** is a serve combo that differs from another only in a marker parameter
(``--replica-var``, :data:`lib.settings.DEFAULT_REPLICA_VAR`): its ``<var>=<value>`` part of the
name. ``tune-spec-k plan --server-replicas R`` writes ``k3-seed=0``, ``k3-seed=1``, ...: one
configuration on R server starts. Stripping the marker gives the **configuration**; two serve
combos in one (anchor, K) cell with different configurations are different servers the records
cannot tell apart (``pooled-servers``, :func:`lib.gates.server_gate`).

>>> configuration_of("k3-seed=1"), replica_of("k3-seed=1")
('k3', '1')
>>> configuration_of("seed=2-max_num_seqs=8"), configuration_of("k3"), replica_of("k3")
('max_num_seqs=8', 'k3', None)
>>> configuration_of("k3-seedling=1")
'k3-seedling=1'
>>> replica_combo_name("k3", "seed", 2)
'k3-seed=2'
"""

from __future__ import annotations

import re
from collections.abc import Callable

import polars as pl

from lib.flags import flag_name
from lib.settings import DEFAULT_REPLICA_VAR, Fields

__all__ = [
    "SERVE_COMBO",
    "configuration_expression",
    "configuration_of",
    "replica_combo_name",
    "replica_of",
    "replica_var_reason",
    "serve_combo_expression",
]

#: The serve combo of a ``SERVE--<serve combo>-BENCH--<bench combo>`` folder (the last part of
#: the run's combo path); no match: a folder not named like the sweep's, which names no server.
SERVE_COMBO = r"(?:^|/)SERVE--([^/]*)-BENCH--[^/]*$"


def _marker(replica_var: str) -> str:
    """The marker's part of a name: at the start (with the ``-`` after it) or after a ``-``.
    Values hold no ``-`` (the name's separator), so ``[^-]*`` ends where the value does."""
    var = re.escape(replica_var)
    return rf"^{var}=[^-]*-?|-{var}=[^-]*"


def replica_var_reason(replica_var: str) -> str | None:
    """Why ``replica_var`` cannot mark replicas (None when it can): a serve parameter's name,
    not empty and without the characters that separate a combo name's parts (``-``, ``=``,
    ``/``), else the marker would match inside other parts.

    >>> replica_var_reason("seed"), replica_var_reason("rep.id")
    (None, None)
    >>> replica_var_reason("a-b")
    "--replica-var 'a-b': expected a serve parameter's name without '-', '=' or '/' (e.g. seed)"
    """
    if replica_var and not any(character in replica_var for character in "-=/"):
        return None
    return (
        f"{flag_name(Fields, 'replica_var')} {replica_var!r}: expected a serve parameter's name"
        " without '-', '=' or '/' (e.g. seed)"
    )


def configuration_of(serve: str, replica_var: str = DEFAULT_REPLICA_VAR) -> str:
    """The serve combo's name without its replica marker (the name itself where it has none)."""
    return re.sub(_marker(replica_var), "", serve)


def replica_of(serve: str, replica_var: str = DEFAULT_REPLICA_VAR) -> str | None:
    """The marker's value in the serve combo's name; None where it has no marker."""
    found = re.search(rf"(?:^|-){re.escape(replica_var)}=([^-]*)", serve)
    return None if found is None else found.group(1)


def replica_combo_name(configuration: str, replica_var: str, value: int) -> str:
    """The serve combo name of replica ``value`` of a configuration (what the plan writes)."""
    return f"{configuration}-{replica_var}={value}"


def serve_combo_expression(combo: str = "combo") -> pl.Expr:
    """The serve combo of each run's folder (null outside the sweep's layout)."""
    return _per_folder(combo, lambda names: names.str.extract(SERVE_COMBO, 1))


def configuration_expression(
    replica_var: str = DEFAULT_REPLICA_VAR, combo: str = "combo"
) -> pl.Expr:
    """:func:`configuration_of` of each run's serve combo as a Polars expression (Rust's regex:
    the same pattern, which needs no look-around); null outside the sweep's layout."""
    return _per_folder(
        combo,
        lambda names: names.str.extract(SERVE_COMBO, 1).str.replace_all(_marker(replica_var), ""),
    )


def _per_folder(combo: str, of_names: Callable[[pl.Expr], pl.Expr]) -> pl.Expr:
    """``of_names`` applied once per distinct folder name, then given to each run of it: a
    sweep has hundreds of folders for tens of thousands of runs, and a regex per run cost
    12 ms at 20,000 runs, once per analysis (against about 2 ms this way). The distinct names
    are sorted, so a run's dense rank (1 for the smallest name; null for a null name) less one
    is its name's index; a null name gets null."""
    names = pl.col(combo).drop_nulls().unique().sort()
    return of_names(names).gather(pl.col(combo).rank("dense").cast(pl.Int64) - 1)
