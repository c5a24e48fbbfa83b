"""Where a study lives: the default SQLite file or any Optuna RDB storage URL, opened with
its password kept out of every message.

A storage URL may carry a password (``postgresql://user:secret@host/db``). xsweep shows
a URL only through :func:`masked` and an error only through :func:`hide_password`, and
writes the URL nowhere: not in study attributes, summaries or plans.
"""

from __future__ import annotations

import re
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


def default_url(folder: Path) -> str:
    """The SQLite file ``study.db`` in ``folder`` (made if missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'study.db'}"


def open_storage(url: str):
    """An Optuna RDB storage for ``url``; a URL that cannot be opened is an InputError that
    shows it masked.

    Workers started together on an empty database all create Optuna's tables; all but
    one collide on the database's catalog (an integrity error), and then find the tables
    made when they try again.
    """
    import optuna
    import sqlalchemy.exc

    engine_kwargs = {}
    if url.startswith("postgresql"):
        engine_kwargs = {"connect_args": {"connect_timeout": CONNECT_TIMEOUT_S}}
    try:
        for attempt in range(SCHEMA_ATTEMPTS):
            try:
                return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
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
