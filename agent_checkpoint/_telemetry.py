"""OpenTelemetry for store operations, when ``opentelemetry-api`` is installed (extra ``otel``).

Each ``put``, ``get``, ``list``, ``delete``, ``claim`` and ``forget`` of a ``Store`` or an
``AsyncStore`` is one span (``agent_checkpoint.<operation>``, kind CLIENT) with the attributes
of ``ATTRIBUTES``, and feeds the metrics of ``METRICS``. Nothing a caller stored is recorded:
no key, no content, no URL; an error is named by its class only (its message may quote a key).

Nothing here imports OpenTelemetry: it is used once the process has imported it (an
application sets its providers so). Until then, or with no tracer or meter provider set yet
(the API would drop all), an operation costs a context variable's read and a check; a provider
set later is used from the next operation on.

One ``Operation`` per call is made by ``start``, in the caller's context: for an
``AsyncStore`` that is the awaiting task, so the span is the child of the caller's and times
the whole call, waiting included; the ``Store`` code it runs on a thread or on the home loop
(``_bridge.py``) reports into the same ``Operation`` (``Operation.within``), and an operation
that calls another (``get`` reads through ``get_record``) is still one span.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar

from .backends._base import Record, Summary
from .errors import ConflictError, NotFoundError

__all__ = ["ATTRIBUTES", "METRICS", "Operation", "current", "instrumented", "start"]

P = ParamSpec("P")
R = TypeVar("R")

ATTRIBUTES = (
    "agent_checkpoint.backend",
    "agent_checkpoint.operation",
    "agent_checkpoint.outcome",
    "agent_checkpoint.retries",
    "agent_checkpoint.revision",
    "agent_checkpoint.bytes",
    "agent_checkpoint.segments_written",
)
"""A span's attributes: the backend's name (``redis``...), the operation, its outcome (``ok``,
``conflict``, ``not_found``, ``error``), the retries it took; where the operation had them, the
revision it wrote or read, the record's size in bytes and the history segments it wrote as
objects of their own. ``error.type`` (the error's class) on an ``error``."""

METRICS = {
    "agent_checkpoint.operation.duration": "histogram, s: each operation, by backend, "
    "operation and outcome",
    "agent_checkpoint.operation.retries": "counter: retries after a transient fault",
    "agent_checkpoint.operation.conflicts": "counter: operations lost to a conflict",
    "agent_checkpoint.bytes_written": "counter, By: the sizes of the records put",
}

_CURRENT: ContextVar[Operation | None] = ContextVar("agent_checkpoint_operation", default=None)


class Operation:
    """What one store operation reports, filled in as it runs."""

    __slots__ = (
        "_telemetry",
        "backend",
        "bytes",
        "name",
        "outcome",
        "retries",
        "revision",
        "segments",
    )

    def __init__(self, telemetry: _Telemetry, backend: str, name: str) -> None:
        self._telemetry = telemetry
        self.backend, self.name = backend, name
        self.outcome = "ok"
        self.retries = 0
        self.segments = 0
        self.revision: int | None = None
        self.bytes: int | None = None

    def returned(self, result: object) -> None:
        """Take what the operation returned: a record or summary's revision and size; ``None``
        from a read, or ``False`` from a delete, is "not found"."""
        if isinstance(result, Record):
            result = result.summary
        if isinstance(result, Summary):
            self.revision, self.bytes = result.revision, result.size
        elif (result is None and self.name == "get") or (result is False and self.name == "delete"):
            self.outcome = "not_found"

    @contextmanager
    def traced(self) -> Iterator[None]:
        """The operation's span, current meanwhile, with this operation current too: the
        store's code reports its retries and segments into it. The ``Store`` runs its methods
        in it (``with``); an ``AsyncStore`` awaits the Store's method in it (``with`` around
        an ``await``, in the awaiting task), run ``within`` this operation."""
        token = _CURRENT.set(self)
        try:
            with self._telemetry.span(self):
                yield
        finally:
            _CURRENT.reset(token)

    def within(self, fn: Callable[P, R]) -> Callable[P, R]:
        """``fn`` reporting into this operation wherever it runs (a thread, the home loop)."""

        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            token = _CURRENT.set(self)
            try:
                return fn(*args, **kwargs)
            finally:
                _CURRENT.reset(token)

        return run

    def attributes(self) -> dict[str, str | int]:
        found: dict[str, str | int] = {
            "agent_checkpoint.backend": self.backend,
            "agent_checkpoint.operation": self.name,
            "agent_checkpoint.outcome": self.outcome,
            "agent_checkpoint.retries": self.retries,
        }
        if self.revision is not None:
            found["agent_checkpoint.revision"] = self.revision
        if self.bytes is not None:
            found["agent_checkpoint.bytes"] = self.bytes
        if self.segments or self.name == "put":
            found["agent_checkpoint.segments_written"] = self.segments
        return found


def current() -> Operation | None:
    """The operation the running code belongs to (the Store's retries and the segment layer
    report into it), or ``None``."""
    return _CURRENT.get()


class _Telemetry:
    """The tracer and instruments, made once the first operation finds OpenTelemetry."""

    def __init__(self) -> None:
        from opentelemetry import metrics, trace

        from ._version import __version__

        self.trace, self.metrics = trace, metrics
        self._unset = trace.ProxyTracerProvider
        self._configured = False
        self.tracer = trace.get_tracer("agent_checkpoint", __version__)
        meter = metrics.get_meter("agent_checkpoint", __version__)
        self.duration = meter.create_histogram(
            "agent_checkpoint.operation.duration", unit="s", description="store operations"
        )
        self.retries = meter.create_counter(
            "agent_checkpoint.operation.retries", description="retries after transient faults"
        )
        self.conflicts = meter.create_counter(
            "agent_checkpoint.operation.conflicts", description="operations lost to a conflict"
        )
        self.written = meter.create_counter(
            "agent_checkpoint.bytes_written", unit="By", description="sizes of records put"
        )

    def configured(self) -> bool:
        """Whether the application has set a tracer or a meter provider (until then the API
        would drop all: the store skips the work). Once set, a provider stays."""
        if not self._configured:
            self._configured = not isinstance(self.trace.get_tracer_provider(), self._unset) or (
                type(self.metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider"
            )
        return self._configured

    @contextmanager
    def span(self, op: Operation) -> Iterator[None]:
        kind = self.trace.SpanKind.CLIENT
        began = time.perf_counter()
        with self.tracer.start_as_current_span(
            f"agent_checkpoint.{op.name}",
            kind=kind,
            record_exception=False,  # its message may quote a key
            set_status_on_exception=False,
        ) as span:
            try:
                yield
            except BaseException as exc:
                op.outcome = _outcome(exc)
                if op.outcome == "error":
                    span.set_attribute("error.type", type(exc).__qualname__)
                    span.set_status(self.trace.StatusCode.ERROR)
                raise
            finally:
                attributes = op.attributes()
                span.set_attributes(attributes)
                self._count(op, time.perf_counter() - began)

    def _count(self, op: Operation, seconds: float) -> None:
        labels = {
            "agent_checkpoint.backend": op.backend,
            "agent_checkpoint.operation": op.name,
        }
        self.duration.record(seconds, {**labels, "agent_checkpoint.outcome": op.outcome})
        if op.retries:
            self.retries.add(op.retries, labels)
        if op.outcome == "conflict":
            self.conflicts.add(1, labels)
        if op.name == "put" and op.outcome == "ok" and op.bytes:
            self.written.add(op.bytes, {"agent_checkpoint.backend": op.backend})


def _outcome(exc: BaseException) -> str:
    if isinstance(exc, ConflictError):
        return "conflict"
    if isinstance(exc, NotFoundError):
        return "not_found"
    return "error"


_UNSET: Any = object()
_telemetry: _Telemetry | None = _UNSET


def _loaded() -> _Telemetry | None:
    """The telemetry, or ``None`` without ``opentelemetry-api``; looked for only once the
    process has imported OpenTelemetry (no provider can be set before: a CLI command or a
    program that does not use it pays nothing), then once."""
    global _telemetry
    if _telemetry is _UNSET:
        if "opentelemetry.trace" not in sys.modules and "opentelemetry.metrics" not in sys.modules:
            return None
        try:
            _telemetry = _Telemetry()
        except ImportError:
            _telemetry = None
    return _telemetry


def start(backend: str, name: str) -> Operation | None:
    """A new operation to trace; ``None`` inside another one (the code of that one), or when
    nothing would receive it: no OpenTelemetry, or no SDK configured yet."""
    if _CURRENT.get() is not None:
        return None
    telemetry = _loaded()
    if telemetry is None or not telemetry.configured():
        return None
    return Operation(telemetry, backend, name)


def instrumented(name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A ``Store`` method as the operation ``name`` (``AsyncStore`` reads ``__operation__``
    to trace it in the awaiting task instead)."""

    def wrap(method: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(method)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            outer = _CURRENT.get()
            op = None if outer is not None else start(args[0].backend.name, name)  # type: ignore[attr-defined]
            if op is None:
                result = method(*args, **kwargs)
                if outer is not None:
                    outer.returned(result)  # get reads through get_record: its revision
                return result
            with op.traced():
                result = method(*args, **kwargs)
                op.returned(result)
                return result

        call.__operation__ = name  # type: ignore[attr-defined]
        return call

    return wrap
