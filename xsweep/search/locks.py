"""One writer per folder: a command that writes a folder holds the folder's lock file,
``.xsweep.lock``, for as long as it writes there; a second command on that folder is
refused at once with a line naming the holder.

The lock is the operating system's advisory lock on that file (``flock`` on POSIX), which
the kernel releases when the holder ends, however it ends: a Ctrl-C, an error or SIGKILL
never leaves a folder locked. The file records who holds it (pid, host, command and
since when) for the refusal's message. The holder removes it when done; a killed one
leaves it behind, unlocked, and the next command takes it over. A process that finds the
file removed or replaced between opening and locking it tries again, so two processes
never both hold a lock on the file the folder names.

Windows has no ``flock``: there ``msvcrt.locking`` locks the file's first byte (released
too when the process ends, and the file is not removed). Where neither exists, folders
are not locked. On a network file system the lock is as good as that file system's
locks (NFS on Linux supports them).

Nothing here is state of the module: a :class:`FolderLock` is an object its command holds.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import time
from pathlib import Path

from xsweep.errors import InputError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
try:
    import msvcrt
except ImportError:  # POSIX
    msvcrt = None

#: The lock file in each folder a command writes.
LOCK_FILE = ".xsweep.lock"
#: Tries at taking a lock file that another process keeps removing or replacing.
_ATTEMPTS = 20
#: Seconds a refused process waits for the holder to record itself (it does so at once).
_HOLDER_WAIT_S = 0.5
#: The holder's record starts after the first byte, which is the one Windows locks.
_RECORD_AT = 1


def _try_lock(fd: int) -> bool:
    """Lock ``fd`` without waiting; False when another process holds it."""
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True
    if msvcrt is not None:
        os.lseek(fd, 0, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    return True  # no lock on this system: documented


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (not removed or replaced)."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (found.st_dev, found.st_ino) == (mine.st_dev, mine.st_ino)


def _record(command: str) -> bytes:
    since = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    document = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                "since": since}
    return b"\n" + json.dumps(document).encode() + b"\n"


def _holder(fd: int) -> dict | None:
    """The holder's record in the lock file open as ``fd``, or None when it has none yet."""
    deadline = time.monotonic() + _HOLDER_WAIT_S
    while True:
        try:
            os.lseek(fd, _RECORD_AT, os.SEEK_SET)
            text = os.read(fd, 1 << 16).decode("utf-8", "replace").strip()
            found = json.loads(text) if text else None
            if isinstance(found, dict):
                return found
        except (OSError, ValueError):
            pass
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def busy_reason(holder: dict | None) -> str:
    """Why a folder is refused: who holds it, and what to do."""
    if holder is None:
        who = "another xsweep process"
    else:
        since = str(holder.get("since", ""))
        clock = since[11:19] if len(since) >= 19 else since
        where = f" on {holder['host']}" if holder.get("host") not in (None, socket.gethostname()) else ""
        who = f"{holder.get('command', 'xsweep')} (pid {holder.get('pid')}{where}, since {clock})"
    return f"in use by {who}; wait for it to end, or choose another folder with -o"


class FolderLock:
    """The lock of ``folder`` (made if missing), taken by :meth:`acquire` for ``command``
    (how a refused process names the holder: ``xsweep sweep space.yaml``; never a
    storage URL's password), waiting up to ``wait_s`` seconds for another holder to end.

    A context manager: ``with FolderLock(folder, "xsweep sweep x.yaml"):`` holds it for the
    block; :meth:`release` gives it back and removes the lock file.
    """

    def __init__(self, folder: str | os.PathLike, command: str, wait_s: float = 0.0):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE
        self.command = command
        self.wait_s = wait_s
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, wait_s: float | None = None) -> FolderLock:
        """Take the lock, trying for up to ``wait_s`` seconds (default: the lock's) while
        another process holds it.

        Raises:
          InputError: naming the folder and the holder, when another process holds it.
        """
        if self._fd is not None:
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + (self.wait_s if wait_s is None else wait_s)
        for _ in range(_ATTEMPTS):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                locked = _try_lock(fd)
                while not locked and time.monotonic() < deadline:
                    time.sleep(0.1)
                    locked = _try_lock(fd)
                if not locked:
                    raise InputError(str(self.folder), None, None, busy_reason(_holder(fd)))
                if fcntl is not None and not _same_file(fd, self.path):
                    os.close(fd)  # its holder removed it as we opened it: take the new one
                    continue
                os.ftruncate(fd, _RECORD_AT)
                os.lseek(fd, 0, os.SEEK_SET)
                os.write(fd, _record(self.command))
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
            return self
        raise InputError(str(self.folder), None, None, f"cannot take its lock file "
                         f"{LOCK_FILE}: other processes keep replacing it")

    def release(self) -> None:
        """Give the lock back and remove the lock file (not on Windows, which cannot
        remove an open file)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if fcntl is not None:  # removed while still held: no one can hold a removed file
                self.path.unlink(missing_ok=True)
        except OSError:
            pass
        finally:
            os.close(fd)  # the lock goes with the last descriptor of the file

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def refuse_if_held(folder: str | os.PathLike) -> None:
    """Refuse ``folder`` if another process holds its lock, without taking it or making
    anything (for a folder that may not be one a command writes: a validation's input).

    Raises:
      InputError: naming the folder and the holder.
    """
    try:
        fd = os.open(Path(folder) / LOCK_FILE, os.O_RDWR)
    except OSError:  # no lock file (or none this process may open): not held
        return
    try:
        if not _try_lock(fd):
            raise InputError(os.fspath(folder), None, None, busy_reason(_holder(fd)))
    finally:
        os.close(fd)  # a lock this probe took goes with it


def command_line(command: str, *inputs: object) -> str:
    """How a holder is named: ``xsweep <command> <inputs>``, each input as given."""
    return " ".join(["xsweep", command, *(os.fspath(i) if isinstance(i, os.PathLike) else str(i)
                                          for i in inputs)])

