"""The disk backend's folder (``_disk.py``): what may be opened as a store, and the file
system's and SQLite's errors as the library's.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import BackendError, BackendUnavailableError, InvalidKeyError, StoreNotFoundError
from ._disk_index import busy

__all__ = ["access", "check_root", "refuse_nested", "translated"]

_REBUILD = (
    "; the store's index.sqlite3 cannot be read: move it aside and the store rebuilds it from "
    "the record files"
)


@contextmanager
def translated(operation: str) -> Iterator[None]:
    """The file system's and SQLite's errors as the library's: a lock another process held
    past the busy timeout is transient (the Store retries it), anything else is not."""
    try:
        yield
    except (OSError, sqlite3.Error) as exc:
        hint = _REBUILD if type(exc) is sqlite3.DatabaseError else ""  # "not a database"
        raise (BackendUnavailableError if busy(exc) else BackendError)(
            f"disk {operation} failed: {type(exc).__name__}: {exc}{hint}",
            backend="disk",
            operation=operation,
        ) from exc


@contextmanager
def access(root: Path) -> Iterator[None]:
    """A store this user may not read and write, refused as such: the index is SQLite in WAL
    mode, which writes beside the database (and a listing settles pending marks) even to
    read."""
    try:
        yield
    except (PermissionError, sqlite3.OperationalError) as exc:
        if isinstance(exc, sqlite3.OperationalError) and "readonly" not in str(exc):
            raise
        raise InvalidKeyError(
            f"disk store {os.path.abspath(root)!r} cannot be opened by this user: "
            f"{getattr(exc, 'strerror', None) or exc}; a disk store needs read and write "
            "access to its folder, even to list or read (its index is SQLite in WAL mode)"
        ) from exc


def refuse_nested(root: Path) -> None:
    """A store's folder holds its records, index and namespaces (claims live in ``_leases``):
    a store opened inside another's folder could share or clobber those files."""
    parent = root.absolute().parent
    if (parent / "index.sqlite3").is_file() and (parent / "records").is_dir():
        raise InvalidKeyError(
            f"{str(root)!r} is inside the disk store at {str(parent)!r}: a store's folder "
            "belongs to that store; choose a folder outside it"
        )


_STORE_FILES = frozenset({"records", "locks", "index.sqlite3", "index.sqlite3-wal",
                          "index.sqlite3-shm", "index.sqlite3-journal"})  # fmt: skip
"""What a store's folder holds while a process makes it (another may be making it too)."""


def check_root(root: Path, create: bool) -> None:
    """Refuse a root that is not a folder, one that holds other files and no store (a store
    made there would mix its files with them: ``--store .`` in a project), and without
    ``create`` one that holds no store."""
    where = os.path.abspath(root)
    for path in (root, *root.parents):
        if path.exists():
            if not path.is_dir():
                raise InvalidKeyError(
                    f"disk store {where!r}: {str(path)!r} is a file, not a folder"
                )
            break
    if (root / "records").is_dir() or (root / "index.sqlite3").exists():
        return
    if create and root.is_dir() and (others := sorted(set(os.listdir(root)) - _STORE_FILES)):
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise InvalidKeyError(
            f"disk store {where!r}: the folder holds other files ({shown}) and no checkpoint "
            "store; a store needs a folder of its own: give a new or empty one"
        )
    if create:
        return
    why = "holds no checkpoint store" if root.is_dir() else "does not exist"
    raise StoreNotFoundError(
        f"no store at {where!r}: the folder {why}; nothing was created (put, save or setup "
        "create a store)"
    )
