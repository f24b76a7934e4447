"""User-facing errors: raised for bad input, rendered by the CLI as one line, exit code 2."""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix (bad recipe, missing file, wrong checkpoint).

    `location` is `file:line:col` (or just a path) and `field` a dotted field path, both optional.
    The CLI prints `location: field: message (allowed: …)` and exits 2, without a traceback.
    """

    def __init__(
        self,
        message: str,
        *,
        location: str | None = None,
        field: str | None = None,
        allowed: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.location = location
        self.field = field
        self.allowed = allowed

    def __str__(self) -> str:
        parts = [p for p in (self.location, self.field) if p]
        text = self.message if not self.allowed else f"{self.message} (allowed: {self.allowed})"
        return ": ".join([*parts, text])
