"""The server settings a sweep saved: each server's resolved config, as vLLM reports it.

``tune-spec-k plan``'s run script saves ``GET /server_info?config_format=json`` (a dev endpoint:
the sweep starts every server with ``VLLM_SERVER_DEV_MODE=1``) as :data:`SERVER_INFO_FILE_GLOB`
in each combo folder, after each benchmark run. The records of a sweep hold only the swept serve
keys; these files hold what the server made of them, above all the CUDA-graph capture ceiling
``C`` (``compilation_config.max_cudagraph_capture_size``, resolved from ``max_num_seqs``, K,
``max_num_batched_tokens`` and the platform when not given) that decides whether a schedule is
safe: ``b * (1 + K(b)) <= C`` (docs/loop.md).

The shape read (vLLM 0.32.0, ``entrypoints/serve/dev/server_info/api_router.py``)::

    {"vllm_config": {
        "compilation_config": {"max_cudagraph_capture_size": 16,
                               "cudagraph_capture_sizes": [1, 2, 4, 8, 16], ...},
        "scheduler_config": {"max_num_seqs": 2, "max_num_batched_tokens": 2048, ...},
        "speculative_config": {"method": "ngram", "num_speculative_tokens": 3, ...} | null,
        ...},
     "vllm_env": {...}, "system_env": {...}}

A bare ``vllm_config`` object (the value of that key, saved alone) is read the same way.

Besides, from ``system_env`` (vLLM's ``collect_env``): ``vllm_version`` (the release that
served, e.g. ``"0.32.0"``) and ``nvidia_gpu_models`` (e.g. ``"GPU 0: NVIDIA H100 80GB HBM3"``;
null on a CPU); and vLLM 0.34's decode graph fields of ``compilation_config``
(``max_decode_cudagraph_capture_requests``, ``decode_cudagraph_capture_request_sizes``,
``max_decode_cudagraph_capture_tokens``, ``prefill_cudagraph_capture_token_sizes``,
``max_prefill_cudagraph_capture_tokens``; ``../shared/docs/engines-2026-12.md`` 1b), absent
before 0.34.

Rules (each problem a warning: the sweep tunes without these files; what they lack is unknown):

- Files are found at any depth below the experiment folder, in the order of their relative
  paths; folders behind symbolic links are not entered, and a file that is a symbolic link
  leading outside the folder is not read.
- A file that cannot be read, is not JSON, is not an object, holds the text form
  (``config_format=text``) or no config at all gives a problem and no settings.
- A field of the wrong type (a count that is not a whole number >= 1, a capture size that is
  not a whole number >= 0, either one above 2^31 - 1, the limit of every count; a method that
  is not a string, an object that is not an object) gives a problem naming the file, the
  field, the value and what was expected; the file's other fields are still read and that
  one is None.
- A missing or ``null`` field is None without a problem: a server without speculation has
  ``speculative_config: null`` (its K and method are None), and older servers may lack a key.

Imports only the standard library and cheap core modules: reading these files never waits for
Polars.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lib.files import read_json
from lib.keys import LARGEST_WHOLE_NUMBER, MISSING
from lib.problems import Problem, Severity, show_value

__all__ = ["SERVER_INFO_FILE_GLOB", "SavedServers", "ServerSettings", "read_server_settings"]

#: The name of each saved server config: one per combo folder, matched at any depth.
SERVER_INFO_FILE_GLOB = "server_info.json"

_RULE = "invalid-server-info"
_COUNT = f"a whole number from 1 to {LARGEST_WHOLE_NUMBER}, or null"
_SIZE = f"a whole number from 0 to {LARGEST_WHOLE_NUMBER}, or null"


@dataclass(frozen=True)
class ServerSettings:
    """The settings of one saved server config that a schedule's safety depends on.

    ``max_cudagraph_capture_size`` is the final ceiling C as the server resolved it;
    ``cudagraph_capture_sizes`` the batch sizes (in tokens) it captures, as listed; ``method``
    and ``num_speculative_tokens`` (the global K) are None for a server without speculation.
    ``source`` is the file, relative to the experiment folder (``/``-separated).
    ``vllm_version`` and ``gpu_models`` are the server's ``system_env`` texts; the decode
    fields are vLLM 0.34's (None before): the request ceiling of the decode graphs and its
    sizes, their token budget, and the token graphs' sizes (their largest is C0).
    """

    max_cudagraph_capture_size: int | None
    cudagraph_capture_sizes: tuple[int, ...] | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    num_speculative_tokens: int | None
    method: str | None
    source: str
    vllm_version: str | None = None
    gpu_models: str | None = None
    max_decode_cudagraph_capture_requests: int | None = None
    decode_cudagraph_capture_request_sizes: tuple[int, ...] | None = None
    max_decode_cudagraph_capture_tokens: int | None = None
    prefill_cudagraph_capture_token_sizes: tuple[int, ...] | None = None
    max_prefill_cudagraph_capture_tokens: int | None = None
    #: ``parallel_config.data_parallel_size``: vLLM turns Dynamic SD off above 1.
    data_parallel_size: int | None = None

    @property
    def prefill_ceiling(self) -> int | None:
        """vLLM 0.34's C0: the largest token graph (``max_prefill_cudagraph_capture_tokens``,
        else the largest of ``prefill_cudagraph_capture_token_sizes``); None before 0.34."""
        if self.max_prefill_cudagraph_capture_tokens is not None:
            return self.max_prefill_cudagraph_capture_tokens
        sizes = self.prefill_cudagraph_capture_token_sizes
        return max(sizes) if sizes else None


#: What :func:`read_server_settings` returns: every config read, and the problems met.
SavedServers = tuple[list[ServerSettings], list[Problem]]


def read_server_settings(experiment_dir: str | Path) -> SavedServers:
    """Every saved server config below ``experiment_dir`` (see the module's rules), in the order
    of their relative paths, and the problems of those that could not be read in full."""
    root = Path(experiment_dir)
    settings: list[ServerSettings] = []
    problems: list[Problem] = []
    for path in _server_info_files(root, problems):
        source = path.relative_to(root).as_posix()
        data, unreadable = read_json(path)
        if data is MISSING:
            problems += [_warning(p.message, str(path), rule=p.rule) for p in unreadable]
            continue
        read = _Reader(str(path))
        config = read.config(data)
        if config is not None:
            found = read.settings(config, source)
            if isinstance(data, dict) and "vllm_config" in data:
                version, gpus = read.environment(data)
                found = replace(found, vllm_version=version, gpu_models=gpus)
            settings.append(found)
        problems += read.problems
    return settings, problems


def _server_info_files(root: Path, problems: list[Problem]) -> list[Path]:
    """The saved configs below ``root``, sorted by relative path; links leading out skipped."""
    fence = root.resolve()
    found: list[Path] = []
    for folder, subfolders, names in os.walk(root, followlinks=False):
        subfolders.sort()
        for name in sorted(names):
            if name != SERVER_INFO_FILE_GLOB:
                continue
            path = Path(folder) / name
            if path.is_symlink() and not path.resolve().is_relative_to(fence):
                problems.append(_warning(f"a link that leads outside {root}; not read", str(path)))
                continue
            found.append(path)
    return sorted(found, key=lambda path: path.relative_to(root).as_posix())


def _warning(
    message: str,
    file: str,
    rule: str = _RULE,
    field: str | None = None,
    value: str | None = None,
    expected: str | None = None,
) -> Problem:
    return Problem(
        Severity.WARNING,
        rule,
        message,
        files=(file,),
        field=field,
        value=value,
        expected=expected,
    )


class _Reader:
    """The fields of one file, collecting a problem per field of the wrong type."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.problems: list[Problem] = []

    def bad(self, field: str, value: Any, expected: str) -> None:
        self.problems.append(
            _warning(
                "not usable: the setting is unknown",
                self.file,
                field=field,
                value=show_value(value),
                expected=expected,
            )
        )

    def config(self, data: Any) -> dict[str, Any] | None:
        """The ``vllm_config`` object of the response (or the file itself when it is one)."""
        if not isinstance(data, dict):
            self.bad("(top level)", data, "an object: the JSON of GET /server_info")
            return None
        if "vllm_config" not in data and (
            "compilation_config" in data or "scheduler_config" in data
        ):
            return data
        config = data.get("vllm_config")
        if isinstance(config, dict):
            return config
        if isinstance(config, str):
            self.bad(
                "vllm_config",
                config,
                "an object: save GET /server_info?config_format=json, not the text form",
            )
        else:
            self.bad("vllm_config", config, "an object (the server's resolved config)")
        return None

    def section(self, config: dict[str, Any], name: str) -> dict[str, Any]:
        value = config.get(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.bad(f"vllm_config.{name}", value, "an object, or null")
            return {}
        return value

    def whole(self, section: dict[str, Any], path: str, key: str, least: int) -> int | None:
        value = section.get(key)
        if value is None:
            return None
        if _is_whole(value) and least <= value <= LARGEST_WHOLE_NUMBER:
            return int(value)
        self.bad(f"vllm_config.{path}.{key}", value, _COUNT if least == 1 else _SIZE)
        return None

    def sizes(self, section: dict[str, Any], path: str, key: str) -> tuple[int, ...] | None:
        """A list of capture sizes (whole numbers >= 0), or None with a problem."""
        sizes = section.get(key)
        if isinstance(sizes, list) and all(
            _is_whole(s) and 0 <= s <= LARGEST_WHOLE_NUMBER for s in sizes
        ):
            return tuple(int(s) for s in sizes)
        if sizes is not None:
            self.bad(
                f"vllm_config.{path}.{key}",
                sizes,
                f"a list of whole numbers from 0 to {LARGEST_WHOLE_NUMBER}, or null",
            )
        return None

    def environment(self, data: dict[str, Any]) -> tuple[str | None, str | None]:
        """``system_env``'s vLLM version and GPU models (texts; anything else a problem)."""
        system = data.get("system_env")
        if system is None:
            return None, None
        if not isinstance(system, dict):
            self.bad("system_env", system, "an object, or null")
            return None, None
        found: list[str | None] = []
        for key in ("vllm_version", "nvidia_gpu_models"):
            value = system.get(key)
            if isinstance(value, str) and value.strip():
                found.append(value.strip())
                continue
            if value is not None:
                self.bad(f"system_env.{key}", value, "a non-empty text, or null")
            found.append(None)
        return found[0], found[1]

    def settings(self, config: dict[str, Any], source: str) -> ServerSettings:
        compilation = self.section(config, "compilation_config")
        scheduler = self.section(config, "scheduler_config")
        speculative = self.section(config, "speculative_config")
        parallel = self.section(config, "parallel_config")
        where = "compilation_config"
        capture_sizes = self.sizes(compilation, where, "cudagraph_capture_sizes")
        method = speculative.get("method")
        if method is not None and not isinstance(method, str):
            self.bad("vllm_config.speculative_config.method", method, "a string, or null")
            method = None
        return ServerSettings(
            max_cudagraph_capture_size=self.whole(
                compilation, "compilation_config", "max_cudagraph_capture_size", 0
            ),
            cudagraph_capture_sizes=capture_sizes,
            max_num_seqs=self.whole(scheduler, "scheduler_config", "max_num_seqs", 1),
            max_num_batched_tokens=self.whole(
                scheduler, "scheduler_config", "max_num_batched_tokens", 1
            ),
            num_speculative_tokens=self.whole(
                speculative, "speculative_config", "num_speculative_tokens", 0
            ),
            method=method,
            source=source,
            max_decode_cudagraph_capture_requests=self.whole(
                compilation, where, "max_decode_cudagraph_capture_requests", 1
            ),
            decode_cudagraph_capture_request_sizes=self.sizes(
                compilation, where, "decode_cudagraph_capture_request_sizes"
            ),
            max_decode_cudagraph_capture_tokens=self.whole(
                compilation, where, "max_decode_cudagraph_capture_tokens", 1
            ),
            prefill_cudagraph_capture_token_sizes=self.sizes(
                compilation, where, "prefill_cudagraph_capture_token_sizes"
            ),
            max_prefill_cudagraph_capture_tokens=self.whole(
                compilation, where, "max_prefill_cudagraph_capture_tokens", 1
            ),
            data_parallel_size=self.whole(parallel, "parallel_config", "data_parallel_size", 1),
        )


def _is_whole(value: Any) -> bool:
    """A JSON whole number: an int, or a float with no fraction (vLLM writes ints; a hand-edited
    ``16.0`` means 16); never a bool."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
