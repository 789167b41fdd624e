"""The one mechanism every record part shares: typed fields, unknown keys kept, key order kept.

A part is read leniently: a known key whose value has an unexpected shape is kept verbatim with
the unknown keys (the door validates only some fields, spec §3, and the rest must still round
trip). Writing emits the keys in the order they were read; keys that were not read come after,
in the runtime's order (spec §2.1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

Json = Any
"""A JSON value as orjson reads it: dict, list, str, int, float, bool or None."""

JsonObject = Mapping[str, Json]


class Mismatch(Exception):
    """A known key held a value of another shape; the caller keeps it verbatim instead."""


@dataclass(frozen=True, slots=True)
class Field:
    key: str
    attr: str
    decode: Callable[[Json], Any]
    encode: Callable[[Any], Json]


def same(value: Json) -> Json:
    return value


def text(value: Json) -> str:
    if not isinstance(value, str):
        raise Mismatch
    return value


def number(value: Json) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Mismatch
    return value


def boolean(value: Json) -> bool:
    if not isinstance(value, bool):
        raise Mismatch
    return value


def obj(value: Json) -> JsonObject:
    if not isinstance(value, dict):
        raise Mismatch
    return value


def strings(value: Json) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Mismatch
    return tuple(value)


def listed(value: tuple[Any, ...]) -> list[Any]:
    return list(value)


S = TypeVar("S", bound="Struct")


class Struct:
    """Base of every record part. Subclasses are frozen, slotted dataclasses that declare
    ``FIELDS`` in the runtime's key order and end with ``extra`` and ``key_order``."""

    __slots__ = ()
    FIELDS: ClassVar[tuple[Field, ...]] = ()
    _BY_KEY: ClassVar[Mapping[str, Field]] = {}

    extra: JsonObject
    key_order: tuple[str, ...] | None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._BY_KEY = {f.key: f for f in cls.FIELDS}

    @classmethod
    def from_json(cls: type[S], data: JsonObject) -> S:
        """Build from a decoded JSON object without validating it (the door does that)."""
        by_key = cls._BY_KEY
        kwargs: dict[str, Any] = {}
        extra: dict[str, Json] = {}
        for key, value in data.items():
            field = by_key.get(key)
            if field is None or value is None:
                extra[key] = value
                continue
            try:
                kwargs[field.attr] = field.decode(value)
            except Mismatch:
                extra[key] = value
        try:
            return cls(**kwargs, extra=extra, key_order=tuple(data))  # type: ignore[call-arg]
        except TypeError as exc:  # a required key is missing: the part keeps another shape
            raise Mismatch from exc

    def to_json(self) -> dict[str, Json]:
        """The JSON object, keys in read order, then the remaining ones in the runtime's order."""
        out: dict[str, Json] = {}
        by_key = self._BY_KEY
        extra = self.extra
        for key in self.key_order or ():
            field = by_key.get(key)
            if field is not None:
                value = getattr(self, field.attr)
                if value is not None:
                    out[key] = field.encode(value)
                    continue
            if key in extra:
                out[key] = extra[key]
        for field in self.FIELDS:
            if field.key not in out:
                value = getattr(self, field.attr)
                if value is not None:
                    out[field.key] = field.encode(value)
        for key, value in extra.items():
            if key not in out:
                out[key] = value
        return out


def part(cls: type[S]) -> Callable[[Json], S]:
    def decode(value: Json) -> S:
        if not isinstance(value, dict):
            raise Mismatch
        return cls.from_json(value)

    return decode


def parts(cls: type[S]) -> Callable[[Json], tuple[S, ...]]:
    def decode(value: Json) -> tuple[S, ...]:
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise Mismatch
        return tuple(cls.from_json(v) for v in value)

    return decode


def encode_part(value: Struct) -> Json:
    return value.to_json()


def encode_parts(values: tuple[Struct, ...]) -> Json:
    return [v.to_json() for v in values]
