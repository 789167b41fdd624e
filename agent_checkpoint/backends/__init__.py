"""Backends, one module per technology, chosen by URL scheme through a lazy registry.

A scheme maps to a dotted path and the pip extra that brings its driver; the module is imported
on first use, so ``import agent_checkpoint`` needs no driver. ``register_backend`` adds a
scheme and refuses to replace one silently. A bare path or ``file://`` is the disk backend;
``fsspec+PROTOCOL://...`` (and ``PROTOCOL://`` or a chain ``PROTOCOL::...`` for a protocol
fsspec knows) goes to fsspec. Anything else that looks like a URL (``redsi://``, ``redis:/host``)
is refused naming the known schemes, so a typo never becomes a new folder.

The built-in backend classes are importable from here for a store built around a client of your
own (``Store(RedisBackend(client))``): ``DiskBackend``, ``MemoryBackend``, ``RedisBackend``,
``PostgresBackend``, ``S3Backend``, ``FsspecBackend``, ``SqliteBackend``, with
``TimedConnection`` (a psycopg connection that bounds each wait for the server) and
``VolatileRedisWarning``. They load on
first access, with their driver, so ``import agent_checkpoint.backends`` needs none; the modules
that define them are internal (``_redis``, ``_postgres``, ...).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..errors import (
    CheckpointError,
    InvalidArgumentError,
    InvalidKeyError,
    MissingDependencyError,
)
from ._base import (
    Backend,
    Batched,
    Expiring,
    Forgetting,
    Namespaced,
    Query,
    Record,
    Repairable,
    Summary,
    plan_save,
    resolve_owner,
    translate_errors,
)

if TYPE_CHECKING:
    from ._disk import DiskBackend as DiskBackend
    from ._fsspec import FsspecBackend as FsspecBackend
    from ._memory import MemoryBackend as MemoryBackend
    from ._postgres import PostgresBackend as PostgresBackend
    from ._postgres_connections import TimedConnection as TimedConnection
    from ._redis import RedisBackend as RedisBackend
    from ._redis_durability import VolatileRedisWarning as VolatileRedisWarning
    from ._s3 import S3Backend as S3Backend
    from ._sqlite import SqliteBackend as SqliteBackend

__all__ = [
    "Backend",
    "BackendEntry",
    "Batched",
    "Expiring",
    "Forgetting",
    "Namespaced",
    "Query",
    "Record",
    "Repairable",
    "Summary",
    "backend_class",
    "mask_url",
    "open_backend",
    "plan_save",
    "register_backend",
    "registry",
    "resolve_owner",
    "translate_errors",
]

_LAZY: dict[str, tuple[str, str | None]] = {
    "DiskBackend": ("agent_checkpoint.backends._disk", None),
    "MemoryBackend": ("agent_checkpoint.backends._memory", None),
    "RedisBackend": ("agent_checkpoint.backends._redis", "redis"),
    "VolatileRedisWarning": ("agent_checkpoint.backends._redis_durability", "redis"),
    "PostgresBackend": ("agent_checkpoint.backends._postgres", "postgres"),
    "TimedConnection": ("agent_checkpoint.backends._postgres_connections", "postgres"),
    "S3Backend": ("agent_checkpoint.backends._s3", "s3"),
    "FsspecBackend": ("agent_checkpoint.backends._fsspec", "fsspec"),
    "SqliteBackend": ("agent_checkpoint.backends._sqlite", None),
}
"""Public names served by ``__getattr__``, each with its module and pip extra. They stay out of
``__all__`` so that ``from agent_checkpoint.backends import *`` imports no driver."""


@dataclass(frozen=True)
class BackendEntry:
    target: str
    """``module:Class``; the class has ``from_url(url, **options)``."""
    extra: str | None = None
    """The pip extra that installs the driver, named in the error when it is missing."""


_REGISTRY: dict[str, BackendEntry] = {
    "file": BackendEntry("agent_checkpoint.backends._disk:DiskBackend"),
    "memory": BackendEntry("agent_checkpoint.backends._memory:MemoryBackend"),
    "redis": BackendEntry("agent_checkpoint.backends._redis:RedisBackend", "redis"),
    "rediss": BackendEntry("agent_checkpoint.backends._redis:RedisBackend", "redis"),
    "postgresql": BackendEntry("agent_checkpoint.backends._postgres:PostgresBackend", "postgres"),
    "postgres": BackendEntry("agent_checkpoint.backends._postgres:PostgresBackend", "postgres"),
    "s3": BackendEntry("agent_checkpoint.backends._s3:S3Backend", "s3"),
    "sqlite": BackendEntry("agent_checkpoint.backends._sqlite:SqliteBackend"),
}
_FSSPEC = BackendEntry("agent_checkpoint.backends._fsspec:FsspecBackend", "fsspec")

_FSSPEC_COMMON = frozenset((
    "abfs", "adl", "az", "box", "dbfs", "dropbox", "ftp", "gcs", "gdrive", "gs", "hdfs", "hf",
    "http", "https", "lakefs", "oci", "oss", "s3a", "sftp", "smb", "ssh", "webdav", "webhdfs",
))  # fmt: skip
"""Protocols fsspec implements, for telling a store URL from a typo when fsspec is not
installed (then they name the extra to install); with fsspec, its own registry decides."""

registry = MappingProxyType(_REGISTRY)
"""Read-only view of scheme -> entry."""

_SCHEME_NAME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")  # RFC 3986's scheme
_SCHEME = re.compile(rf"^({_SCHEME_NAME.pattern})://")
_URL_LIKE = re.compile(rf"^({_SCHEME_NAME.pattern}):(//|/|:)?")
_TARGET = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")  # package.module:Class


def register_backend(
    scheme: str, target: str, *, extra: str | None = None, replace: bool = False
) -> None:
    """Map ``scheme`` to ``module:Class``; an existing scheme needs ``replace=True``."""
    if not isinstance(scheme, str) or not _SCHEME_NAME.fullmatch(scheme):
        raise InvalidArgumentError(
            f"a backend scheme is a URL scheme (a letter, then letters, digits, '+', '-' or "
            f"'.'), not {scheme!r}"
        )
    if not isinstance(target, str) or not _TARGET.fullmatch(target):
        raise InvalidArgumentError(
            f"a backend target names its class as 'package.module:Class', not {target!r}"
        )
    scheme = scheme.lower()
    if scheme in _REGISTRY and not replace:
        raise InvalidArgumentError(
            f"scheme {scheme!r} is already registered to {_REGISTRY[scheme].target}"
        )
    _REGISTRY[scheme] = BackendEntry(target, extra)


def scheme_of(url: str) -> str:
    """The URL's scheme, or ``"file"`` for a bare path."""
    found = _SCHEME.match(url)
    return found.group(1).lower() if found else "file"


def fsspec_knows(protocol: str) -> bool:
    """Whether fsspec has a filesystem for ``protocol`` (by its registry when installed)."""
    try:
        from fsspec.registry import known_implementations, registry
    except ImportError:
        return protocol in _FSSPEC_COMMON
    return protocol in known_implementations or protocol in registry


def route(url: str) -> tuple[str, BackendEntry]:
    """The scheme and backend entry for a store URL or path; refuses what only looks like a
    URL: an unknown ``scheme://``, or a known scheme with a slash missing (``redis:/host``)."""
    found = _URL_LIKE.match(url)
    if found is None:
        return "file", _REGISTRY["file"]
    scheme, after = found.group(1).lower(), found.group(2)
    explicit = scheme.startswith("fsspec+")
    if after == "//":
        if scheme in _REGISTRY and not explicit:
            return scheme, _REGISTRY[scheme]
        if explicit or fsspec_knows(scheme):
            return scheme, _FSSPEC
        raise InvalidKeyError(
            f"unknown store URL scheme '{scheme}://'{_nearest(scheme)} ({_known()})"
        )
    if after == ":" and (explicit or fsspec_knows(scheme)):
        return scheme, _FSSPEC  # an fsspec chain: simplecache::s3://bucket/path
    if after is not None or scheme in _REGISTRY:
        raise InvalidKeyError(
            f"store '{scheme}:{after or ''}...' looks like a URL but is not one: a URL starts "
            f"with SCHEME:// ({_known()}); write a folder whose name holds a colon as ./NAME"
        )
    return "file", _REGISTRY["file"]


def _nearest(scheme: str) -> str:
    """``: did you mean 'redis://'?`` for a scheme one typo away from a known one."""
    import difflib  # only on this error: not on every CLI start

    close = difflib.get_close_matches(scheme, sorted(_REGISTRY), n=1, cutoff=0.6)
    return f": did you mean '{close[0]}://'?" if close else ""


def _known() -> str:
    return f"known: {', '.join(sorted(_REGISTRY))}, a path, or fsspec+PROTOCOL:// for fsspec"


def mask_url(url: str) -> str:
    """``url`` with any password (and secret-looking query values) replaced by ``***``, for
    errors, logs and output."""
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, sep, _password = userinfo.partition(":")
        netloc = f"{user}:***@{host}" if sep else f"{userinfo}@{host}"
    query = "&".join(
        f"{k}=***" if re.search(r"pass|secret|token|key|sig|credential", k, re.I) else f"{k}={v}"
        for k, _, v in (item.partition("=") for item in parts.query.split("&") if item)
    )
    return parts._replace(netloc=netloc, query=query).geturl()


def __getattr__(name: str) -> Any:
    """A built-in backend class (or its companion) from ``_LAZY``, importing its module now."""
    found = _LAZY.get(name)
    if found is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, extra = found
    return _load(extra or "", BackendEntry(f"{module}:{name}", extra), f"{__name__}.{name}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


def backend_class(scheme: str) -> type[Any]:
    """The class for ``scheme``, importing its module (and driver) now."""
    return _load(scheme, _REGISTRY.get(scheme.lower(), _FSSPEC))


def _load(scheme: str, entry: BackendEntry, needing: str = "") -> type[Any]:
    """The class ``entry`` names; a missing driver is a ``MissingDependencyError`` naming the
    extra, for ``needing`` (default: the ``scheme://`` store)."""
    module_name, _, attr = entry.target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise
        hint = f"pip install 'localab-checkpoint[{entry.extra}]'" if entry.extra else ""
        raise MissingDependencyError(
            f"{needing or f'the {scheme}:// store'} needs the {exc.name!r} package, which is not "
            "installed" + (f"; install it with: {hint}" if hint else "")
        ) from exc
    return getattr(module, attr)  # type: ignore[no-any-return]


def open_backend(url: str, *, create: bool = True, **options: Any) -> Backend:
    """A backend for ``url``: ``memory://``, a path or ``file://``, ``redis://``, ``rediss://``,
    ``postgresql://``, ``s3://bucket/prefix``, ``sqlite://PATH``, or an fsspec URL (see ``route``).

    ``create=False`` opens only a store that exists: a backend that would make its storage on
    opening (``makes_store_on_open``: the disk folder) raises ``StoreNotFoundError`` instead.
    """
    if not isinstance(url, str) or not url.strip():
        raise InvalidKeyError("a store URL or path is required")
    scheme, entry = route(url)
    if scheme == "file" and _SCHEME.match(url) and urlsplit(url).netloc not in ("", "localhost"):
        raise InvalidKeyError(
            f"file:// URLs name a local path (file:///abs/path); got host {urlsplit(url).netloc!r}"
        )
    cls = _load(scheme, entry)
    if not create and getattr(cls, "makes_store_on_open", False):
        options["create"] = False
    try:
        backend: Backend = cls.from_url(url, **options)
    except TypeError as exc:
        unknown = _UNKNOWN_OPTION.search(str(exc))
        if unknown is None or unknown.group(1) not in options:
            raise
        raise InvalidArgumentError(
            f"{scheme} store: unknown option {unknown.group(1)!r} (see docs/backends.md and "
            "the README's store URLs for the options each backend takes)"
        ) from exc
    except ValueError as exc:  # the driver's own parsing: a port, an endpoint, an option
        if isinstance(exc, CheckpointError):
            raise
        raise InvalidKeyError(f"store URL {_shown(url)!r} cannot be used: {exc}") from exc
    return backend


def _shown(url: str) -> str:
    try:
        return mask_url(url)
    except ValueError:  # urlsplit refuses it (a broken IPv6 host): show the scheme alone
        return f"{url.partition(':')[0]}://..."


_UNKNOWN_OPTION = re.compile(r"unexpected keyword argument '([^']+)'")
