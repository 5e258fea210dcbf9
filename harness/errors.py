"""The errors a user's input can raise, below every module that raises them."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config value the harness cannot run with; the message names the key and the fix."""


# The range checks every stage's settings use (harness.config and the stages' own checks).
def positive_int(value, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key}={value!r}: expected a positive integer.")
    return value


def number(value, key: str, low: float, high: float | None = None, hint: str = "") -> float:
    if value != value or value < low or (high is not None and value > high) or value == float("inf"):
        span = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ConfigError(f"{key}={value!r}: expected a number {span}{hint}.")
    return float(value)
