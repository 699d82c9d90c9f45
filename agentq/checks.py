"""Scalar argument checks shared by config validation and the components' ``check_args``.

They sit on the ground floor so a critic or a search can refuse a bad value
without importing the config validator above it.
"""

from __future__ import annotations

import math
from typing import Any


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def require_int(key: str, value: Any, minimum: int, *, none_ok: bool = False, maximum: int | None = None) -> None:
    if none_ok and value is None:
        return
    if not is_int(value) or value < minimum or (maximum is not None and value > maximum):
        bound = f"in [{minimum}, {maximum}]" if maximum is not None else f">= {minimum}"
        raise ValueError(f"{key} must be an integer {bound}{' or null' if none_ok else ''}, got {value!r}")


def require_bool(key: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{key} must be true or false, got {value!r}")
