"""OpenTelemetry: a span per store operation and the store's metrics, read back from the SDK's
in-memory exporter and metric reader, for the ``Store`` and the ``AsyncStore`` on each backend's
real server; and nothing at all without ``opentelemetry-api``."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from support.store_urls import store_url

from agent_checkpoint import (
    BackendUnavailableError,
    ConflictError,
    InvalidCheckpointError,
    Message,
    NotFoundError,
    Store,
    open_async_store,
    open_store,
)
from agent_checkpoint.testing import BlockingStore, checkpoint

pytestmark = pytest.mark.filterwarnings("ignore::agent_checkpoint.backends.VolatileRedisWarning")

BACKENDS = ["memory", "disk", "redis", "postgres", "s3"]
SECRET = "TOPSECRET-41200"
"""In every key and principal the tests store: no attribute may carry it."""

_EXPORTER = InMemorySpanExporter()
_READER = InMemoryMetricReader()


@pytest.fixture(scope="module", autouse=True)
def sdk() -> None:
    """The SDK, in memory, as the process's providers (set once: OpenTelemetry keeps the first;
    the library's tracer and meter, made before or after, report to it)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # else another module's: ours beside it
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    metrics.set_meter_provider(MeterProvider(metric_readers=[_READER]))


class Telemetry:
    """What the store reported since the test began."""

    def __init__(self) -> None:
        _EXPORTER.clear()
        self._before = self._points()

    def spans(self) -> list[ReadableSpan]:
        return [s for s in _EXPORTER.get_finished_spans() if s.name.startswith("agent_checkpoint.")]

    def attributes(self) -> list[dict[str, Any]]:
        return [dict(s.attributes or {}) for s in self.spans()]

    def metric(self, name: str, **attributes: str) -> float:
        """The growth of metric ``name`` (a histogram's count) over points with
        ``attributes`` (given as keyword ``operation=``, ``outcome=``...)."""
        wanted = {f"agent_checkpoint.{k}": v for k, v in attributes.items()}
        after = self._points()
        return sum(
            value - self._before.get((metric, labels), 0)
            for (metric, labels), value in after.items()
            if metric == name and wanted.items() <= dict(labels).items()
        )

    @staticmethod
    def _points() -> dict[tuple[str, frozenset[tuple[str, Any]]], float]:
        found: dict[tuple[str, frozenset[tuple[str, Any]]], float] = {}
        data = _READER.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "count", None)
                        if value is None:
                            value = point.value  # type: ignore[union-attr]
                        found[(metric.name, frozenset((point.attributes or {}).items()))] = value
        return found


@pytest.fixture
def telemetry() -> Telemetry:
    return Telemetry()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, Any]]:
    with store_url(request.param, request, tmp_path) as (url, options):
        yield request.param, url, options


@pytest.fixture(params=["sync", "async"])
def store(request: pytest.FixtureRequest, backend: tuple[str, str, Any]) -> Iterator[Any]:
    _, url, options = backend
    opened: Any = (
        open_store(url, **options)
        if request.param == "sync"
        else BlockingStore(open_async_store(url, **options))
    )
    with opened:
        opened.setup()
        yield opened


def assert_nothing_stored_is_recorded(telemetry: Telemetry, url: str) -> None:
    for span in telemetry.spans():
        values = [str(v) for v in (span.attributes or {}).values()]
        assert not [v for v in values if SECRET in v or url in v], span.attributes
        assert not span.events  # no exception event: its message may quote a key


def test_each_operation_is_one_span_with_its_numbers_and_metrics(
    store: Any, backend: tuple[str, str, Any], telemetry: Telemetry
) -> None:
    name, url, _ = backend
    key = f"conv-{SECRET}"
    summary = store.put(checkpoint("r1", principal=f"{SECRET}@acme.test"), key=key)
    assert store.get(key) is not None
    assert [s.key for s in store.list().items] == [key]
    claim = store.claim(key, "worker-1", ttl=30)
    claim.release()
    assert store.delete(key)
    assert store.forget_older_than(0).forgotten == 0

    spans = telemetry.spans()
    operations = ["put", "get", "list", "claim", "delete", "forget"]
    assert [s.name for s in spans] == [f"agent_checkpoint.{op}" for op in operations]
    assert {s.kind for s in spans} == {SpanKind.CLIENT}
    assert {s.status.status_code for s in spans} == {StatusCode.UNSET}
    put, get, *rest = telemetry.attributes()
    assert put == {
        "agent_checkpoint.backend": name,
        "agent_checkpoint.operation": "put",
        "agent_checkpoint.outcome": "ok",
        "agent_checkpoint.retries": 0,
        "agent_checkpoint.revision": summary.revision,
        "agent_checkpoint.bytes": summary.size,
        "agent_checkpoint.segments_written": 0,
    }
    assert get["agent_checkpoint.revision"] == summary.revision
    assert get["agent_checkpoint.bytes"] == summary.size
    assert all(a["agent_checkpoint.outcome"] == "ok" for a in rest)
    assert {a["agent_checkpoint.backend"] for a in rest} == {name}
    assert_nothing_stored_is_recorded(telemetry, url)

    for op in operations:
        assert telemetry.metric("agent_checkpoint.operation.duration", operation=op) == 1
    assert telemetry.metric("agent_checkpoint.bytes_written", backend=name) == summary.size
    assert telemetry.metric("agent_checkpoint.operation.conflicts", backend=name) == 0


def test_conflict_not_found_and_error_are_outcomes_without_the_message(
    store: Any, backend: tuple[str, str, Any], telemetry: Telemetry
) -> None:
    name, url, _ = backend
    key = f"conv-{SECRET}"
    first = store.put(checkpoint("r1"), key=key)
    with pytest.raises(ConflictError):
        store.put(checkpoint("r2"), key=key, if_revision=10_000)
    assert store.get(f"{key}-gone") is None
    assert store.delete(f"{key}-gone") is False
    with pytest.raises(NotFoundError):
        store.claim(f"{key}-gone", "worker-1", ttl=30)
    with pytest.raises(InvalidCheckpointError):
        store.put({"version": 1, "runId": SECRET}, key=key)

    outcomes = [
        (a["agent_checkpoint.operation"], a["agent_checkpoint.outcome"])
        for a in telemetry.attributes()
    ]
    assert outcomes == [
        ("put", "ok"),
        ("put", "conflict"),
        ("get", "not_found"),
        ("delete", "not_found"),
        ("claim", "not_found"),
        ("put", "error"),
    ]
    failed = telemetry.spans()[-1]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description is None
    assert (failed.attributes or {})["error.type"] == "InvalidCheckpointError"
    assert_nothing_stored_is_recorded(telemetry, url)
    assert telemetry.metric("agent_checkpoint.operation.conflicts", backend=name) == 1
    assert telemetry.metric("agent_checkpoint.bytes_written", backend=name) == first.size


def test_a_growing_history_reports_the_segments_it_writes(
    store: Any, backend: tuple[str, str, Any], telemetry: Telemetry
) -> None:
    history: list[Message] = []
    for n in range(60):
        history += [Message("user", f"question {n} " + "x" * 700), Message("assistant", "ok")]
        store.put(checkpoint("r1").evolve(history=tuple(history)), key="grows")
    puts = [a for a in telemetry.attributes() if a["agent_checkpoint.operation"] == "put"]
    assert len(puts) == 60 and all(a["agent_checkpoint.outcome"] == "ok" for a in puts)
    written = sum(a["agent_checkpoint.segments_written"] for a in puts)
    assert written >= 1  # the history outgrew the record's inline part: pieces of their own
    stored = store.get("grows")
    assert stored is not None and len(stored.history) == 120


class FlakyOnce:
    """A real backend whose first listing meets a transient fault (a reset connection, say)."""

    def __init__(self, backend: Any) -> None:
        self.inner, self.name, self.failed = backend, backend.name, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def scan(self, query: Any) -> Any:
        if not self.failed:
            self.failed = True
            raise BackendUnavailableError("connection reset", backend=self.name, operation="scan")
        return self.inner.scan(query)


def test_a_retried_fault_is_counted_on_the_span_and_the_metric(
    backend: tuple[str, str, Any], telemetry: Telemetry
) -> None:
    name, url, options = backend
    with open_store(url, **options) as opened:
        opened.setup()
        store = Store(FlakyOnce(opened.backend))
        assert store.list().items == []
    (listed,) = telemetry.attributes()
    assert (listed["agent_checkpoint.outcome"], listed["agent_checkpoint.retries"]) == ("ok", 1)
    assert telemetry.metric("agent_checkpoint.operation.retries", backend=name) == 1


@pytest.mark.parametrize("name", BACKENDS)
def test_an_async_operation_is_one_span_under_the_awaiting_tasks_span(
    name: str, request: pytest.FixtureRequest, tmp_path: Path, telemetry: Telemetry
) -> None:
    tracer = trace.get_tracer("tests")

    async def main(url: str, options: dict[str, Any]) -> None:
        async with open_async_store(url, **options) as store:
            await store.setup()
            with tracer.start_as_current_span("request-a"):
                await store.put(checkpoint("a"), key="a")
            with tracer.start_as_current_span("request-b"):
                await asyncio.gather(store.get("a"), store.list())

    with store_url(name, request, tmp_path) as (url, options):
        asyncio.run(main(url, options))
    spans = {s.name: s for s in _EXPORTER.get_finished_spans()}
    ours = telemetry.spans()
    assert sorted(s.name for s in ours) == [
        "agent_checkpoint.get",
        "agent_checkpoint.list",
        "agent_checkpoint.put",
    ]
    parents = {s.name: s.parent.span_id if s.parent else None for s in ours}
    assert parents["agent_checkpoint.put"] == spans["request-a"].context.span_id
    assert parents["agent_checkpoint.get"] == spans["request-b"].context.span_id
    assert parents["agent_checkpoint.list"] == spans["request-b"].context.span_id


def test_the_store_imports_no_opentelemetry_and_works_without_it(tmp_path: Path) -> None:
    program = (
        "import sys\n"
        "import agent_checkpoint\n"
        "from agent_checkpoint.testing import checkpoint\n"
        "store = agent_checkpoint.open_store(sys.argv[1])\n"
        "store.put(checkpoint('r0'), key='k0')\n"
        "assert 'opentelemetry' not in sys.modules, 'imported by the library'\n"
        "if sys.argv[2] == 'absent':\n"
        "    sys.modules['opentelemetry'] = None  # as on an install without the extra\n"
        "else:\n"
        "    import opentelemetry.trace  # as an application that sets a provider does\n"
        "store.put(checkpoint('r1'), key='k')\n"
        "assert store.get('k') is not None and store.delete('k')\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    for mode in ("absent", "present"):
        done = subprocess.run(
            [sys.executable, "-c", program, str(tmp_path / mode), mode],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        if mode == "absent":
            assert done.stdout.strip() == "['opentelemetry']"  # only the refused name
        else:
            assert "'opentelemetry.metrics'" in done.stdout  # the store's meter, made then
