"""lib/deploy/settings.py: the export's flags, the format's choices from the registry."""

from __future__ import annotations

import argparse

import pytest

from lib.deploy.registry import formats
from lib.deploy.settings import ExportSettings, format_names
from lib.flags import add_flags, from_arguments


def test_the_format_choices_are_the_registry() -> None:
    assert format_names() == tuple(f.name for f in formats())
    parser = argparse.ArgumentParser()
    add_flags(parser, ExportSettings)
    assert (
        from_arguments(ExportSettings, parser.parse_args(["--format", "sglang"])).format == "sglang"
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["--format", "tensorrt"])
