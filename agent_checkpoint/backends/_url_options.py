"""The store options of every built-in scheme, in one table (``SCHEMES``), read the same way by
every backend's ``from_url``.

An option has a name, a parser, a default, and says whether it configures the store (then it
is a keyword argument of the backend class) or the connection, pool, client or filesystem the
store makes. It comes from the URL's query (``?prefix=..&ttl=..``) or a keyword of
``open_store`` (which wins). Beside them, the URL and the keywords may carry the driver's own
options (libpq's, redis-py's, fsspec's), when the backend says which it passes on.

The rules, the same on every scheme, all before anything connects:

- a value an option cannot take, a URL option neither the store nor its driver takes, or a
  keyword no one takes, is refused naming the option and the value (``InvalidKeyError`` for the
  URL's, ``InvalidArgumentError`` for a keyword), before a typo can send checkpoints somewhere
  else or fail at the first write;
- beside a connection passed in (``client=``, fsspec's ``fs=``), which the caller made and
  configured, a connection option (ours or the driver's) is refused by name: it could not reach
  that connection. Store options still apply.

A new scheme's options are one more entry of ``SCHEMES`` (see docs/backends.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from ..errors import InvalidArgumentError, InvalidKeyError

__all__ = [
    "DEFAULT_PREFIX",
    "DEFAULT_READ_TIMEOUT",
    "DEFAULT_TABLE",
    "DEFAULT_WAIT_TIMEOUT",
    "EVERY",
    "MAX_SCHEMA_NAME",
    "MAX_TABLE_NAME",
    "SCHEMES",
    "Given",
    "Option",
    "Scheme",
    "flag",
    "identifier",
    "limit",
    "number",
    "optional",
    "text",
    "whole",
]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")

Parser = Callable[[str, str, Any], Any]
"""``parse(backend, option, value)``: the value the store uses, or ``InvalidKeyError`` naming
the backend, the option and ``value``."""


def number(backend: str, name: str, value: object, *, positive: bool = False) -> float:
    """A finite number of seconds (or a size) ``>= 0``, ``> 0`` when ``positive``."""
    try:
        got = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        got = math.nan
    if not math.isfinite(got) or got < 0 or (positive and got == 0):
        bound = "> 0" if positive else ">= 0"
        raise InvalidKeyError(f"{backend} option {name} must be a number {bound}, not {value!r}")
    return got


def whole(backend: str, name: str, value: object, *, minimum: int = 0) -> int:
    """A whole number ``>= minimum``."""
    try:
        got = int(str(value).strip()) if not isinstance(value, bool) else -1
    except ValueError:
        got = minimum - 1
    if got < minimum:
        raise InvalidKeyError(
            f"{backend} option {name} must be a whole number >= {minimum}, not {value!r}"
        )
    return got


def flag(backend: str, name: str, value: object) -> bool:
    """``true``/``false`` (also ``1``/``0``, ``yes``/``no``, ``on``/``off``), or a bool."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidKeyError(f"{backend} option {name} must be true or false, not {value!r}")


def text(backend: str, name: str, value: Any) -> Any:
    """The value as given (the backend class checks it)."""
    return value


def optional(parse: Parser) -> Parser:
    """``parse``, with an empty value meaning unset (``None``)."""

    def parse_or_none(backend: str, name: str, value: Any) -> Any:
        return None if value in (None, "") else parse(backend, name, value)

    return parse_or_none


def limit(backend: str, name: str, value: object) -> float | None:
    """Seconds ``>= 0``; ``0`` sets no limit (``None``)."""
    return number(backend, name, value) or None


def identifier(size: int, reserved: str = "") -> Parser:
    """A name of 1 to ``size`` UTF-8 bytes, without NUL or a character of ``reserved``."""
    shown = " or ".join(["NUL", *reserved])

    def parse_name(backend: str, option: str, value: Any) -> str:
        if (
            not isinstance(value, str)
            or not value
            or any(c in value for c in "\x00" + reserved)
            or len(value.encode()) > size
        ):
            raise InvalidKeyError(
                f"{backend} {option} name must be 1-{size} bytes without {shown}, got {value!r}"
            )
        return value

    return parse_name


@dataclass(frozen=True)
class Option:
    name: str
    parse: Parser = text
    default: Any = None
    """The value when neither the URL nor a keyword gives one (not parsed)."""
    connection: bool = False
    """It configures the connection (pool, client, filesystem) the store makes, not the store;
    else it is a keyword argument of the backend class."""


class _Every:
    def __contains__(self, name: object) -> bool:
        return True


EVERY: Container[str] = _Every()
"""Every name: the driver takes any option (and refuses those it does not know itself)."""

DriverNames = Container[str] | Callable[[Mapping[str, Any]], Container[str]]
"""The option names a driver takes, or a function of the store's parsed options giving them."""


@dataclass(frozen=True)
class Given:
    """The options of one URL and its keywords, as a ``Scheme`` read them."""

    url: str
    store: dict[str, Any]
    """The store options, parsed, defaults filled: keyword arguments of the backend class."""
    connection: dict[str, Any]
    """Our connection options, parsed, defaults filled."""
    query: list[tuple[str, str]] = field(default_factory=list)
    """The URL query's options for the driver, in their order."""
    keywords: dict[str, Any] = field(default_factory=dict)
    """The keyword options for the driver."""

    def __getitem__(self, option: str) -> Any:
        return self.store[option] if option in self.store else self.connection[option]

    def driver_url(self, **defaults: str) -> str:
        """The URL with the driver's query only, and ``defaults`` where it sets none."""
        query = self.query + [(k, v) for k, v in defaults.items() if k not in dict(self.query)]
        # quote, not quote_plus: libpq reads '+' literally (options=-c%20name%3Dvalue).
        return urlunsplit(urlsplit(self.url)._replace(query=urlencode(query, quote_via=quote)))


@dataclass(frozen=True)
class Scheme:
    """One backend's options: the entry of ``SCHEMES`` its ``from_url`` reads."""

    backend: str
    """Names the backend in errors: ``postgres option max_size must be ...``."""
    options: tuple[Option, ...] = ()
    client: str = ""
    """The keyword of ``from_url`` that passes a ready connection in (``client``, ``fs``)."""
    made: str = "client"
    """What that keyword passes in: a ``pool``, a ``client``, a ``filesystem``."""
    driver: str = ""
    """Whose options the URL and keywords may carry beside ours, for errors."""
    in_url: bool = True
    """Whether the URL's query holds options (fsspec's belongs to the filesystem's URL)."""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(option.name for option in self.options)

    def check(self, option: str, value: Any) -> Any:
        """``value`` through ``option``'s parser."""
        found = next(o for o in self.options if o.name == option)
        return found.parse(self.backend, option, value)

    def hint(self) -> str:
        """What this scheme takes, for an error about what it does not."""
        if self.driver:
            return f"this library's: {', '.join(self.names)}; else {self.driver}"
        return f"known: {', '.join(self.names)}" if self.options else "it takes none"

    def read(
        self,
        url: str,
        keywords: Mapping[str, Any],
        *,
        client: Any = None,
        driver_url: Container[str] = (),
        driver_keywords: DriverNames = (),
    ) -> Given:
        """The options of ``url``'s query and ``keywords`` (which win; ``None`` is unset).
        ``driver_url`` and ``driver_keywords`` name the options the driver takes beside ours;
        ``client`` is the connection passed in, if any."""
        pairs = parse_qsl(urlsplit(url).query, keep_blank_values=True) if self.in_url else []
        query = {k: v for k, v in pairs if k in self.names}
        passed = [(k, v) for k, v in pairs if k not in self.names]
        unknown = sorted({k for k, _ in passed if k not in driver_url})
        if unknown:
            raise InvalidKeyError(
                f"unknown {self.backend} URL option{'s' if len(unknown) > 1 else ''}: "
                f"{', '.join(unknown)} ({self.hint()})"
            )
        ours = {k: v for k, v in keywords.items() if k in self.names and v is not None}
        values = {
            o.name: o.parse(self.backend, o.name, ours.get(o.name, query.get(o.name)))
            if o.name in ours or o.name in query
            else o.default
            for o in self.options
        }
        taken = driver_keywords(values) if callable(driver_keywords) else driver_keywords
        others = {k: v for k, v in keywords.items() if k not in self.names}
        unknown = sorted(k for k in others if k not in taken)
        if unknown:
            scheme = url.partition("://")[0].lower() if "://" in url else "file"
            raise InvalidArgumentError(
                f"{scheme} store: unknown option{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(map(repr, unknown))} ({self.hint()})"
            )
        if client is not None:
            self._refuse_beside_client({*query, *ours}, [*passed, *others.items()])
        connection = {o.name for o in self.options if o.connection}
        return Given(
            url,
            {k: v for k, v in values.items() if k not in connection},
            {k: v for k, v in values.items() if k in connection},
            passed,
            others,
        )

    def _refuse_beside_client(self, ours: set[str], theirs: list[tuple[str, Any]]) -> None:
        """Refuse, by name, connection options given beside a connection passed in."""
        named = {o.name for o in self.options if o.connection and o.name in ours}
        named |= {k for k, _ in theirs}
        if named:
            many = len(named) > 1
            raise InvalidKeyError(
                f"{self.backend} option{'s' if many else ''} {', '.join(sorted(named))} "
                f"configure{'' if many else 's'} the {self.made} this store makes, but "
                f"{self.client}= passes a {self.made} in: set {'them' if many else 'it'} on "
                f"that {self.made}"
            )


# -- the table ---------------------------------------------------------------------------------

DEFAULT_TABLE = "agent_checkpoints"
# Object names are derived from the table name (``<table>_segments_pkey`` is the longest), so it
# must leave room under NAMEDATALEN (63).
MAX_TABLE_NAME = 48
MAX_SCHEMA_NAME = 63
DEFAULT_READ_TIMEOUT = 20.0
"""Seconds a statement may wait for the server's reply; ``read_timeout=0`` waits forever."""

DEFAULT_PREFIX = "agent-checkpoint"
DEFAULT_WAIT_TIMEOUT = 1.0
"""Seconds a write waits for its ``wait_replicas`` confirmations before ``NotReplicatedError``."""

_seconds = partial(number, positive=True)

SCHEMES: dict[str, Scheme] = {
    "postgres": Scheme(
        "postgres",
        (
            Option("schema", identifier(MAX_SCHEMA_NAME), "public"),
            Option("table", identifier(MAX_TABLE_NAME, "$"), DEFAULT_TABLE),  # "$" names namespaces
            Option("min_size", whole, 1, connection=True),
            Option("max_size", partial(whole, minimum=1), 10, connection=True),
            Option("pool_timeout", _seconds, 5.0, connection=True),
            Option("read_timeout", limit, DEFAULT_READ_TIMEOUT, connection=True),
        ),
        client="client",
        made="pool",
    ),
    "redis": Scheme(
        "redis",
        (
            Option("prefix", text, DEFAULT_PREFIX),
            Option("ttl", optional(_seconds)),
            Option("cluster", flag, False, connection=True),
            Option("wait_replicas", whole, 0),
            Option("wait_timeout", _seconds, DEFAULT_WAIT_TIMEOUT),
        ),
        client="client",
        driver="redis-py's connection options",
    ),
    "s3": Scheme(
        "s3",
        (
            Option("create_bucket", flag, False),
            Option("endpoint_url", optional(text), connection=True),
            Option("profile", optional(text), connection=True),
            Option("region", optional(text)),  # the client's, and a bucket's it creates
        ),
        client="client",
    ),
    "fsspec": Scheme(
        "fsspec",
        client="fs",
        made="filesystem",
        driver="the filesystem's storage options",
        in_url=False,
    ),
    "disk": Scheme(
        "disk", (Option("fsync", flag, True), Option("create", flag, True)), in_url=False
    ),
    "memory": Scheme("memory", in_url=False),
    "sqlite": Scheme("sqlite", (Option("timeout", number, 5.0), Option("create", flag, True))),
}
"""Each built-in backend's options, by its name."""
