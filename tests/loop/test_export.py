"""lib/loop/export.py: the `export` subcommand's path: any schedule file through the one reader
and the registry; a result in memory gives the very text `export -o` writes."""

from __future__ import annotations

import json
from pathlib import Path

from lib.deploy.settings import ExportSettings
from lib.loop.export import export_data, export_file, export_text


def test_a_file_is_read_and_exported(tmp_path: Path) -> None:
    path = tmp_path / "in.json"
    path.write_text(
        json.dumps(
            {
                "num_speculative_tokens": 9,
                "num_speculative_tokens_per_batch_size": [[1, 63, 7], [64, 256, 0]],
            }
        )
    )
    exported, problems = export_file(path, ExportSettings(format="vllm"))
    assert problems == [] and exported is not None
    assert exported.config["num_speculative_tokens"] == 9
    assert exported.text() == json.dumps(dict(exported.config), indent=2) + "\n"


def test_an_unreadable_file_stops_before_the_format(tmp_path: Path) -> None:
    exported, problems = export_file(tmp_path / "absent.json", ExportSettings(format="vllm"))
    assert exported is None and [p.rule for p in problems] == ["unreadable-file"]


def test_a_result_in_memory_gives_the_files_text() -> None:
    data = {"num_speculative_tokens_per_batch_size": [[1, 63, 7], [64, 256, 0]]}
    exported, _ = export_data(data, ExportSettings(format="trtllm"))
    text, problems = export_text(data, ExportSettings(format="trtllm"))
    assert problems == [] and exported is not None and text == exported.text()
    text, problems = export_text({"other": 1}, ExportSettings(format="trtllm"))
    assert text is None and problems[0].rule == "no-schedule"
