"""Every module of lib/ has its test file, named after it, at the same place below tests/."""

from __future__ import annotations

from paths import REPO, TESTS

#: Modules with nothing of their own to test: package docstrings and `python -m lib.cli`.
WITHOUT_TESTS = {"__init__.py", "__main__.py"}


def test_every_module_has_a_test_file_named_after_it() -> None:
    lib = REPO / "lib"
    missing = [
        str(module.relative_to(REPO))
        for module in sorted(lib.rglob("*.py"))
        if module.name not in WITHOUT_TESTS
        and not (TESTS / module.parent.relative_to(lib) / f"test_{module.name}").is_file()
    ]
    assert not missing, f"no test file for {missing}"


def test_every_test_file_below_a_folder_of_lib_tests_a_module() -> None:
    lib = REPO / "lib"
    orphans = [
        str(test.relative_to(REPO))
        for folder in ("deploy", "loop", "present", "cli", "app")
        for test in sorted((TESTS / folder).rglob("test_*.py"))
        if not (lib / test.parent.relative_to(TESTS) / test.name.removeprefix("test_")).is_file()
    ]
    assert not orphans, orphans
