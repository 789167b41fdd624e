"""The values the ``Store`` takes and returns, and the checks of what callers pass it: the retry
policy, a page of summaries and its keyset cursor, the outcome of a retention pass and of a
verification, keys and moments in time (``_store.py`` holds the Store itself).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ._bridge import pause
from .backends._base import Summary
from .errors import BackendUnavailableError, InvalidArgumentError, InvalidKeyError

if TYPE_CHECKING:
    from tenacity import RetryCallState, Retrying

__all__ = [
    "MAX_KEY_LENGTH",
    "MAX_PAGE",
    "MOMENT_LIMIT_MS",
    "NO_RETRY",
    "Forgotten",
    "Page",
    "RetryPolicy",
    "VerifyReport",
    "check_count",
    "check_flag",
    "check_key",
    "decode_cursor",
    "encode_cursor",
    "to_epoch_ms",
    "ttl_ms",
]

MAX_KEY_LENGTH = 1024
"""Longest key, in characters, any backend accepts."""
MAX_PAGE = 10_000
MOMENT_LIMIT_MS = 2**63 - 1
"""Times given to the Store (cutoffs, bounds, cursors) lie within this many milliseconds of
the epoch (a signed 64-bit integer, which every backend's index compares alike)."""


def check_count(value: Any, what: str, *, least: int = 0) -> int:
    """A whole number from ``least`` (not a bool, a float or a string)."""
    if type(value) is not int or value < least:
        raise InvalidArgumentError(f"{what} must be a whole number >= {least}, got {value!r}")
    return value


def check_flag(value: Any, what: str) -> bool:
    """``True`` or ``False``: a string such as ``"no"`` would read as true."""
    if type(value) is not bool:
        raise InvalidArgumentError(f"{what} must be True or False, got {value!r}")
    return value


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with full jitter around transient backend faults."""

    attempts: int = 6
    initial: float = 0.05
    maximum: float = 2.0
    deadline: float = 15.0

    def __post_init__(self) -> None:
        check_count(self.attempts, "RetryPolicy attempts", least=1)
        for name in ("initial", "maximum", "deadline"):
            value = getattr(self, name)
            if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
                raise InvalidArgumentError(
                    f"RetryPolicy {name} must be a number of seconds >= 0, got {value!r}"
                )

    def retrying(self, *, failed_in: float | None = None) -> Retrying:
        """The attempts of one operation. ``failed_in``: its first attempt was already made
        (a transient fault ``failed_in`` seconds after it began), outside tenacity, which
        then makes the rest after the wait the first failure earns, within what is left of
        the policy's attempts and deadline: ``Store._call`` tries once before it builds this,
        since most calls need no retry and the machinery costs more than a memory put (and
        importing it, a command that meets no fault: it is imported here)."""
        from tenacity import (
            Retrying,
            before_nothing,
            retry_if_exception_type,
            stop_after_attempt,
            stop_after_delay,
            wait_random_exponential,
        )

        tried = failed_in is not None
        return Retrying(
            stop=stop_after_attempt(self.attempts - tried)
            | stop_after_delay(max(self.deadline - (failed_in or 0.0), 0.0)),
            # tenacity's first wait is then the second of the policy's
            wait=wait_random_exponential(
                multiplier=self.initial * (2 if tried else 1), max=self.maximum
            ),
            retry=retry_if_exception_type(BackendUnavailableError),
            reraise=True,
            sleep=pause,  # on the event loop's clock under AsyncStore
            before=self._wait_after_the_first if tried else before_nothing,
        )

    def _wait_after_the_first(self, state: RetryCallState) -> None:
        """The wait a failed first attempt earns, before the second."""
        if state.attempt_number == 1:
            pause(random.uniform(0, min(self.initial, self.maximum)))


NO_RETRY = RetryPolicy(attempts=1)


@dataclass(frozen=True)
class Page:
    """One page of summaries; pass ``cursor`` back for the next, ``None`` when there is none."""

    items: list[Summary]
    cursor: str | None

    def __iter__(self) -> Iterator[Summary]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


@dataclass(frozen=True)
class Forgotten:
    forgotten: int
    more: bool


@dataclass
class VerifyReport:
    """What ``Store.verify`` found."""

    checked: int = 0
    unreadable: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    """Why each unreadable record does not decode: its error class and first line."""
    stale: list[str] = field(default_factory=list)
    """Keys the index lists whose record is gone or at another revision."""
    unlisted: list[str] = field(default_factory=list)
    """Keys of records the index misses."""
    repaired: int | None = None
    """With ``repair``, when the index needed it: how many records it lists now."""
    orphans: int = 0
    """Segment objects no record refers to (left by writers that died mid-write): garbage,
    not lost data; ``repair`` removes them."""

    @property
    def ok(self) -> bool:
        return not self.unreadable and (
            self.repaired is not None or not (self.stale or self.unlisted)
        )


def check_key(key: Any) -> str:
    """A key any backend can hold: a non-empty printable string of at most ``MAX_KEY_LENGTH``."""
    if not isinstance(key, str) or not key:
        raise InvalidKeyError(f"a key must be a non-empty string, got {key!r}")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidKeyError(f"key is {len(key)} characters; the limit is {MAX_KEY_LENGTH}")
    if not key.isprintable():
        raise InvalidKeyError(f"key {key!r} holds a control or non-printable character")
    return key


MAX_TTL = 1e9
"""The longest lease, in seconds (about 31 years)."""


def ttl_ms(ttl: Any) -> int:
    """A lease's ``ttl`` in seconds, as milliseconds: a number from 0.001 to ``MAX_TTL``."""
    if type(ttl) not in (int, float) or not 0.001 <= ttl <= MAX_TTL:  # NaN fails this too
        raise InvalidArgumentError(
            f"ttl must be a positive number of seconds, got {ttl!r} (from 0.001 to {MAX_TTL:.0e})"
        )
    return int(ttl * 1000)


def check_revision(revision: Any) -> None:
    """An ``if_revision=``: none, or a stored record's revision, a whole number from 1 (not a
    string, a bool or a float, which would only ever meet a conflict)."""
    if revision is not None and (type(revision) is not int or revision < 1):
        raise InvalidArgumentError(
            f"if_revision must be a record's revision, an int from 1, got {revision!r}"
        )


def encode_cursor(summary: Summary) -> str:
    return f"{summary.saved_at}:{summary.key}"


def decode_cursor(cursor: str) -> tuple[int, str]:
    if not isinstance(cursor, str):
        raise InvalidArgumentError(
            f"cursor must be the str a page gave as its cursor, got {cursor!r}"
        )
    saved, sep, key = cursor.partition(":")
    if not sep or not saved.isdigit() or not key:
        raise InvalidKeyError(f"invalid cursor {cursor[:80]!r}: expected '<savedAt>:<key>'")
    return _in_range(int(saved), "the cursor's time"), key


def to_epoch_ms(moment: datetime | int | float, what: str = "time") -> int:
    """Epoch milliseconds of ``moment``, refused (``InvalidKeyError``) outside
    ``±MOMENT_LIMIT_MS``, so every backend answers the same."""
    if isinstance(moment, datetime):
        if moment.tzinfo is None:
            raise InvalidArgumentError("a naive datetime is ambiguous; give one with a timezone")
        return int(moment.timestamp() * 1000)
    if not isinstance(moment, (int, float)) or isinstance(moment, bool):
        raise InvalidArgumentError(
            f"{what} must be a datetime with a timezone or epoch milliseconds, got {moment!r}"
        )
    if isinstance(moment, float) and not math.isfinite(moment):
        raise InvalidKeyError(f"{what} {moment!r} is not a number of milliseconds")
    return _in_range(int(moment), what)


def _in_range(ms: int, what: str) -> int:
    if not -MOMENT_LIMIT_MS <= ms <= MOMENT_LIMIT_MS:
        digits = int(ms.bit_length() * math.log10(2))  # str() of a huge int is refused
        shown = f"{ms} ms" if digits < 30 else f"{'-' if ms < 0 else ''}~10^{digits} ms"
        raise InvalidKeyError(
            f"{what} {shown} is out of range: times are epoch milliseconds within "
            f"±{MOMENT_LIMIT_MS} (a signed 64-bit integer)"
        )
    return ms
