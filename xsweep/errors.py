"""Domain exceptions: errors a user can cause, each naming file, field and value."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# A message stays one readable line whatever the input: long parts are cut.
_MAX_NAME, _MAX_REASON, _MAX_VALUE = 200, 400, 80
#: The longest reason a message shows whole (a longer one is cut).
MAX_REASON = _MAX_REASON


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


def close_names(value: object, choices: Iterable[str]) -> list[str]:
    """The ``choices`` closest to ``value`` by :func:`difflib.get_close_matches`, ignoring
    case: the closest, and up to two more as close as it; each as ``choices`` spell it."""
    if not isinstance(value, str) or not value.strip():
        return []
    spelled: dict[str, str] = {}
    for choice in choices:
        spelled.setdefault(str(choice).lower(), str(choice))
    word = value.strip().lower()
    found = difflib.get_close_matches(word, list(spelled), n=3, cutoff=0.6)
    if not found:
        return []
    best = difflib.SequenceMatcher(None, word, found[0]).ratio()
    return [spelled[key] for key in found
            if difflib.SequenceMatcher(None, word, key).ratio() >= best - 1e-9]


def did_you_mean(value: object, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the choice closest to ``value`` (``'x' or 'y'`` when two
    are as close), or ``""`` when none is close: the tail of the reason of an error about
    an unknown name."""
    return suggestion(close_names(value, choices))


def suggestion(names: Iterable[str]) -> str:
    """``"; did you mean 'x' or 'y'?"`` for ``names``, or ``""`` for none."""
    names = list(names)
    return "; did you mean " + " or ".join(map(repr, names)) + "?" if names else ""


class XsweepError(Exception):
    """Base class of every error xsweep raises on purpose."""


class CheckFailed(XsweepError):
    """Valid input that fails a check the command makes (a plan that does not fit in
    memory, say): the CLI prints the one-line message on stderr and exits with 1."""

    def __init__(self, message: str):
        super().__init__(_one_line(message))


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
