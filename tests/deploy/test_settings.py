"""lib/deploy/settings.py: the export's flags; ``--format``'s choices come from the registry,
given to the parser by the command line (the settings sit below the formats)."""

from __future__ import annotations

import argparse

import pytest

from lib.deploy.registry import format_names
from lib.deploy.settings import ExportSettings
from lib.flags import add_flags, from_arguments


def test_the_format_choices_are_the_registrys_where_the_parser_is_given_them() -> None:
    parser = argparse.ArgumentParser()
    add_flags(parser, ExportSettings, choices={"format": format_names()})
    assert (
        from_arguments(ExportSettings, parser.parse_args(["--format", "sglang"])).format == "sglang"
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["--format", "tensorrt"])


def test_without_choices_any_format_parses_and_the_registry_refuses_it() -> None:
    # The settings alone do not know the formats: an unknown name reaches export(), whose
    # unknown-format error names the registry's formats.
    parser = argparse.ArgumentParser()
    add_flags(parser, ExportSettings)
    assert from_arguments(ExportSettings, parser.parse_args(["--format", "x"])).format == "x"


def test_the_export_command_offers_exactly_the_registrys_formats(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from lib.cli.main import main

    with pytest.raises(SystemExit):
        main(["export", "--help"])
    shown = capsys.readouterr().out
    assert "{" + ",".join(format_names()) + "}" in shown
