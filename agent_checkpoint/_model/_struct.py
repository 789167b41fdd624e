"""The one mechanism every record part shares: typed fields, unknown keys kept, key order kept.

Each field states its JSON key and codec once, as dataclass field metadata::

    tool_call_id: str | None = field(default=None, metadata=key("toolCallId"))

A class writes its keys in declaration order, or in ``RUNTIME_ORDER`` where the runtime's
order differs from the order Python's positional arguments need (checked when the class is
made: it names every key once).

A part is read leniently: a known key whose value has an unexpected shape is kept verbatim with
the unknown keys (the door validates only some fields, spec §3, and the rest must still round
trip). Writing emits the keys in the order they were read; keys that were not read come after,
in the runtime's order (spec §2.1).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

from ..errors import InvalidArgumentError

Json = Any
"""A JSON value as orjson reads it: dict, list, str, int, float, bool or None."""

JsonObject = Mapping[str, Json]


class Mismatch(Exception):
    """A known key held a value of another shape; the caller keeps it verbatim instead."""


@dataclass(frozen=True, slots=True)
class Codec:
    """How a field's value is read from JSON and written back. ``decode`` raises ``Mismatch``
    for a value of another shape; ``encode`` is ``None`` when the value is its own JSON."""

    decode: Callable[[Json], Any]
    encode: Callable[[Any], Json] | None = None
    holds: type[Struct] | None = None  # the part type a field of this codec holds
    many: bool = False  # a tuple of them


@dataclass(frozen=True, slots=True)
class Field:
    """One JSON key of a part: the attribute that holds it and its codec."""

    key: str
    attr: str
    codec: Codec


_META = "agent_checkpoint.json"


def key(name: str, codec: Codec | None = None) -> Mapping[str, Any]:
    """Field metadata: the field is JSON key ``name``, read and written by ``codec`` (a
    string when not given)."""
    return MappingProxyType({_META: (name, TEXT if codec is None else codec)})


def _text(value: Json) -> str:
    if not isinstance(value, str):
        raise Mismatch
    return value


def _number(value: Json) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Mismatch
    return value


def _boolean(value: Json) -> bool:
    if not isinstance(value, bool):
        raise Mismatch
    return value


_ATOMS = frozenset((str, int, float, bool, type(None)))


def copied(value: Json) -> Json:
    """A copy of a JSON value's dicts and lists that shares its other (immutable) values."""
    if isinstance(value, dict):
        if _ATOMS.issuperset(map(type, value.values())):  # flat (most tool arguments): in C
            return dict(value)
        return {k: v if type(v) in _ATOMS else copied(v) for k, v in value.items()}
    if isinstance(value, list):
        if _ATOMS.issuperset(map(type, value)):
            return list(value)
        return [v if type(v) in _ATOMS else copied(v) for v in value]
    return value


def _object(value: Json) -> JsonObject:
    if not isinstance(value, dict):
        raise Mismatch
    # A copy: a part must not change when the caller changes the dict it was read from (a
    # tool call's arguments changed in place would otherwise still equal what was stored).
    copy: JsonObject = copied(value)
    return copy


def _strings(value: Json) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Mismatch
    return tuple(value)


TEXT = Codec(_text)
NUMBER = Codec(_number)
BOOLEAN = Codec(_boolean)
OBJECT = Codec(_object)
STRINGS = Codec(_strings, list)
"""A JSON array of strings, held as a tuple."""


S = TypeVar("S", bound="Struct")

NO_EXTRA: JsonObject = MappingProxyType({})
"""The ``extra`` of a part read without unknown keys (shared: it cannot be changed)."""

_SHAPES_KEPT = 256
"""Key orders remembered per class (a history repeats a handful)."""

Reader = Callable[[JsonObject], Any]
"""Reads an object of one key order into an instance, or returns ``None`` (read it the
generic way) when a value is not of the expected type."""

_new = object.__new__
_set_state = object.__setattr__


def _reader(cls: type, order: tuple[str, ...], fields: list[Field]) -> Reader:
    """A function for objects with exactly the keys ``order``: it checks each value and fills
    a new instance's ``__dict__`` in one step (a frozen dataclass's ``__init__`` sets each
    field through ``object.__setattr__``, which would cost most of a read)."""
    attrs = tuple(f.attr for f in fields)
    decoded = tuple((f.attr, f.codec.decode) for f in fields if f.codec is not TEXT)
    if not decoded and len(attrs) == 2:  # {role, content}: most messages, read most directly
        first, second = attrs

        def read_pair(data: JsonObject) -> Any:
            one, two = data.values()
            if type(one) is not str or type(two) is not str:
                return None
            instance: Any = _new(cls)
            state = {first: one, second: two, "extra": NO_EXTRA, "key_order": order}
            _set_state(instance, "__dict__", state)
            return instance

        return read_pair
    if not decoded:  # strings only (most other messages): one C-level pass checks their types
        strings = (str,) * len(fields)

        def read_strings(data: JsonObject) -> Any:
            values = data.values()
            if tuple(map(type, values)) != strings:
                return None
            instance: Any = _new(cls)
            state = dict(zip(attrs, values), extra=NO_EXTRA, key_order=order)  # noqa: B905
            _set_state(instance, "__dict__", state)
            return instance

        return read_strings

    texts = tuple(i for i, f in enumerate(fields) if f.codec is TEXT)

    def read(data: JsonObject) -> Any:
        values = tuple(data.values())
        for i in texts:
            if type(values[i]) is not str:
                return None
        state = dict(zip(attrs, values), extra=NO_EXTRA, key_order=order)  # noqa: B905
        for attr, decode in decoded:
            value = state[attr]
            if value is None:
                return None
            try:
                state[attr] = decode(value)
            except Mismatch:
                return None
        instance: Any = _new(cls)
        _set_state(instance, "__dict__", state)
        return instance

    return read


@dataclass(frozen=True, slots=True)
class _Build:
    """How ``from_json`` makes an instance of one class without its ``__init__``."""

    required: tuple[str, ...]  # attributes without a default
    factories: tuple[tuple[str, Callable[[], Any]], ...]  # defaults made per instance
    direct: bool  # instances have a __dict__: fill it in one update


def _declared(cls: type) -> list[tuple[str, dataclasses.Field[Any]]]:
    """The class's own dataclass fields, in declaration order. ``__init_subclass__`` runs
    before ``@dataclass`` has processed the class (the fields are still the class body's
    ``field()`` values), and again on the class ``slots=True`` makes (processed by then)."""
    processed = cls.__dict__.get("__dataclass_fields__")
    if processed is not None:
        return list(processed.items())
    body = cls.__dict__
    return [
        (name, body[name])
        for name in body.get("__annotations__", {})
        if isinstance(body.get(name), dataclasses.Field)
    ]


def _fields_of(cls: type) -> tuple[tuple[Field, ...], _Build]:
    fields: list[Field] = []
    required, factories = [], []
    for name, f in _declared(cls):
        if _META not in f.metadata:
            continue  # extra, key_order
        json_key, codec = f.metadata[_META]
        fields.append(Field(json_key, name, codec))
        if f.default_factory is not dataclasses.MISSING:
            factories.append((name, f.default_factory))
        elif f.default is dataclasses.MISSING:
            required.append(name)
    order: tuple[str, ...] | None = cls.__dict__.get("RUNTIME_ORDER")
    if order is not None:
        by_key = {f.key: f for f in fields}
        if sorted(order) != sorted(by_key):
            raise TypeError(f"{cls.__name__}.RUNTIME_ORDER must name each JSON key once")
        fields = [by_key[k] for k in order]
    direct = "__slots__" not in cls.__dict__
    return tuple(fields), _Build(tuple(required), tuple(factories), direct)


class Struct:
    """Base of every record part. Subclasses are frozen dataclasses whose JSON fields carry
    ``key()`` metadata and that end with ``extra`` and ``key_order``. Parts a history holds
    many of (messages, tool calls) are not slotted, so ``from_json`` can fill an instance's
    ``__dict__`` in one step."""

    __slots__ = ()
    RUNTIME_ORDER: ClassVar[tuple[str, ...] | None] = None
    FIELDS: ClassVar[tuple[Field, ...]] = ()
    """The JSON fields in the runtime's key order (derived from the declarations)."""
    _BY_KEY: ClassVar[Mapping[str, Field]] = {}
    _ENCODE: ClassVar[tuple[tuple[str, str, Callable[[Any], Json] | None], ...]] = ()
    _SHAPES: ClassVar[dict[tuple[str, ...], Reader | None]] = {}
    _PLAN: ClassVar[_Build] = _Build((), (), False)
    _PARTS: ClassVar[tuple[tuple[str, type[Struct], bool], ...]] = ()

    extra: JsonObject
    key_order: tuple[str, ...] | None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.FIELDS, cls._PLAN = _fields_of(cls)
        cls._BY_KEY = {f.key: f for f in cls.FIELDS}
        cls._ENCODE = tuple((f.key, f.attr, f.codec.encode) for f in cls.FIELDS)
        cls._SHAPES = {}
        cls._PARTS = tuple(
            (f.attr, f.codec.holds, f.codec.many) for f in cls.FIELDS if f.codec.holds
        )

    def __post_init__(self) -> None:
        # Built by hand (``from_json`` does not come here): a field of parts must hold parts,
        # or the mistake would surface as an AttributeError deep inside the next put.
        for attr, kind, many in self._PARTS:
            value = getattr(self, attr)
            if value is not None:
                _check_parts(self, attr, value, kind, many)

    @classmethod
    def from_json(cls: type[S], data: JsonObject) -> S:
        """Build from a decoded JSON object without validating it (the door does that). An
        object without a key the type requires, or a value that is not an object, raises
        ``InvalidArgumentError``."""
        try:
            return cls._read(data)
        except Mismatch:
            needed = [f for f in cls.FIELDS if f.attr in cls._PLAN.required]
            shapes = [(f.key, _shape_of(f, data)) for f in needed]
            wrong = [f"{key} is {shape}" for key, shape in shapes if shape]
            raise InvalidArgumentError(
                f"{cls.__name__}.from_json needs an object whose keys "
                f"{', '.join(f.key for f in needed)} hold values of their JSON types"
                f"{': ' if wrong else ''}{', '.join(wrong)}; "
                f"got keys: {', '.join(map(str, data)) or 'none'}"
            ) from None
        except (TypeError, AttributeError):
            if isinstance(data, Mapping):
                raise
            raise InvalidArgumentError(
                f"{cls.__name__}.from_json needs a JSON object, not {kind_of(data)}"
            ) from None

    @classmethod
    def _read(cls: type[S], data: JsonObject) -> S:
        """``from_json`` for the parts of a record: a known key of another shape raises
        ``Mismatch``, and the caller keeps the value verbatim."""
        order = tuple(data)
        shapes = cls._SHAPES
        try:
            reader = shapes[order]
        except KeyError:  # a new key order: planned once, while fewer than _SHAPES_KEPT are
            reader = None
            if len(shapes) < _SHAPES_KEPT:
                reader = shapes[order] = cls._shape(order)
        if reader is not None:  # known keys only, the required ones among them
            instance: S | None = reader(data)
            if instance is not None:
                return instance
        return cls._from_any(data, order)

    @classmethod
    def from_json_many(cls: type[S], items: Sequence[JsonObject]) -> tuple[S, ...]:
        """``from_json`` of each of ``items``, as a tuple: the same instances, without a
        method call per item (a history holds thousands of parts of a handful of shapes)."""
        shapes = cls._SHAPES
        out: list[S] = []
        add = out.append
        for data in items:
            reader = shapes.get(tuple(data))
            instance = reader(data) if reader is not None else None
            add(cls._read(data) if instance is None else instance)
        return tuple(out)

    @classmethod
    def _shape(cls, order: tuple[str, ...]) -> Reader | None:
        """How to read objects with exactly these keys, in this order, without the generic
        loop; ``None`` when some key is unknown, a required one is missing, or instances
        have no ``__dict__`` or need a default made per instance."""
        plan = cls._PLAN
        by_key = cls._BY_KEY
        if not plan.direct or any(k not in by_key for k in order):
            return None
        present = {by_key[k].attr for k in order}
        needed = (*plan.required, *(attr for attr, _ in plan.factories))
        if any(attr not in present for attr in needed):
            return None
        return _reader(cls, order, [by_key[k] for k in order])

    @classmethod
    def _from_any(cls: type[S], data: JsonObject, order: tuple[str, ...]) -> S:
        """``from_json`` for any object: unknown keys and values of another shape kept."""
        by_key = cls._BY_KEY
        kwargs: dict[str, Any] = {}
        extra: dict[str, Json] = {}
        for name, value in data.items():
            field = by_key.get(name)
            if field is None or value is None:
                extra[name] = copied(value)
                continue
            try:
                kwargs[field.attr] = field.codec.decode(value)
            except Mismatch:
                extra[name] = copied(value)
        return cls._build(kwargs, extra, order)

    @classmethod
    def _build(
        cls: type[S], kwargs: dict[str, Any], extra: dict[str, Json], key_order: tuple[str, ...]
    ) -> S:
        plan = cls._PLAN
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
        _set_state(instance, "__dict__", kwargs)  # absent fields' defaults are class attributes
        return instance

    def to_json(self) -> dict[str, Json]:
        """The JSON object, keys in read order, then the remaining ones in the runtime's order."""
        return self._json(NO_EXTRA)

    def _json(self, held: JsonObject) -> dict[str, Json]:
        """``to_json`` with the value of each attribute named in ``held`` taken from it instead
        (a mapping, not a function called per attribute: most puts encode a checkpoint)."""
        out: dict[str, Json] = {}
        extra = self.extra
        if not self.key_order and not extra:  # built in code: the runtime's order
            for name, attr, encode in self._ENCODE:
                value = held[attr] if attr in held else getattr(self, attr)
                if value is not None:
                    out[name] = value if encode is None else encode(value)
            return out
        by_key = self._BY_KEY
        for name in self.key_order or ():
            field = by_key.get(name)
            if field is not None:
                attr = field.attr
                value = held[attr] if attr in held else getattr(self, attr)
                if value is not None:
                    encode = field.codec.encode
                    out[name] = value if encode is None else encode(value)
                    continue
            if name in extra:
                out[name] = extra[name]
        for name, attr, encode in self._ENCODE:
            if name not in out:
                value = held[attr] if attr in held else getattr(self, attr)
                if value is not None:
                    out[name] = value if encode is None else encode(value)
        for name, value in extra.items():
            if name not in out:
                out[name] = value
        return out


def with_article(name: str) -> str:
    return f"{'an' if name[:1] in 'AEIOUaeiou' else 'a'} {name}"


def _shape_of(field: Field, data: JsonObject) -> str:
    """What is wrong with ``data``'s value for the required ``field``: ``missing``, the kind
    of a value its codec does not read, or nothing."""
    if field.key not in data:
        return "missing"
    try:
        field.codec.decode(data[field.key])
    except (Mismatch, TypeError, AttributeError, ValueError):  # a part failing deeper in too
        return kind_of(data[field.key])
    return ""


def kind_of(value: Any) -> str:
    """What a refused value is, for an error: ``None``, ``a dict``, ``an int``."""
    return "None" if value is None else with_article(type(value).__name__)


def _check_parts(owner: Struct, attr: str, value: Any, kind: type[Struct], many: bool) -> None:
    where = f"{type(owner).__name__}.{attr}"
    if not many:
        items: Sequence[Any] = (value,)
    elif isinstance(value, (tuple, list)):
        items = value
    else:
        raise InvalidArgumentError(
            f"{where} is {kind_of(value)}, not a tuple of {kind.__name__}"
            + (f": put the one in a tuple, {attr}=(...,)" if isinstance(value, kind) else "")
        )
    for i, item in enumerate(items):
        if not isinstance(item, kind):
            at = f"{where}[{i}]" if many else where
            raise InvalidArgumentError(
                f"{at} is {kind_of(item)}, not {with_article(kind.__name__)}: build it with "
                f"{kind.__name__}(...), or read the whole JSON object with "
                f"{type(owner).__name__}.from_json(...)"
            )


def _encode_part(value: Struct) -> Json:
    return value.to_json()


def _encode_parts(values: tuple[Struct, ...]) -> Json:
    return [v.to_json() for v in values]


def part(cls: type[Struct]) -> Codec:
    """A JSON object read as a ``cls``."""

    def decode(value: Json) -> Struct:
        if not isinstance(value, dict):
            raise Mismatch
        return cls._read(value)

    return Codec(decode, _encode_part, cls)


def parts(cls: type[Struct]) -> Codec:
    """A JSON array of objects read as a tuple of ``cls``."""
    read_all = cls.from_json_many

    def decode(value: Json) -> tuple[Struct, ...]:
        if not isinstance(value, list):
            raise Mismatch
        for v in value:
            if not isinstance(v, dict):
                raise Mismatch
        return read_all(value)

    return Codec(decode, _encode_parts, cls, many=True)
