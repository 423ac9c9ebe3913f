"""How every number tune-spec-k shows is written: probabilities, percents, throughputs.

One function per kind, used by the CLI's lines, the app's text and the verdict, so that one
value never reads two ways (0.7664 as "0.76" in one place and "0.77" in another).
"""

from __future__ import annotations

import math

__all__ = [
    "OBJECTIVE_DECIMALS",
    "PROBABILITY_DECIMALS",
    "json_float",
    "objective_text",
    "percent_text",
    "probability_text",
    "signed_percent_text",
]

#: Every probability is shown to this many decimals, rounded down.
PROBABILITY_DECIMALS = 2
#: Every objective value (a throughput in tok/s, a latency in ms, a count of requests) is
#: shown to this many decimals, as the seed prints its medians; the app's tables round to it.
OBJECTIVE_DECIMALS = 2


def probability_text(value: float | None) -> str:
    """A probability to 2 decimals, rounded down: a P of 0.899 reads 0.89, never "0.90" beside
    "no K reaches 0.9", and 0.9996 reads 0.99, never "1.00" (a pick is never shown as certain).
    The guard against float noise keeps 0.29 (0.28999... in binary) reading 0.29.

    >>> probability_text(0.899), probability_text(0.29), probability_text(0.9996)
    ('0.89', '0.29', '0.99')
    >>> probability_text(1.0), probability_text(0.0), probability_text(None)
    ('1.00', '0.00', 'unknown')
    """
    if value is None:
        return "unknown"
    scale = 10**PROBABILITY_DECIMALS
    return f"{math.floor(round(value * scale, 6)) / scale:.{PROBABILITY_DECIMALS}f}"


def percent_text(value: float, decimals: int = 1) -> str:
    """A size in percent, unsigned (a loss, a share), never ``-0.0%``.

    >>> percent_text(16.77), percent_text(-0.04), percent_text(3, decimals=0)
    ('16.8%', '0.0%', '3%')
    """
    text = f"{value:.{decimals}f}"
    return ("0" + text[2:] if text.startswith("-0") and float(text) == 0 else text) + "%"


def signed_percent_text(value: float | None, decimals: int = 2) -> str:
    """A change in percent with its sign (``+9.65%``, ``-1.20%``); ``n/a`` when unknown.

    >>> signed_percent_text(9.649), signed_percent_text(-1.2), signed_percent_text(None)
    ('+9.65%', '-1.20%', 'n/a')
    """
    return "n/a" if value is None else f"{value:+.{decimals}f}%"


def objective_text(value: float) -> str:
    """An objective value (a median throughput, a latency, requests in flight) as the seed
    prints its medians: :data:`OBJECTIVE_DECIMALS` decimals (``%.2f``: the nearest of the
    float as stored, so 1911.135, stored as 1911.13499..., reads 1911.13).

    >>> objective_text(93.0649), objective_text(605.0), objective_text(1911.135)
    ('93.06', '605.00', '1911.13')
    """
    return f"{value:.{OBJECTIVE_DECIMALS}f}"


def json_float(value: float | None, digits: int = 4) -> float | None:
    """A derived float for the JSON, rounded so that the last bit of a platform's log or sum
    cannot change the bytes; None where not finite.

    >>> json_float(0.123456789), json_float(float("nan")), json_float(None)
    (0.1235, None, None)
    """
    return round(value, digits) if value is not None and math.isfinite(value) else None
