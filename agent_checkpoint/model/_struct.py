"""The one mechanism every record part shares: typed fields, unknown keys kept, key order kept.

A part is read leniently: a known key whose value has an unexpected shape is kept verbatim with
the unknown keys (the door validates only some fields, spec §3, and the rest must still round
trip). Writing emits the keys in the order they were read; keys that were not read come after,
in the runtime's order (spec §2.1).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
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

NO_EXTRA: JsonObject = MappingProxyType({})
"""The ``extra`` of a part read without unknown keys (shared: it cannot be changed)."""

_SHAPES_KEPT = 256
"""Key orders remembered per class (a history repeats a handful)."""

Reader = Callable[[JsonObject], Any]
"""Reads an object of one key order into an instance, or returns ``None`` (read it the
generic way) when a value is not of the expected type."""


def _reader(cls: type, order: tuple[str, ...], fields: list[Field]) -> Reader:
    """A function, compiled for this key order, that checks each value and fills a new
    instance's ``__dict__`` at once: the loop over fields, unrolled (as ``dataclasses``
    compiles ``__init__``)."""
    values = [f"v{i}" for i in range(len(fields))]
    body = [f"    {', '.join(values)}, = data.values()"]
    state = []
    for i, f in enumerate(fields):
        if f.decode is text:
            body.append(f"    if type(v{i}) is not str: return None")
            state.append(f"{f.attr!r}: v{i}")
        else:
            body.append(f"    if v{i} is None: return None")
            body.append(f"    try: d{i} = decode{i}(v{i})")
            body.append("    except Mismatch: return None")
            state.append(f"{f.attr!r}: d{i}")
    state += ["'extra': NO_EXTRA", "'key_order': ORDER"]
    body.append("    instance = new(cls)")
    body.append(f"    set_state(instance, '__dict__', {{{', '.join(state)}}})")
    body.append("    return instance")
    namespace: dict[str, Any] = {
        "cls": cls,
        "ORDER": order,
        "NO_EXTRA": NO_EXTRA,
        "Mismatch": Mismatch,
        "new": object.__new__,
        "set_state": object.__setattr__,
        **{f"decode{i}": f.decode for i, f in enumerate(fields)},
    }
    # Only our own field names enter the source; the keys read stay data (ORDER).
    exec("def read(data):\n" + "\n".join(body), namespace)
    reader: Reader = namespace["read"]
    return reader


@dataclass(frozen=True, slots=True)
class _Build:
    """How ``from_json`` makes an instance of one class without its ``__init__``."""

    required: tuple[str, ...]  # attributes without a default
    factories: tuple[tuple[str, Callable[[], Any]], ...]  # defaults made per instance
    direct: bool  # instances have a __dict__: fill it in one update


def _build_plan(cls: type) -> _Build:
    required, factories = [], []
    for f in dataclasses.fields(cls):
        if f.name in ("extra", "key_order"):
            continue
        if f.default_factory is not dataclasses.MISSING:
            factories.append((f.name, f.default_factory))
        elif f.default is dataclasses.MISSING:
            required.append(f.name)
    return _Build(tuple(required), tuple(factories), "__dict__" in dir(cls))


class Struct:
    """Base of every record part. Subclasses are frozen dataclasses that declare ``FIELDS`` in
    the runtime's key order and end with ``extra`` and ``key_order``. Parts a history holds
    many of (messages, tool calls) are not slotted, so ``from_json`` can fill an instance's
    ``__dict__`` in one step: a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, which costs most of a decode."""

    __slots__ = ()
    FIELDS: ClassVar[tuple[Field, ...]] = ()
    _BY_KEY: ClassVar[Mapping[str, Field]] = {}
    _ENCODE: ClassVar[tuple[tuple[str, str, Callable[[Any], Json] | None], ...]] = ()
    _SHAPES: ClassVar[dict[tuple[str, ...], Reader | None]] = {}

    extra: JsonObject
    key_order: tuple[str, ...] | None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._BY_KEY = {f.key: f for f in cls.FIELDS}
        cls._ENCODE = tuple(
            (f.key, f.attr, None if f.encode is same else f.encode) for f in cls.FIELDS
        )
        cls._SHAPES = {}

    @classmethod
    def from_json(cls: type[S], data: JsonObject) -> S:
        """Build from a decoded JSON object without validating it (the door does that)."""
        order = tuple(data)
        shapes = cls._SHAPES
        try:
            reader = shapes[order]
        except KeyError:  # a new key order: compiled once, while fewer than _SHAPES_KEPT are
            reader = None
            if len(shapes) < _SHAPES_KEPT:
                reader = shapes[order] = cls._shape(order)
        if reader is not None:  # known keys only, the required ones among them
            instance: S | None = reader(data)
            if instance is not None:
                return instance
        return cls._from_any(data, order)

    @classmethod
    def from_json_many(cls: type[S], items: list[JsonObject]) -> tuple[S, ...]:
        """``from_json`` of each of ``items``, as a tuple: the same instances, without a
        method call per item (a history holds thousands of parts of a handful of shapes)."""
        shapes = cls._SHAPES
        out: list[S] = []
        add = out.append
        for data in items:
            reader = shapes.get(tuple(data))
            instance = reader(data) if reader is not None else None
            add(cls.from_json(data) if instance is None else instance)
        return tuple(out)

    @classmethod
    def _shape(cls, order: tuple[str, ...]) -> Reader | None:
        """How to read objects with exactly these keys, in this order, without the generic
        loop; ``None`` when some key is unknown, a required one is missing, or instances
        have no ``__dict__`` or need a default made per instance."""
        plan = cls._plan()
        by_key = cls._BY_KEY
        if not plan.direct or any(k not in by_key for k in order):
            return None
        present = {by_key[k].attr for k in order}
        needed = (*plan.required, *(attr for attr, _ in plan.factories))
        if any(attr not in present for attr in needed):
            return None
        return _reader(cls, order, [by_key[k] for k in order])

    @classmethod
    def _plan(cls) -> _Build:
        """This class's ``_Build``, worked out once."""
        plan: _Build | None = cls.__dict__.get("_PLAN")
        if plan is None:
            plan = _build_plan(cls)
            cls._PLAN = plan  # type: ignore[attr-defined]
        return plan

    @classmethod
    def _from_any(cls: type[S], data: JsonObject, order: tuple[str, ...]) -> S:
        """``from_json`` for any object: unknown keys and values of another shape kept."""
        by_key = cls._BY_KEY
        kwargs: dict[str, Any] = {}
        extra: dict[str, Json] = {}
        for key, value in data.items():
            field = by_key.get(key)
            if field is None or value is None:
                extra[key] = value
                continue
            decode = field.decode
            if decode is text:  # the commonest field, checked inline
                if isinstance(value, str):
                    kwargs[field.attr] = value
                else:
                    extra[key] = value
                continue
            try:
                kwargs[field.attr] = decode(value)
            except Mismatch:
                extra[key] = value
        return cls._build(kwargs, extra, order)

    @classmethod
    def _build(
        cls: type[S], kwargs: dict[str, Any], extra: dict[str, Json], key_order: tuple[str, ...]
    ) -> S:
        plan = cls._plan()
        if not plan.direct:
            try:
                return cls(**kwargs, extra=extra, key_order=key_order)  # type: ignore[call-arg]
            except TypeError as exc:  # a required key is missing: the part keeps another shape
                raise Mismatch from exc
        for attr in plan.required:
            if attr not in kwargs:
                raise Mismatch
        for attr, factory in plan.factories:
            if attr not in kwargs:
                kwargs[attr] = factory()
        kwargs["extra"] = extra
        kwargs["key_order"] = key_order
        instance = object.__new__(cls)
        instance.__dict__.update(kwargs)  # the other fields' defaults are class attributes
        return instance

    def to_json(self) -> dict[str, Json]:
        """The JSON object, keys in read order, then the remaining ones in the runtime's order."""
        out: dict[str, Json] = {}
        extra = self.extra
        if not self.key_order and not extra:  # built in code: the runtime's order
            for key, attr, encode in self._ENCODE:
                value = getattr(self, attr)
                if value is not None:
                    out[key] = value if encode is None else encode(value)
            return out
        by_key = self._BY_KEY
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
    read_all = cls.from_json_many

    def decode(value: Json) -> tuple[S, ...]:
        if not isinstance(value, list):
            raise Mismatch
        for v in value:
            if not isinstance(v, dict):
                raise Mismatch
        return read_all(value)

    return decode


def encode_part(value: Struct) -> Json:
    return value.to_json()


def encode_parts(values: tuple[Struct, ...]) -> Json:
    return [v.to_json() for v in values]
