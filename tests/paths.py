"""Where the tests find the repository's data (every test file imports it from here, wherever
it lies below tests/)."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
SAMPLE_SWEEPS = REPO / "data" / "sample_sweeps"
VALIDATION_SWEEP = REPO / "data" / "validation_sweeps" / "real-cpu-tiny-ngram"
BAD_INPUTS = TESTS / "bad_inputs"
NOTEBOOK = REPO / "notebooks" / "tune_spec_k.py"
#: Real measured sweeps live beside the repository (never copied into it), see its README.md.
REAL_DATA = REPO.parent / "shared" / "data" / "real"
