"""Domain exceptions: errors a user can cause, each naming file, field and value."""

from __future__ import annotations

# A message stays one readable line whatever the input: long parts are cut.
_MAX_NAME, _MAX_REASON, _MAX_VALUE = 200, 400, 80


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _escaped(text: str) -> str:
    """``text`` with every character that prints as nothing or moves the cursor (a
    byte-order mark, a zero-width space, a control character) written as its Python
    escape, so that a message shows what the file holds."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def _one_line(text: str) -> str:
    """Prose (a file name, a field, a reason) on one line: runs of white space become
    one space, and invisible characters are escaped."""
    return _escaped(" ".join(text.split()))


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
        # Always one line. The value is quoted as Python writes it (repr), its spaces kept:
        # a trailing space or a doubled one may be the very error it shows.
        where = _clip(_one_line(self.file or "<input>"), _MAX_NAME)
        if self.field:
            where += f": {_clip(_one_line(self.field), _MAX_NAME)}"
        text = f"{where}: {_clip(_one_line(self.reason), _MAX_REASON)}"
        if self.value is not None:
            text += f" (got {_clip(_escaped(repr(self.value)), _MAX_VALUE)})"
        return text

    def at(self, file: str) -> InputError:
        """The same error, attributed to ``file`` (when it had none)."""
        return InputError(self.file or file, self.field, self.value, self.reason)
