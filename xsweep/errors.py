"""Domain exceptions: errors a user can cause, each naming file, field and value."""

from __future__ import annotations


class XsweepError(Exception):
    """Base class of every error xsweep raises on purpose."""


class InputError(XsweepError):
    """Bad input: a file, a field inside it, the offending value and why.

    The CLI prints ``str(error)`` as its one line on stderr and exits with 2.
    """

    def __init__(self, file: str | None, field: str | None, value: object, reason: str):
        self.file = file
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = self.file or "<input>"
        if self.field:
            where += f": {self.field}"
        text = f"{where}: {self.reason}"
        if self.value is not None:
            text += f" (got {self.value!r})"
        return " ".join(text.split())  # always one line

    def at(self, file: str) -> InputError:
        """The same error, attributed to ``file`` (when it had none)."""
        return InputError(self.file or file, self.field, self.value, self.reason)
