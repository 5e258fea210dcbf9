"""The errors a user's input can raise, below every module that raises them."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config value the harness cannot run with; the message names the key and the fix."""
