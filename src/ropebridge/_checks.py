"""Small validators shared by the library: each raises ``ValueError`` naming the bad key and value (an integer of
more than ``SHOWN_DIGITS`` digits by its first digits and its length: ``shown``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


SHOWN_DIGITS = 24


def shown(value: Any) -> str:
    """``repr(value)``, an integer of more than ``SHOWN_DIGITS`` digits as its first digits and its length
    (``100000...(401 digits)``): a message stays one readable line whatever was typed."""
    text = repr(value)
    if isinstance(value, int) and len(text.lstrip("-")) > SHOWN_DIGITS:
        return f"{text[:8]}...({len(text.lstrip('-'))} digits)"
    return text


def require(params: Mapping[str, Any], key: str, what: str) -> Any:
    """Return ``params[key]``; refuse a missing or ``None`` value, naming ``what`` needs it."""
    value = params.get(key)
    if value is None:
        raise ValueError(f"{what} requires '{key}', which is missing")
    return value


def number(key: str, value: Any) -> float:
    """``value`` as a finite float, or ``ValueError`` naming ``key``."""
    if isinstance(value, bool):
        raise ValueError(f"{key} must be a number, got {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be a number, got {shown(value)}") from None
    except OverflowError:  # an int beyond float's range
        raise ValueError(f"{key} must be finite, got {shown(value)}") from None
    if not math.isfinite(out):
        raise ValueError(f"{key} must be finite, got {value!r}")
    return out


def positive(key: str, value: Any) -> float:
    out = number(key, value)
    if out <= 0:
        raise ValueError(f"{key} must be > 0, got {value!r}")
    return out


def at_least(key: str, value: Any, low: float) -> float:
    out = number(key, value)
    if out < low:
        raise ValueError(f"{key} must be >= {low:g}, got {value!r}")
    return out


def positive_int(key: str, value: Any, *, even: bool = False, high: int | None = None) -> int:
    """``value`` as an int > 0 (and even, and <= ``high``, where asked)."""
    if isinstance(value, bool) or not isinstance(value, (int,)) and not (
        isinstance(value, float) and value.is_integer()
    ):
        raise ValueError(f"{key} must be an integer, got {shown(value)}")
    out = int(value)
    if out <= 0:
        raise ValueError(f"{key} must be > 0, got {shown(value)}")
    if high is not None and out > high:
        raise ValueError(f"{key} must be <= {high}, got {shown(value)}")
    if even and out % 2:
        raise ValueError(f"{key} must be even, got {shown(value)}")
    return out


def non_negative_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} must be an integer, got {shown(value)}")
    if value < 0:
        raise ValueError(f"{key} must be >= 0, got {shown(value)}")
    return value


def choice(key: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{key} must be one of {', '.join(allowed)}; got {value!r}")
    return value
