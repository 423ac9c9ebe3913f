"""A run's serve and bench params, looked up in its record by the fields the user named: its
anchor (the batch size), K, whether it speculates and its global K, with the problems met
(:class:`ParamsReader`, which also keeps each distinct ``speculative_config`` and
``compilation_config`` of the sweep). Used by :mod:`lib.rows`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from lib.flags import flag_name
from lib.keys import (
    LARGEST_WHOLE_NUMBER,
    MISSING,
    k_at_batch_size,
    lookup,
    parse_json_string,
    top_level_names,
    whole_number,
)
from lib.problems import show_value
from lib.records import fingerprint
from lib.settings import (
    DEFAULT_K_VAR,
    ENGINE_FIELDS,
    ENGINE_SETTING_EXPECTED,
    GLOBAL_K_VAR,
    Fields,
    beyond_every_count,
)

__all__ = [
    "COMPILATION_PREFIXES",
    "SPECULATIVE_PREFIXES",
    "Finding",
    "Params",
    "ParamsReader",
    "compilation_config",
]

#: How the literal dotted fields of a speculative_config start (:func:`_speculative_config`).
SPECULATIVE_PREFIXES = ("speculative_config.", "speculative-config.")

#: The record fields a serve combo's ``compilation_config`` may be under.
_COMPILATION_NAMES = ("compilation_config", "compilation-config")
#: The record fields that set an engine count (:data:`lib.settings.ENGINE_FIELDS`).
_ENGINE_NAMES = tuple(name for names in ENGINE_FIELDS.values() for name in names)
#: The fields of a ``compilation_config`` that state the capture ceiling.
_CAPTURE_KEYS = ("max_cudagraph_capture_size", "cudagraph_capture_sizes")
#: How the literal dotted fields of a compilation_config start (vLLM's
#: ``--compilation-config.max_cudagraph_capture_size 256`` as a serve param).
COMPILATION_PREFIXES = tuple(f"{name}." for name in _COMPILATION_NAMES)


def compilation_config(record: dict[str, Any]) -> dict[str, Any] | None:
    """The record's ``compilation_config``: the field (a dict, or JSON text of one), else its
    literal dotted fields (``"compilation_config.max_cudagraph_capture_size": 256``, as vLLM's
    dotted serve arguments write it) gathered into one dict, each value parsed if JSON text;
    None when the record states neither.

    >>> compilation_config({"compilation-config.max_cudagraph_capture_size": "256"})
    {'max_cudagraph_capture_size': 256}
    >>> compilation_config({"compilation_config": '{"cudagraph_capture_sizes": [1, 2]}'})
    {'cudagraph_capture_sizes': [1, 2]}
    >>> compilation_config({"max_num_seqs": 8}) is None
    True
    """
    for name in _COMPILATION_NAMES:
        config = parse_json_string(record.get(name))
        if isinstance(config, dict):
            return config
    return _dotted_fields(record, COMPILATION_PREFIXES) or None


def _dotted_fields(record: dict[str, Any], prefixes: tuple[str, ...]) -> dict[str, Any]:
    """The record's literal dotted fields that start with one of ``prefixes`` (``"x.y": v``),
    gathered into one dict (``{"y": v}``), each value parsed if JSON text."""
    return {
        key.split(".", 1)[1]: parse_json_string(value)
        for key, value in record.items()
        if key.startswith(prefixes)
    }


def _speculative_config(record: dict[str, Any]) -> Any:
    """The record's ``speculative_config`` (parsed if a JSON string), or :data:`MISSING`.

    A params file may set the config's fields as literal dotted keys instead
    (``"speculative_config.num_speculative_tokens": 7``, like vLLM's
    ``--speculative-config.num_speculative_tokens``); those are gathered into one dict, so the
    run still counts as speculative and its global K is still checked.
    """
    config = lookup(record, "speculative_config")
    if config is not MISSING:
        return config
    return _dotted_fields(record, SPECULATIVE_PREFIXES) or MISSING


#: A problem found in a record, without the file: (rule, message, field, value, expected).
Finding = tuple[str, str, str | None, str | None, str | None]


class Params(NamedTuple):
    """What a record's serve and bench params give, and the problems met finding it."""

    anchor: int | None
    k: int | None
    speculation: bool
    global_k: int | None
    findings: tuple[Finding, ...]


def _add_distinct(configs: dict[bytes, dict[str, Any]], config: dict[str, Any]) -> None:
    """Keep ``config`` unless an equal one is kept already."""
    configs.setdefault(orjson.dumps(config, option=orjson.OPT_SORT_KEYS), config)


class ParamsReader:
    """Looks up the params of each record in turn, keeping each distinct config met."""

    def __init__(self, batch_size_var: str, k_var: str) -> None:
        self.batch_size_var = batch_size_var
        self.k_var = k_var
        self.speculative_configs: dict[bytes, dict[str, Any]] = {}
        # Each distinct compilation_config a serve combo set (the capture ceiling's source).
        self.compilation_configs: dict[bytes, dict[str, Any]] = {}
        # The lookups read only these top-level fields (and, without a speculative_config, the
        # dotted speculative_config.* fields; the dotted compilation_config.* fields always):
        # records agreeing on them share their params.
        self.names = tuple(
            dict.fromkeys(
                name
                for key in (batch_size_var, "speculative_config", k_var, GLOBAL_K_VAR)
                for name in top_level_names(key)
            )
        ) + tuple(
            name
            for name in (*_COMPILATION_NAMES, *_ENGINE_NAMES)
            if name not in top_level_names(k_var)
        )
        self._config_names = frozenset(top_level_names("speculative_config"))
        self._previous_fingerprint: bytes | None = None
        self._previous_params = Params(None, None, False, None, ())
        self._previous_fields: tuple[str, ...] | None = None
        self._previous_dotted: tuple[str, ...] = ()
        self._previous_compilation: tuple[str, ...] = ()

    def read(self, record: dict[str, Any], reuse: bool) -> Params:
        """Anchor, K, speculation and global K of a record, with the problems met.

        The runs of a summary.json share their serve and bench params, so with ``reuse`` (the
        record was parsed by orjson) the lookups are done again only when the top-level
        fields they read differ from the previous record's (see
        :func:`lib.records.fingerprint`); otherwise the previous result is returned, its
        problems included (the caller logs them for this record). A record without a
        ``speculative_config`` field is compared on its dotted ``speculative_config.*`` fields
        too, which :func:`_speculative_config` gathers."""
        text = None
        if reuse:
            fields = {name: record[name] for name in self.names if name in record}
            names = tuple(record)
            if names != self._previous_fields:
                self._previous_fields = names
                self._previous_dotted = tuple(
                    name for name in names if name.startswith(SPECULATIVE_PREFIXES)
                )
                self._previous_compilation = tuple(
                    name for name in names if name.startswith(COMPILATION_PREFIXES)
                )
            if self._config_names.isdisjoint(fields):
                fields.update({name: record[name] for name in self._previous_dotted})
            fields.update({name: record[name] for name in self._previous_compilation})
            text = fingerprint(fields)
            if text is not None and text == self._previous_fingerprint:
                return self._previous_params
        found: list[Finding] = []
        anchor = self._anchor(record, found)
        k, speculation = self._k(record, anchor, found)
        global_k = self._global_k(record, found) if speculation else None
        self._compilation(record, found)
        _engine_settings(record, found)
        params = Params(anchor, k, speculation, global_k, tuple(found))
        self._previous_fingerprint = text
        self._previous_params = params
        return params

    def of_failure(self, record: Any) -> tuple[int | None, int | None]:
        """(anchor, K) of a failed run's record, where it has them (no problem is logged: a
        failure file usually holds no params, and the run counts as failed either way)."""
        if not isinstance(record, dict):
            return None, None
        raw_anchor = lookup(record, self.batch_size_var)
        anchor = whole_number(raw_anchor) if raw_anchor is not MISSING else None
        raw_k = lookup(record, self.k_var)
        if anchor is not None and raw_k is not MISSING:
            return anchor, k_at_batch_size(raw_k, anchor)
        return anchor, None

    def _anchor(self, record: dict[str, Any], found: list[Finding]) -> int | None:
        raw = lookup(record, self.batch_size_var)
        if raw is MISSING:
            found.append(
                (
                    "missing-anchor",
                    "the run has no batch-size field, so it cannot be placed at an anchor",
                    self.batch_size_var,
                    None,
                    f"a whole number from 1 to {LARGEST_WHOLE_NUMBER} (choose the field with"
                    f" {flag_name(Fields, 'batch_size_var')})",
                )
            )
            return None
        anchor = whole_number(raw)
        if anchor is None or anchor < 1:
            reason = (
                "null: the run was not concurrency-bound and cannot be an anchor"
                if raw is None
                else "not a usable batch size"
            )
            found.append(
                (
                    "invalid-anchor",
                    f"the batch-size field is {reason}",
                    self.batch_size_var,
                    show_value(raw),
                    f"a whole number from 1 to {LARGEST_WHOLE_NUMBER}",
                )
            )
            return None
        return anchor

    def _k(
        self, record: dict[str, Any], anchor: int | None, found: list[Finding]
    ) -> tuple[int | None, bool]:
        """(K, speculation) for the record; K=0 for a server without speculative_config."""
        speculative_config = _speculative_config(record)
        speculation = speculative_config is not MISSING and speculative_config is not None
        if isinstance(speculative_config, dict):
            _add_distinct(self.speculative_configs, speculative_config)
        raw = lookup(record, self.k_var)
        if raw is MISSING or raw is None:
            if not speculation:
                return 0, False
            hint = ""
            if self.k_var == DEFAULT_K_VAR and lookup(record, GLOBAL_K_VAR) is not MISSING:
                hint = (
                    "; this sweep seems to vary K statically: try "
                    f"{flag_name(Fields, 'k_var')} {GLOBAL_K_VAR}"
                )
            found.append(
                (
                    "missing-k",
                    "the run has a speculative_config but no K field" + hint,
                    self.k_var,
                    None,
                    "a whole number or a [[lo, hi, K], ...] schedule (choose with"
                    f" {flag_name(Fields, 'k_var')})",
                )
            )
            return None, speculation
        if anchor is None:
            return None, speculation
        k = k_at_batch_size(raw, anchor)
        if k is None:
            found.append(
                (
                    "invalid-k",
                    f"the K field gives no K at batch size {anchor}",
                    self.k_var,
                    show_value(raw),
                    f"a whole number from 0 to {LARGEST_WHOLE_NUMBER}, or [[lo, hi, K], ...]"
                    " ranges covering the anchor",
                )
            )
        return k, speculation

    def _global_k(self, record: dict[str, Any], found: list[Finding]) -> int | None:
        raw = lookup(record, GLOBAL_K_VAR)
        if raw is MISSING or raw is None:
            return None
        global_k = whole_number(raw)
        if global_k is None or global_k < 0:
            found.append(
                (
                    "invalid-global-k",
                    "the global speculative-token count is not a whole number",
                    GLOBAL_K_VAR,
                    show_value(raw),
                    f"a whole number from 1 to {LARGEST_WHOLE_NUMBER}",
                )
            )
            return None
        return global_k

    def _compilation(self, record: dict[str, Any], found: list[Finding]) -> None:
        """Keep the record's :func:`compilation_config`, once per distinct value: the sweep's
        statement of the CUDA-graph capture settings. A capture setting in it beyond every
        count is a problem (:func:`_engine_settings`)."""
        config = compilation_config(record)
        if config is not None:
            _add_distinct(self.compilation_configs, config)
            for key in _CAPTURE_KEYS:
                value = parse_json_string(lookup(config, key))
                sizes = value if isinstance(value, list) else [value]
                if any(beyond_every_count(size) for size in sizes):
                    found.append(_beyond_every_count(f"compilation_config.{key}", value))


def _engine_settings(record: dict[str, Any], found: list[Finding]) -> None:
    """A problem for each engine count the record's serve params set beyond every count
    (:func:`lib.settings.beyond_every_count`): ``max_num_seqs`` of 1e300 is no server's."""
    for name in _ENGINE_NAMES:
        value = record.get(name)
        if beyond_every_count(value):
            found.append(_beyond_every_count(name, value))


def _beyond_every_count(name: str, value: Any) -> Finding:
    return (
        "invalid-engine-setting",
        "the server setting is beyond every count (no vLLM server runs with it), so the"
        " capture rule cannot use it",
        name,
        show_value(value),
        ENGINE_SETTING_EXPECTED,
    )
