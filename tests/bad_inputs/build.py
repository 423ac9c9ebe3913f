"""Writes the corpus of broken sweeps that ``tests/test_bad_input.py`` runs the tool on.

The output is committed; rerun ``uv run python tests/bad_inputs/build.py`` after changing a
case (it rewrites every case folder from scratch and leaves this script alone).

Every case starts from the same small healthy sweep in the layout `vllm bench sweep serve`
writes, then breaks it in one or a few places:

- anchors (``max_concurrency``) 1 and 4, K 0 and 3, 3 runs per (anchor, K);
- the seed's design: the global ``num_speculative_tokens`` is 3 for every run and the effective K
  is the one-range schedule ``[[1, 4, K]]``;
- one folder ``SERVE--k<K>-BENCH--c<anchor>/`` per (anchor, K) holding ``run=0.json``,
  ``run=1.json``, ``run=2.json`` and ``summary.json`` (the list of the same records),
  written with ``indent=4`` as vLLM does.

The case-to-problem table (which file, field and value each case must be reported with) lives
in ``tests/test_bad_input.py``, next to the assertions.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ANCHORS = (1, 4)
KS = (0, 3)
GLOBAL_K = 3
NUM_PROMPTS = 16
#: Output throughput (tok/s) per (anchor, K), three runs each: K=3 wins at 1, K=0 at 4.
THROUGHPUT = {
    (1, 0): (100.0, 101.0, 99.0),
    (1, 3): (150.0, 152.0, 148.0),
    (4, 0): (400.0, 404.0, 396.0),
    (4, 3): (300.0, 303.0, 297.0),
}

Combos = dict[str, list[Any]]


def combo(anchor: int, k: int) -> str:
    return f"SERVE--k{k}-BENCH--c{anchor}"


def odd_combo(anchor: int, k: int) -> str:
    return f'SERVE--{{"speculative_config": {{"k": {k}}}}}-BENCH--c{anchor}'


def record(anchor: int, k: int, run: int, throughput: float) -> dict[str, Any]:
    """One `vllm bench serve --save-result` record plus the keys the sweep adds."""
    fields: dict[str, Any] = {
        "backend": "vllm",
        "model_id": "tiny/model",
        "num_prompts": NUM_PROMPTS,
        "request_rate": "inf",
        "max_concurrency": anchor,
        "completed": NUM_PROMPTS,
        "failed": 0,
        "duration": round(NUM_PROMPTS * 64 / throughput, 3),
        "request_throughput": round(throughput / 64, 4),
        "request_goodput": None,
        "output_throughput": throughput,
        "median_tpot_ms": round(1000 * anchor / throughput, 3),
    }
    if k > 0:
        # vLLM writes spec_decode_* only when drafts happened: absent (not null) at K=0.
        fields["spec_decode_acceptance_length"] = 2.5
    fields["run_number"] = run
    fields["speculative_config"] = {
        "method": "ngram",
        "num_speculative_tokens": GLOBAL_K,
        "num_speculative_tokens_per_batch_size": [[1, max(ANCHORS), k]],
    }
    fields["_benchmark_name"] = f"c{anchor}"
    return fields


def healthy(
    anchors: tuple[int, ...] = ANCHORS, folder_name: Callable[[int, int], str] = combo
) -> Combos:
    """combo folder -> its run records, for the healthy sweep (at other anchors, or under
    other folder names, if asked)."""
    return {
        folder_name(anchor, k): [
            record(anchor, k, run, value)
            for run, value in enumerate(THROUGHPUT[(ANCHORS[index], k)])
        ]
        for index, anchor in enumerate(anchors)
        for k in KS
    }


def dump(data: Any) -> bytes:
    return (json.dumps(data, indent=4) + "\n").encode()


def render(combos: Combos, *, summary: bool = True) -> dict[str, bytes]:
    """relative path -> file content, in the sweep layout."""
    files = {}
    for folder, records in combos.items():
        for run, data in enumerate(records):
            files[f"{folder}/run={run}.json"] = dump(data)
        if summary:
            files[f"{folder}/summary.json"] = dump(records)
    return files


def set_field(combos: Combos, folder: str, run: int, name: str, value: Any) -> None:
    combos[folder][run][name] = value


# --------------------------------------------------------------------------- the cases


def truncated_json() -> dict[str, bytes]:
    """An interrupted sweep: the last combo has no summary.json and its last run file was cut
    off mid-write."""
    files = render(healthy())
    folder = combo(4, 3)
    del files[f"{folder}/summary.json"]
    whole = files[f"{folder}/run=2.json"]
    files[f"{folder}/run=2.json"] = whole[: len(whole) // 2]
    return files


def record_not_object() -> dict[str, bytes]:
    combos = healthy()
    combos[combo(1, 0)][2] = "server crashed"
    return render(combos)


def missing_anchor() -> dict[str, bytes]:
    combos = healthy()
    del combos[combo(1, 3)][1]["max_concurrency"]
    return render(combos)


def nan_objective() -> dict[str, bytes]:
    combos = healthy()
    set_field(combos, combo(4, 3), 1, "output_throughput", float("nan"))
    return render(combos)


def negative_objective() -> dict[str, bytes]:
    combos = healthy()
    set_field(combos, combo(1, 3), 0, "output_throughput", -150.0)
    return render(combos)


def string_objective() -> dict[str, bytes]:
    combos = healthy()
    set_field(combos, combo(4, 0), 2, "output_throughput", "n/a")
    return render(combos)


def failed_requests() -> dict[str, bytes]:
    combos = healthy()
    set_field(combos, combo(1, 3), 2, "failed", 3)
    set_field(combos, combo(1, 3), 2, "completed", NUM_PROMPTS - 3)
    return render(combos)


def incomplete_run() -> dict[str, bytes]:
    combos = healthy()
    set_field(combos, combo(4, 3), 0, "completed", 12)
    return render(combos)


def failure_file() -> dict[str, bytes]:
    """`--continue-on-error`: run 2 failed, so summary.json holds the two runs that worked."""
    combos = healthy()
    folder = combo(4, 0)
    del combos[folder][2]
    files = render(combos)
    files[f"{folder}/run=2.failure.json"] = dump(
        {"run_number": 2, "error": "RuntimeError: Server process died"}
    )
    return files


def mixed_global_k() -> dict[str, bytes]:
    combos = healthy()
    for record in combos[combo(4, 3)]:
        record["speculative_config"]["num_speculative_tokens"] = 5
    return render(combos)


def k_above_global() -> dict[str, bytes]:
    combos = healthy()
    for records in combos.values():
        for record in records:
            record["speculative_config"]["num_speculative_tokens"] = 2
    return render(combos)


def anchors_not_from_1() -> dict[str, bytes]:
    return render(healthy(anchors=(2, 4)))


def unequal_k_sets() -> dict[str, bytes]:
    combos = healthy()
    del combos[combo(4, 3)]
    return render(combos)


def too_few_runs() -> dict[str, bytes]:
    combos = healthy()
    del combos[combo(4, 0)][2]
    return render(combos)


def empty_folder() -> dict[str, bytes]:
    # git keeps no empty folders; the marker is no summary or run file, so the folder is empty
    # as far as the tool is concerned.
    return {".gitkeep": b""}


def summary_not_list() -> dict[str, bytes]:
    """A hand-assembled summary.json holding one record instead of the list of records."""
    combos = healthy()
    files = render(combos)
    files[f"{combo(1, 0)}/summary.json"] = dump(combos[combo(1, 0)][0])
    return files


def odd_folder_names() -> dict[str, bytes]:
    """Combo names taken from a params file's dict: quotes, braces and spaces survive."""
    combos = healthy(folder_name=odd_combo)
    set_field(combos, odd_combo(4, 3), 1, "output_throughput", -300.0)
    return render(combos)


def null_goodput() -> dict[str, bytes]:
    """Healthy, but the bench ran without --goodput: request_goodput is null everywhere."""
    return render(healthy())


def invalid_utf8() -> dict[str, bytes]:
    files = render(healthy())
    path = f"{combo(1, 3)}/summary.json"
    files[path] = files[path].replace(b"tiny/model", b"tiny/mod\xffel", 1)
    return files


def three_problems() -> dict[str, bytes]:
    """Three different problems in three folders: all must be reported at once."""
    combos = healthy()
    set_field(combos, combo(1, 3), 0, "output_throughput", float("nan"))
    set_field(combos, combo(4, 0), 1, "failed", 2)
    set_field(combos, combo(4, 0), 1, "completed", NUM_PROMPTS - 2)
    set_field(combos, combo(4, 3), 2, "max_concurrency", "four")
    return render(combos)


def huge_numbers() -> dict[str, bytes]:
    """Numbers past every limit: 2^63 does not fit a 64-bit column, 2^63 - 1 does but is no
    batch size, K or run number."""
    combos = healthy()
    set_field(combos, combo(1, 3), 0, "max_concurrency", 2**63)
    combos[combo(4, 3)][1]["speculative_config"]["num_speculative_tokens_per_batch_size"] = [
        [1, 4, 2**63 - 1]
    ]
    combos[combo(1, 0)][2]["speculative_config"]["num_speculative_tokens"] = 2**64 - 1
    set_field(combos, combo(4, 0), 0, "run_number", 2**63)
    files = render(combos)
    files[f"{combo(4, 0)}/run=99999999999999999999.failure.json"] = dump({"error": "x"})
    return files


#: Health fields that are no count, each in its own run: (combo, run, field, value).
BAD_HEALTH = (
    (combo(1, 0), 0, "failed", "5"),
    (combo(1, 0), 1, "failed", True),
    (combo(1, 3), 0, "failed", [1]),
    (combo(1, 3), 1, "failed", -1),
    (combo(4, 0), 0, "completed", "90"),
    (combo(4, 3), 2, "completed", None),
)


def bad_health_fields() -> dict[str, bytes]:
    """Each would pass the health gate as healthy if it were taken as it is."""
    combos = healthy()
    for folder, run, name, value in BAD_HEALTH:
        set_field(combos, folder, run, name, value)
    return render(combos)


def pooled_servers() -> dict[str, bytes]:
    """The K=3 servers got K on their command line, so their records hold no
    speculative_config: they read as K=0, beside the real K=0 runs."""
    combos = healthy()
    for anchor in ANCHORS:
        for record in combos[combo(anchor, 3)]:
            del record["speculative_config"]
            del record["spec_decode_acceptance_length"]
    return render(combos)


def replicas_of_two_configurations() -> dict[str, bytes]:
    """K=3 measured on two server replicas (``k3-seed=0``, ``k3-seed=1``: one configuration)
    and on a server that also set ``max_num_seqs`` (another configuration, though its K is 3
    too): the replicas are one cell, the third server's runs must not join it."""
    combos = healthy()
    for anchor in ANCHORS:
        runs = combos.pop(combo(anchor, 3))
        servers = (
            ("k3-seed=0", {}),
            ("k3-seed=1", {}),
            ("k3-max_num_seqs=8-seed=0", {"max_num_seqs": 8}),
        )
        for offset, (serve, extra) in enumerate(servers):
            # Each server a little faster than the last: records of two servers never match.
            combos[f"SERVE--{serve}-BENCH--c{anchor}"] = [
                {**run, **extra, "output_throughput": run["output_throughput"] + offset}
                for run in runs
            ]
    return render(combos)


def copied_combo_folder() -> dict[str, bytes]:
    """A combo with two runs, copied with `cp -r`: counted twice it would pass --min-runs 3."""
    combos = healthy()
    del combos[combo(4, 3)][2]
    files = render(combos)
    for relative, content in list(files.items()):
        if relative.startswith(combo(4, 3) + "/"):
            files[relative.replace(combo(4, 3), combo(4, 3) + ".bak", 1)] = content
    return files


def stale_summary() -> dict[str, bytes]:
    """A sweep run again into its folders with one more run (`--num-runs 4`), stopped before
    it rewrote the last combo's summary.json: the valid old summary lacks run 3, whose file
    beside it failed requests (issue 38: it was read from the summary alone, exit 0)."""
    files = render(healthy())
    extra = record(4, 3, 3, THROUGHPUT[(4, 3)][0])
    extra.update(failed=4, completed=NUM_PROMPTS - 4)
    files[f"{combo(4, 3)}/run=3.json"] = dump(extra)
    return files


def huge_engine_settings() -> dict[str, bytes]:
    """Serve params beyond every count (issue 38: taken, printed as a 301-digit range, then
    dropped by the result reader): a capture ceiling of 1e300, a max_num_seqs of 2^31."""
    combos = healthy()
    for run in range(3):
        set_field(combos, combo(4, 3), run, "max_cudagraph_capture_size", 1e300)
        set_field(combos, combo(4, 0), run, "max_num_seqs", 2**31)
    return render(combos)


def context_sweep() -> Combos:
    """The healthy sweep measured at two prompt lengths (``random_input_len`` 512 and 8192,
    the same throughputs: a context axis whose points agree)."""
    combos: Combos = {}
    for prompt in (512, 8192):
        for folder, records in healthy().items():
            for data in records:
                data["random_input_len"] = prompt
            combos[f"{folder}-p{prompt}"] = records
    return combos


def bad_prompt_lengths() -> dict[str, bytes]:
    """Prompt lengths no command accepts, one run each at 8192 tokens: NaN, an infinity, a
    negative, zero, one above 2^30 tokens and one written as text that is no number (issue 22)."""
    combos = context_sweep()
    damage = [
        (combo(4, 3), 0, math.nan),
        (combo(4, 3), 1, math.inf),
        (combo(4, 0), 0, -512),
        (combo(4, 0), 1, 0),
        (combo(1, 0), 0, 3e9),
        # Text that is no number ("8192" as text is read as 8192, as the seed reads numbers).
        (combo(1, 3), 0, "8k"),
    ]
    for folder, run, value in damage:
        set_field(combos, f"{folder}-p8192", run, "random_input_len", value)
    return render(combos)


CASES: dict[str, Callable[[], dict[str, bytes]]] = {
    "bad-prompt-lengths": bad_prompt_lengths,
    "truncated-json": truncated_json,
    "record-not-object": record_not_object,
    "missing-anchor": missing_anchor,
    "nan-objective": nan_objective,
    "negative-objective": negative_objective,
    "string-objective": string_objective,
    "failed-requests": failed_requests,
    "incomplete-run": incomplete_run,
    "failure-file": failure_file,
    "mixed-global-k": mixed_global_k,
    "k-above-global": k_above_global,
    "anchors-not-from-1": anchors_not_from_1,
    "unequal-k-sets": unequal_k_sets,
    "too-few-runs": too_few_runs,
    "empty-folder": empty_folder,
    "summary-not-list": summary_not_list,
    "odd-folder-names": odd_folder_names,
    "null-goodput": null_goodput,
    "invalid-utf8": invalid_utf8,
    "three-problems": three_problems,
    "huge-numbers": huge_numbers,
    "bad-health-fields": bad_health_fields,
    "pooled-servers": pooled_servers,
    "copied-combo-folder": copied_combo_folder,
    "stale-summary": stale_summary,
    "huge-engine-settings": huge_engine_settings,
    "replicas-of-two-configurations": replicas_of_two_configurations,
}


def main() -> None:
    for name, build in CASES.items():
        case = HERE / name
        if case.exists():
            shutil.rmtree(case)
        for relative, content in build().items():
            path = case / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)


if __name__ == "__main__":
    main()
