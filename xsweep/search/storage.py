"""Where a study lives: the default SQLite file or any Optuna RDB storage URL, opened with
its password kept out of every message.

A storage URL may carry a password (``postgresql://user:secret@host/db``). xsweep shows
a URL only through :func:`masked` and an error only through :func:`hide_password`, and
writes the URL nowhere: not in study attributes, summaries or plans.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import re
import signal
import threading
import time
from pathlib import Path
from urllib.parse import unquote

from xsweep.errors import InputError

#: The option naming a storage, as error messages cite it.
OPTION = "--storage"
#: ``scheme://user:password@`` (the password may be empty; user names hold no ``:`` or ``@``).
_CREDENTIALS = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*:)(?P<password>[^@\s]*)@")
#: Seconds a database server may take to accept a connection before the URL is refused.
CONNECT_TIMEOUT_S = 10
#: Tries at opening a storage whose tables another process is creating at that moment.
SCHEMA_ATTEMPTS = 5


def password_of(url: str) -> str | None:
    """The password part of ``url``, as written (percent-encoded), or None."""
    found = _CREDENTIALS.search(url)
    return found.group("password") if found and found.group("password") else None


def masked(url: str) -> str:
    """``url`` with its password replaced by ``***``."""
    return _CREDENTIALS.sub(lambda m: f"{m.group('head')}***@", url)


def hide_password(text: str, url: str) -> str:
    """``text`` (an error message, say) with every form of ``url``'s password replaced by
    ``***``: drivers quote it decoded, URLs percent-encoded."""
    password = password_of(url)
    text = masked(text)
    if password:
        for form in {password, unquote(password)}:
            text = text.replace(form, "***")
    return text


#: The file of a study's default storage, in the study's folder.
STUDY_DB = "study.db"
#: ``sqlite:///<path>``, with an optional driver (``sqlite+pysqlite``); the query after ``?``.
_SQLITE = re.compile(r"^sqlite(\+[A-Za-z0-9_]+)?:///(?P<path>[^?]*)")


def sqlite_file(url: str) -> Path | None:
    """The file of an SQLite storage URL, as SQLAlchemy reads it (percent-decoded, the
    query cut off); None for another database or an in-memory one."""
    found = _SQLITE.match(url)
    if found is None:
        return None
    path = unquote(found.group("path"))
    return None if not path or path == ":memory:" or "\0" in path else Path(path)


@contextlib.contextmanager
def interrupts_deferred():
    """Hold Ctrl-C back until the block is done, then raise it as it would have been.

    A signal mask would not do: another thread may take the signal for the process.
    Blocks nest: an inner one hands a held interrupt to the outer one's handler.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list = []
    previous = signal.signal(signal.SIGINT, lambda *received: held.append(received))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        if callable(previous):
            previous(*held[0])
        elif previous != signal.SIG_IGN:
            raise KeyboardInterrupt


def _deferring(method):
    @functools.wraps(method)
    def call(*args, **kwargs):
        with interrupts_deferred():
            return method(*args, **kwargs)
    return call


class _WithoutInterrupts(logging.Filter):
    """Drops log records of an exception that is a KeyboardInterrupt."""

    def filter(self, record: logging.LogRecord) -> bool:
        kind = record.exc_info[0] if record.exc_info else None
        return not (kind is not None and issubclass(kind, KeyboardInterrupt))


def _quiet_about_interrupts(logger) -> None:
    """Keep ``logger`` (a logger, or SQLAlchemy's wrapper of one) from reporting a
    Ctrl-C as an error of its own; the command reports it once, as "interrupted"."""
    base = getattr(logger, "logger", logger)
    if not any(isinstance(f, _WithoutInterrupts) for f in base.filters):
        base.addFilter(_WithoutInterrupts())


@functools.cache
def storage_class():
    """Optuna's RDB storage, each of whose calls finishes before a Ctrl-C is raised.

    Python raises KeyboardInterrupt wherever the main thread is. Inside SQLAlchemy that
    invalidates the connection midway through a call, after which SQLAlchemy logs a
    traceback of its own while closing the cursor, and the call's work is lost. Each
    call to the storage is short (milliseconds), so holding Ctrl-C back until it returns
    costs the user nothing. SQLAlchemy also resets a connection whose last user has gone
    when the garbage collector gets to it, anywhere in the program; an interrupt that
    lands there is raised again, but SQLAlchemy's connection pool would log it first as
    an error with a traceback: its logger drops such records.
    """
    import optuna

    base = optuna.storages.RDBStorage
    # private methods too: Optuna's cache in front of the storage (the storage a study
    # holds) calls several directly (``_get_trials``, ``_create_new_trial``, ...)
    methods = {name: _deferring(member) for name in dir(base)
               if not name.startswith("__")
               and inspect.isfunction(member := inspect.getattr_static(base, name))}

    def __init__(self, *args, **kwargs):
        base.__init__(self, *args, **kwargs)
        _quiet_about_interrupts(self.engine.pool.logger)

    methods["__init__"] = _deferring(__init__)
    return type("InterruptSafeRDBStorage", (base,), methods)


def open_storage(url: str):
    """An Optuna RDB storage for ``url``; a URL that cannot be opened is an InputError that
    shows it masked.

    Workers started together on an empty database all create Optuna's tables; all but
    one collide on the database's catalog (an integrity error), and then find the tables
    made when they try again.
    """
    import sqlalchemy.exc

    engine_kwargs = {}
    if url.startswith("postgresql"):
        engine_kwargs = {"connect_args": {"connect_timeout": CONNECT_TIMEOUT_S}}
    try:
        for attempt in range(SCHEMA_ATTEMPTS):
            try:
                return storage_class()(url, engine_kwargs=engine_kwargs)
            except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError):
                if attempt == SCHEMA_ATTEMPTS - 1:
                    raise
                time.sleep(0.5 * (attempt + 1))
    except ModuleNotFoundError as error:
        raise InputError(OPTION, None, None, f"{masked(url)} needs the database driver "
                         f"{error.name!r} (for PostgreSQL: pip install 'xsweep[postgres]')"
                         ) from None
    except Exception as error:  # noqa: BLE001 - drivers raise their own types; all mean "cannot open"
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise InputError(OPTION, None, None, f"cannot open {masked(url)}: "
                         f"{hide_password(first, url)}") from None
