"""A throw-away PostgreSQL server for tests: initdb in a temporary folder, listening only on
a Unix socket there, stopped and removed afterwards.

The server binaries are looked up on PATH, then in Debian's
``/usr/lib/postgresql/<version>/bin``; without them the test skips and says so.
PostgreSQL refuses to run as root, so under root the server runs as the ``postgres``
user (``runuser``), in a folder that user owns; the client side connects over the
socket as the database user ``xsweep`` (trust authentication: the server accepts any
password, so a test can put one in the URL and check it leaks nowhere).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DATABASE, USER = "studies", "xsweep"
SERVER_USER_WHEN_ROOT = "postgres"


def server_bin() -> Path | None:
    """The folder holding initdb, pg_ctl and postgres, or None."""
    found = shutil.which("initdb")
    candidates = [Path(found).resolve().parent] if found else []
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    for folder in candidates:
        if all((folder / tool).exists() for tool in ("initdb", "pg_ctl", "postgres")):
            return folder
    return None


def why_not() -> str | None:
    """Why no server can be started here (None: it can)."""
    if server_bin() is None:
        return ("PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or in "
                "/usr/lib/postgresql/*/bin; install Debian's postgresql package")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_USER_WHEN_ROOT)
        except KeyError:
            return f"running as root and there is no {SERVER_USER_WHEN_ROOT!r} user to run the server"
        if shutil.which("runuser") is None:
            return "running as root without runuser to start the server as another user"
    return None


@contextmanager
def postgres_server(password: str) -> Iterator[str]:
    """Start a server; yield a SQLAlchemy URL of an empty database on it (with ``password``)."""
    folder = Path(tempfile.mkdtemp(prefix="xsweep-pg-"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        account = pwd.getpwnam(SERVER_USER_WHEN_ROOT)
        os.chown(folder, account.pw_uid, account.pw_gid)
        prefix = [shutil.which("runuser"), "-u", SERVER_USER_WHEN_ROOT, "--"]
    folder.chmod(0o755)
    tools = server_bin()
    data, log = folder / "data", folder / "server.log"

    def run(*command: object) -> None:
        subprocess.run([*prefix, *map(str, command)], check=True, capture_output=True,
                       timeout=120)

    started = False
    try:
        run(tools / "initdb", "-D", data, "-U", USER, "-A", "trust", "-E", "UTF8", "--no-sync")
        run(tools / "pg_ctl", "-D", data, "-l", log, "-w", "-t", "60", "-o",
            f"-k {folder} -c listen_addresses='' -F", "start")
        started = True
        createdb = tools / "createdb" if (tools / "createdb").exists() else "createdb"
        run(createdb, "-h", folder, "-U", USER, DATABASE)
        yield f"postgresql+psycopg2://{USER}:{password}@/{DATABASE}?host={folder}"
    finally:
        if started:
            run(tools / "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(folder, ignore_errors=True)
