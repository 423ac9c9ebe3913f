"""``python -m lib.cli``: the same as ``tune-spec-k``."""

from lib.cli.main import run

run()
