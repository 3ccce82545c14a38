"""The one exception type for mistakes a user can fix.

``AuraError`` carries a message already in the user's language (see ``aura.core.i18n``). The CLI prints
it without a traceback (``--debug`` shows one) and exits with status 2. Anything else that escapes is
a bug in Aura and is shown with its traceback.
"""

from __future__ import annotations


class AuraError(Exception):
    """A user-facing error: what is wrong, where (file, line, field), and how to fix it."""

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int = 2):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n{self.hint}"


class AbortReported(KeyboardInterrupt):
    """A second Ctrl+C the command has already reported (what was lost, where to resume): the CLI exits
    130 without adding its generic "Interrupted." line."""
