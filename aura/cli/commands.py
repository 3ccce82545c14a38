"""The command registry, as the CLI sees it: ``COMMANDS`` lives in ``aura.core.commands`` so that the
pipeline runner (``aura.pipeline``) can resolve a stage's command without importing the CLI."""

from __future__ import annotations

from aura.core.commands import COMMANDS, Command

__all__ = ["COMMANDS", "Command"]
