"""Command-line flags of the settings dataclasses: every flag is spelled once, on its field.

A settings dataclass declares each of its flags in the field's metadata with :func:`flag` (the
flag's name and help text); everything else is read from the field itself:

- the default: what a parse gives when the flag is absent, and the ``(default: ...)`` of the
  help, printed once;
- the type: ``int``, ``float`` and ``str`` values, ``bool`` for a switch, ``X | None`` for a
  value that may be left out, a ``Literal`` for a choice, ``tuple[int, ...]`` for a
  comma-separated list (or a repeatable flag with ``repeat=True``).

So the parser (:func:`add_flags`), the way back (:func:`given`, :func:`from_arguments`), the
command line that reproduces a value (:func:`to_arguments`) and the name an error message gives
a setting (:func:`flag_name`) cannot disagree. The module imports only the standard library:
``tune-spec-k --help`` must not wait for Polars.

>>> from dataclasses import dataclass, field
>>> @dataclass(frozen=True)
... class Example:
...     runs: int = field(default=3, metadata=flag("--runs", "runs per cell"))
...     strict: bool = field(default=False, metadata=flag("--strict", "fail on warnings"))
>>> parser = argparse.ArgumentParser(prog="example")
>>> add_flags(parser, Example)
>>> from_arguments(Example, parser.parse_args(["--runs", "5"]))
Example(runs=5, strict=False)
>>> to_arguments(Example(runs=5, strict=True))
['--runs=5', '--strict']
>>> flag_name(Example, "runs")
'--runs'
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import string
import types
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from lib.keys import LARGEST_WHOLE_NUMBER, whole_number_text

__all__ = [
    "Flag",
    "add_flags",
    "flag",
    "flag_name",
    "flag_of",
    "from_arguments",
    "given",
    "int_list",
    "to_arguments",
    "whole_number_argument",
]

_KEY = "flag"
T = TypeVar("T")


@dataclass(frozen=True)
class Flag:
    """How one settings field appears on the command line.

    ``in_seed`` is False for flags the seed (vLLM PR #49163) does not have: their help says so.
    ``parse`` turns one command-line value into a field value where the type cannot say how.
    ``repeat``: the flag may be given several times, each adding one value to a tuple.
    ``echo``: whether :func:`to_arguments` writes the flag ``"always"``, or only when its value
    differs from the default (``"changed"``; flags with a ``None`` or ``False`` default are
    written only when set anyway).
    """

    name: str
    help: str
    in_seed: bool = True
    metavar: str | None = None
    parse: Callable[[str], Any] | None = None
    repeat: bool = False
    echo: Literal["always", "changed"] = "always"


def flag(
    name: str,
    help: str,
    *,
    in_seed: bool = True,
    metavar: str | None = None,
    parse: Callable[[str], Any] | None = None,
    repeat: bool = False,
    echo: Literal["always", "changed"] = "always",
) -> dict[str, Flag]:
    """The metadata of a field that is a command-line flag: ``field(default=...,
    metadata=flag("--name", "help"))``."""
    return {_KEY: Flag(name, help, in_seed, metavar, parse, repeat, echo)}


def whole_number_argument(text: str) -> int:
    """A flag's whole number, no larger in size than :data:`~lib.keys.LARGEST_WHOLE_NUMBER`
    (the limit every command applies to batch sizes and K; a run count or a seed has no use
    for more): ASCII digits after an optional ``-``, read by the one parser of whole numbers
    (:func:`~lib.keys.whole_number_text`). The sign is left to the setting's own check, which
    knows what it means.

    >>> whole_number_argument("3"), whole_number_argument("-1")
    (3, -1)
    >>> whole_number_argument("100000000000000000000000")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: '100000000000000000000000': expected a whole number up to 2147483647
    >>> whole_number_argument("³")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: '³': expected a whole number
    """
    negative = text.startswith("-")
    digits = text[1:] if negative else text
    value = whole_number_text(digits)
    if value is not None:
        return -value if negative else value
    if digits and not digits.strip(string.digits):  # ASCII digits all, past the limit
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a whole number up to {LARGEST_WHOLE_NUMBER}"
        )
    raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number")


def int_list(text: str) -> tuple[int, ...]:
    """A comma-separated list of whole numbers, as ``--ks 0,1,3,7`` takes it.

    >>> int_list("0, 1,3")
    (0, 1, 3)
    """
    try:
        values = tuple(
            whole_number_argument(part) for part in text.replace(" ", "").split(",") if part
        )
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected comma-separated whole numbers up to {LARGEST_WHOLE_NUMBER},"
            " e.g. 0,1,3,7"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError(f"{text!r}: expected at least one number")
    return values


def _flagged(cls: type) -> list[dataclasses.Field[Any]]:
    return [field for field in dataclasses.fields(cls) if _KEY in field.metadata]


def _spec(field: dataclasses.Field[Any]) -> Flag:
    spec = field.metadata[_KEY]
    assert isinstance(spec, Flag)
    return spec


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None if field.default is dataclasses.MISSING else field.default


def _shape(hint: Any) -> tuple[Any, tuple[Any, ...]]:
    """(the value type, the choices) of a field type: ``X | None`` is X, a ``Literal`` gives
    its values as choices and the type of the first, ``tuple[X, ...]`` is ``tuple``."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    if typing.get_origin(hint) is Literal:
        choices = typing.get_args(hint)
        return type(choices[0]), choices
    origin = typing.get_origin(hint)
    return (origin if origin is not None else hint), ()


def _item_type(hint: Any) -> Any:
    """The type of one value of a repeatable flag: X of ``tuple[X, ...]``."""
    return typing.get_args(hint)[0]


def _shown(value: Any) -> str:
    if isinstance(value, tuple | list):
        return ",".join(str(item) for item in value)
    return str(value)


def flag_of(cls: type, name: str) -> Flag:
    """How field ``name`` of ``cls`` appears on the command line (its flag's name and help),
    for a front end that adds that flag by hand (``plan --design``, which also reads a file)."""
    return _spec(next(field for field in dataclasses.fields(cls) if field.name == name))


def flag_name(cls: type, name: str) -> str:
    """The flag of field ``name`` of ``cls``: what error messages call the setting."""
    return flag_of(cls, name).name


#: How a flag of each type is read, where not by the type itself.
_PARSERS: dict[Any, Callable[[str], Any]] = {int: whole_number_argument, tuple: int_list}


def add_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    *,
    only: Collection[str] | None = None,
    choices: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """Add the flags of ``cls``'s fields (those named in ``only``, when given) to ``parser``.
    ``choices``: per field, the values it takes where they come from a registry above the
    settings (``--format``: :func:`lib.deploy.registry.format_names`) rather than a ``Literal``.

    An absent flag leaves no attribute in the parsed namespace, so :func:`given` tells what the
    user typed apart from the defaults; the help states each default once.
    """
    hints = _hints(cls)
    for field in _flagged(cls):
        if only is not None and field.name not in only:
            continue
        spec = _spec(field)
        kind, allowed = _shape(hints[field.name])
        if choices is not None and field.name in choices:
            allowed = tuple(choices[field.name])
        default = _default(field)
        text = ("(not in the seed) " if not spec.in_seed else "") + spec.help
        if default not in (None, False, (), {}):
            text += f" (default: {_shown(default)})"
        options: dict[str, Any] = {
            "dest": field.name,
            "default": argparse.SUPPRESS,
            "help": text.replace("%", "%%"),
        }
        if kind is bool:
            options["action"] = "store_true"
        else:
            if spec.repeat:
                options["action"] = "append"
                item = _item_type(hints[field.name])
                options["type"] = spec.parse or _PARSERS.get(item, item)
            else:
                options["type"] = spec.parse or _PARSERS.get(kind, kind)
            if allowed:
                options["choices"] = allowed
            else:
                options["metavar"] = spec.metavar or spec.name.lstrip("-").replace("-", "_").upper()
        parser.add_argument(spec.name, **options)


def given(cls: type, arguments: argparse.Namespace) -> dict[str, Any]:
    """The values of ``cls``'s fields whose flags were given, converted to the field types."""
    hints = _hints(cls)
    values: dict[str, Any] = {}
    for field in _flagged(cls):
        if not hasattr(arguments, field.name):
            continue
        value = getattr(arguments, field.name)
        kind, _ = _shape(hints[field.name])
        if kind is tuple and isinstance(value, list):
            value = tuple(value)
        elif kind is Mapping and isinstance(value, list):
            value = dict(value)
        values[field.name] = value
    return values


def from_arguments(cls: type[T], arguments: argparse.Namespace, **fixed: Any) -> T:
    """An instance of ``cls`` from a parsed namespace: given flags, the defaults for the rest,
    and ``fixed`` for fields that are not flags."""
    return cls(**given(cls, arguments), **fixed)


def to_arguments(settings: Any, *, only: Collection[str] | None = None) -> list[str]:
    """The flags that give ``settings`` back, as ``--name=value`` (a switch bare): first every
    flag echoed always, then the others that are set, each group in field order."""
    always: list[str] = []
    changed: list[str] = []
    for field in _flagged(type(settings)):
        if only is not None and field.name not in only:
            continue
        spec = _spec(field)
        value = getattr(settings, field.name)
        default = _default(field)
        if value is True:
            changed.append(spec.name)
        elif value is None or value is False:
            continue
        elif spec.echo == "always" and default not in (None, False):
            always.append(f"{spec.name}={_shown(value)}")
        elif value != default:
            changed.append(f"{spec.name}={_shown(value)}")
    return always + changed
