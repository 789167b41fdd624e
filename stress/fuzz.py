"""Fuzz campaign: hypothesis over every reader of untrusted input.

Targets (inputs are random values, and seeds from ``tests/vectors``, ``tests/fixtures`` and,
where present, the shared fixtures folder's Claude Code logs, mutated structurally and byte by
byte):

- ``door``: ``_validation.validate_checkpoint`` on JSON values; a document it accepts must also
  load as a ``RunCheckpoint`` and write back the same JSON (same bytes);
- ``envelope``: ``_envelope.check_envelope`` on envelope values (both formats);
- ``codec``: ``Codec().decode(bytes, key)`` and ``decode_json`` on random bytes, mutated
  envelope bytes and deep nesting;
- ``container``: ``Codec`` with a ``Sealer`` (AES-256-GCM keyring, zlib) on mutated sealed
  records, records sealed under another key or store key, and forged container headers;
- ``transcript:<format>``: a file of random and mutated records of each transcript format
  (JSON Lines, array or wrapper object; BOM, CRLF, blank, torn, binary and deeply nested
  lines), read through ``open_transcript`` (detected and forced), ``plan_integrity`` and its
  ``apply``, ``turns_to_checkpoint``, and ``read_turns`` for the canonical turn files.

For each input: only ``CheckpointError`` subclasses (the library's documented errors) may
escape; a per-input watchdog (SIGALRM) turns a hang into a finding; one input in
``TRACE_EVERY`` runs under ``tracemalloc`` and the largest allocation peak of one input is
printed per target (with the target's RSS growth, mostly hypothesis' own), and a zlib-bomb probe
checks that refusing a container costs at most ``AMPLIFICATION_LIMIT`` times its payload. An undocumented exception is recorded with the smallest input that raised
it; those explained by a known library bug (``KNOWN_BUGS`` in ``common.py``) are marked so.
"""

from __future__ import annotations

import gc
import json
import os
import random
import resource
import signal
import sys
import tempfile
import threading
import time
import traceback
import tracemalloc
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from support.shared_fixtures import shared_fixtures_folder

from agent_checkpoint._codec import Codec
from agent_checkpoint._container import MAGIC, Keyring, Sealer
from agent_checkpoint._envelope import check_envelope
from agent_checkpoint._model import RunCheckpoint
from agent_checkpoint._validation import validate_checkpoint
from agent_checkpoint.errors import CheckpointError
from agent_checkpoint.transcripts import (
    FORMATS,
    open_transcript,
    plan_integrity,
    read_turns,
    turns_to_checkpoint,
)
from agent_checkpoint.transcripts._jsonio import dump_line

from .common import REPO, Tally, markdown_table

TRACE_EVERY = 20
"""One input in this many runs under tracemalloc: its allocation peak is the memory figure."""
HANG_SECONDS = 10.0
"""An input still running after this long is a hang (a finding)."""
SHARES = {"door": 20, "envelope": 15, "codec": 20, "container": 15, "transcripts": 30}
"""Percent of the inputs per target; transcripts split evenly over the formats."""
VECTORS = REPO / "tests" / "vectors"
FIXTURES = REPO / "tests" / "fixtures"

Json = Any


class Hang(BaseException):
    """Raised by the watchdog in the input that ran too long (a BaseException, so no
    ``except Exception`` in the library can swallow it)."""


# -- seeds ----------------------------------------------------------------------------------


def _load(name: str) -> Any:
    return json.loads((VECTORS / name).read_text())


CHECKPOINTS = _load("checkpoints.json")
ENVELOPES = _load("envelopes.json")
VALID_DOCS: list[Json] = [v["doc"] for v in CHECKPOINTS["valid"]]
INVALID_DOCS: list[Json] = [v["doc"] for v in CHECKPOINTS["invalid"] if "doc" in v]
VALID_ENVELOPES: list[Json] = [v["envelope"] for v in ENVELOPES["valid"]]
REFUSED_ENVELOPES: list[Json] = [v["envelope"] for v in ENVELOPES["refuse"] if "envelope" in v]


def _records(path: Path) -> list[Json]:
    """The records of a transcript fixture: its lines, array items or wrapped arrays' items."""
    data = path.read_bytes().removeprefix(b"\xef\xbb\xbf")
    if path.suffix == ".jsonl":
        found = []
        for line in data.split(b"\n"):  # not str.splitlines: U+2028 may sit inside strings
            try:
                found.append(json.loads(line))
            except ValueError:
                continue  # the fixtures hold deliberately broken lines
        return found
    doc = json.loads(data)
    if isinstance(doc, list):
        return doc
    return [item for k in ("messages", "input", "output") for item in doc.get(k, [])]


def _turn_records() -> list[Json]:
    found: list[Json] = []
    for path in sorted((FIXTURES / "transcripts").iterdir()):
        try:
            found.extend(turn.to_json() for turn in open_transcript(path))
        except CheckpointError:
            continue
    return found


TRANSCRIPT_SEEDS: dict[str, list[Json]] = {
    "claude-code": [
        r
        for p in sorted(
            [
                *(FIXTURES / "claude-code").glob("*.jsonl"),
                *(shared_fixtures_folder() / "claude-code").glob("*.jsonl"),
            ],
            key=lambda p: p.name,
        )
        + sorted((FIXTURES / "transcripts").glob("claude_code_*.jsonl"))
        for r in _records(p)
    ],
    "codex": [
        r for p in sorted((FIXTURES / "transcripts").glob("codex_*.jsonl")) for r in _records(p)
    ],
    "openai-chat": _records(FIXTURES / "transcripts" / "openai_chat_tools.json"),
    "anthropic": _records(FIXTURES / "transcripts" / "anthropic_messages.json"),
    "openai-responses": _records(FIXTURES / "transcripts" / "openai_responses.json"),
    "turns": _turn_records(),
    "gemini-cli": [
        r
        for p in sorted((FIXTURES / "transcripts").glob("gemini_session.json*"))
        for r in _records(p)
    ],
    # Aider's history is markdown: its seeds are lines of text, put together line by line
    "aider": (FIXTURES / "transcripts" / "aider_sessions.md").read_text().split("\n"),
}
WRAPPER = {
    "openai-chat": "messages",
    "anthropic": "messages",
    "openai-responses": "input",
    "gemini-cli": "messages",
}


# -- strategies -----------------------------------------------------------------------------

SPECIAL_STRINGS = [
    "",
    " ",
    "\x00",
    "\ud800",
    "\u2028",
    "x" * 5000,
    "😀" * 50,
    "../../etc/passwd",
    "https://user:secret@example.com/x?token=abc",
    "user",
    "assistant",
    "tool",
    "system",
    "conversation-v1",
    "flowchart-v1",
    "message",
    "function_call",
    "tool_use",
    "tool_result",
    "response_item",
    "{",
    "null",
]
SPECIAL_NUMBERS: list[Json] = [
    0,
    -1,
    1,
    2**31,
    2**53,
    2**53 + 1,
    2**63,
    2**64 + 7,
    -(2**70),
    0.5,
    -0.0,
    1e308,
    float("inf"),
    float("nan"),
    True,
    False,
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(st.characters(codec=None), max_size=40),
    st.sampled_from(SPECIAL_STRINGS),
    st.sampled_from(SPECIAL_NUMBERS),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(
            st.one_of(st.text(max_size=12), st.sampled_from(SPECIAL_STRINGS)), inner, max_size=5
        ),
    ),
    max_leaves=20,
)


def deep(depth: int, leaf: Json = 0, kind: str = "list") -> Json:
    value = leaf
    for _ in range(depth):
        value = [value] if kind == "list" else {"a": value}
    return value


def mutate(value: Json, rng: random.Random, pool: list[Json], times: int) -> Json:
    """``value`` with ``times`` structural mutations (``pool``: replacement values)."""
    for _ in range(times):
        value = _mutate_once(value, rng, pool)
    return value


def _mutate_once(value: Json, rng: random.Random, pool: list[Json]) -> Json:
    if isinstance(value, (dict, list)) and value and rng.random() < 0.75:
        if isinstance(value, dict):
            keys = list(value)
            key = rng.choice(keys)
            copy = dict(value)
            roll = rng.random()
            if roll < 0.12:
                del copy[key]
            elif roll < 0.2:
                copy[rng.choice([*SPECIAL_STRINGS, key + "x"])] = rng.choice(pool or [None])
            elif roll < 0.25:
                copy = {(k + "_" if k == key else k): v for k, v in copy.items()}
            else:
                copy[key] = _mutate_once(copy[key], rng, pool)
            return copy
        items = list(value)
        i = rng.randrange(len(items))
        roll = rng.random()
        if roll < 0.12:
            del items[i]
        elif roll < 0.2:
            items.insert(i, items[i])
        elif roll < 0.25:
            items.insert(i, rng.choice(pool or [None]))
        elif roll < 0.28:
            items.reverse()
        else:
            items[i] = _mutate_once(items[i], rng, pool)
        return items
    roll = rng.random()
    if roll < 0.35 and pool:
        return rng.choice(pool)
    if roll < 0.55:
        return rng.choice(SPECIAL_STRINGS)
    if roll < 0.75:
        return rng.choice(SPECIAL_NUMBERS)
    if roll < 0.8:
        return deep(rng.randint(2, 200), value, rng.choice(["list", "dict"]))
    if isinstance(value, str) and value:
        cut = rng.randrange(len(value))
        return value[:cut] + rng.choice(["", "\ud83d", "\x00", '"', "\\"]) + value[cut + 1 :]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return rng.choice([str(value), [value], {"value": value}, None, -value])
    return rng.choice([None, [], {}, "", 0, [value], {"x": value}])


def mutate_bytes(data: bytes, rng: random.Random, extra: bytes, times: int) -> bytes:
    buf = bytearray(data)
    for _ in range(times):
        if not buf:
            buf.extend(extra or b"\x00")
            continue
        roll = rng.random()
        i = rng.randrange(len(buf))
        if roll < 0.3:
            buf[i] ^= 1 << rng.randrange(8)
        elif roll < 0.45:
            del buf[i : i + rng.randint(1, 64)]
        elif roll < 0.6:
            buf[i:i] = extra or bytes([rng.randrange(256)])
        elif roll < 0.7:
            del buf[i:]
        elif roll < 0.8:
            buf[i] = rng.choice(b'{}[]",:\\\x00\xff0')
        else:
            j = rng.randrange(len(buf))
            buf[i:i] = buf[j : j + rng.randint(1, 200)]
    return bytes(buf)


# -- the harness ----------------------------------------------------------------------------


@dataclass
class Finding:
    target: str
    signature: str
    error: str
    example: str
    known: str | None
    count: int = 1


@dataclass
class TargetFigures:
    name: str
    inputs: int = 0
    accepted: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    unexpected: int = 0
    hangs: int = 0
    slowest: float = 0.0
    seconds: float = 0.0
    """Wall time of the target, input generation (hypothesis) included."""
    rss_growth_mb: float = 0.0
    peak_rss_mb: float = 0.0
    peak_input_kb: float = 0.0
    """The largest allocation peak of one input (traced for one input in ``TRACE_EVERY``)."""


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Raise ``Hang`` in this (main) thread if the block runs longer than ``seconds``."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _where(exc: BaseException) -> str:
    """The innermost frame of the library in the traceback: the bug's address."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "agent_checkpoint" in f.filename]
    if not (ours or frames):
        return "?"
    frame = (ours or frames)[-1]
    path = frame.filename.split("agent_checkpoint/")[-1]
    return f"{path}:{frame.lineno} ({frame.name})"


def known_bug(exc: BaseException) -> str | None:
    """The open ``KNOWN_BUGS`` entry that explains ``exc``, if any. KB-2 (RecursionError on
    deep nesting), KB-3 (unhashable type or role), KB-5 (fields of the wrong type) and KB-4
    (unbounded memory) were found here and fixed in bd561f8: none is open."""
    return None


class Harness:
    def __init__(self, hang_seconds: float = HANG_SECONDS) -> None:
        self.figures: dict[str, TargetFigures] = {}
        self.findings: dict[tuple[str, str], Finding] = {}
        self.hang_seconds = hang_seconds

    def call(self, target: str, fn: Callable[[], object], example: Callable[[], str]) -> None:
        fig = self.figures.setdefault(target, TargetFigures(target))
        fig.inputs += 1
        traced = fig.inputs % TRACE_EVERY == 0 and not tracemalloc.is_tracing()
        started = time.perf_counter()
        try:
            if traced:
                tracemalloc.start()
            with watchdog(self.hang_seconds):
                fn()
        except CheckpointError as exc:
            fig.refused[type(exc).__name__] += 1
        except Hang as exc:
            fig.hangs += 1
            self._finding(target, exc, example)
        except Exception as exc:  # the finding this campaign looks for
            fig.unexpected += 1
            self._finding(target, exc, example)
        else:
            fig.accepted += 1
        finally:
            if traced:
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                fig.peak_input_kb = max(fig.peak_input_kb, peak / 1024)
        fig.slowest = max(fig.slowest, time.perf_counter() - started)

    @contextmanager
    def timed(self, target: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            fig = self.figures.setdefault(target, TargetFigures(target))
            fig.seconds += time.monotonic() - started

    def _finding(self, target: str, exc: BaseException, example: Callable[[], str]) -> None:
        signature = f"{type(exc).__name__} at {_where(exc)}"
        text = example()
        found = self.findings.get((target, signature))
        if found is None:
            self.findings[(target, signature)] = Finding(
                target, signature, f"{type(exc).__name__}: {str(exc)[:200]}", text, known_bug(exc)
            )
            return
        found.count += 1
        if len(text) < len(found.example):
            found.example = text


def _preview(value: Any, limit: int = 600) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def _settings(count: int) -> settings:
    return settings(
        max_examples=max(1, count),
        deadline=None,  # the watchdog bounds each input; hypothesis' deadline flakes under load
        database=None,
        derandomize=False,
        phases=(Phase.generate,),
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )


# -- the targets ----------------------------------------------------------------------------


def fuzz_door(h: Harness, count: int) -> None:
    seeds = VALID_DOCS + INVALID_DOCS

    @_settings(count)
    @given(st.integers(0, 2**32), st.lists(json_values, max_size=4), st.integers(0, 6))
    def run(seed: int, pool: list[Json], times: int) -> None:
        rng = random.Random(seed)
        doc = rng.choice(pool) if pool and rng.random() < 0.1 else rng.choice(seeds)
        doc = mutate(doc, rng, pool, times)

        def check() -> None:
            validate_checkpoint(doc)
            loaded = RunCheckpoint.from_json(doc)
            if _json_text(loaded.to_json()) != _json_text(doc):
                raise RoundTripError("an accepted document did not write back as itself")

        h.call("door", check, lambda: _preview(doc))

    run()


def _json_text(value: Json) -> str:
    """A comparable rendering: key order, types (1, 1.0, true) and NaN kept apart."""
    return json.dumps(value, ensure_ascii=True, allow_nan=True, default=repr)


class RoundTripError(Exception):
    """A document the door accepted changed through ``RunCheckpoint`` (a finding)."""


def fuzz_envelope(h: Harness, count: int) -> None:
    seeds = VALID_ENVELOPES + REFUSED_ENVELOPES

    @_settings(count)
    @given(st.integers(0, 2**32), st.lists(json_values, max_size=4), st.integers(0, 6))
    def run(seed: int, pool: list[Json], times: int) -> None:
        rng = random.Random(seed)
        value = rng.choice(pool) if pool and rng.random() < 0.1 else rng.choice(seeds)
        value = mutate(value, rng, pool, times)
        key = rng.choice([None, "k", "\ud800", "x" * 300])
        h.call("envelope", lambda: check_envelope(value, key), lambda: _preview(value))

    run()


def _envelope_bytes(rng: random.Random) -> bytes:
    return orjson.dumps(rng.choice(VALID_ENVELOPES))


def fuzz_codec(h: Harness, count: int) -> None:
    codec = Codec()

    @_settings(count)
    @given(
        st.integers(0, 2**32),
        st.binary(max_size=64),
        st.lists(json_values, max_size=3),
        st.integers(0, 8),
    )
    def run(seed: int, extra: bytes, pool: list[Json], times: int) -> None:
        rng = random.Random(seed)
        roll = rng.random()
        if roll < 0.15:
            body = extra
        elif roll < 0.45:
            body = mutate_bytes(_envelope_bytes(rng), rng, extra, times)
        elif roll < 0.5:
            depth = rng.randint(500, 5000)
            body = b'{"format":"conversation-v1","data":' + b"[" * depth + b"]" * depth + b"}"
        else:
            value = mutate(rng.choice(VALID_ENVELOPES), rng, pool, times)
            try:
                body = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
            except (orjson.JSONEncodeError, TypeError):
                body = json.dumps(value, default=str).encode("utf-8", "surrogatepass")
        key = rng.choice(["k", "other", "\ud800"])
        decode = codec.decode if rng.random() < 0.7 else codec.decode_json
        h.call("codec", lambda: decode(body, key), lambda: _preview(body))

    run()


KEYRING = Keyring({"k1": bytes(range(32)), "k2": bytes(range(1, 33))}, "k1")
OTHER_KEYRING = Keyring({"k1": bytes(32)}, "k1")


def fuzz_container(h: Harness, count: int) -> None:
    sealers = [
        Sealer(keyring=KEYRING),
        Sealer(keyring=KEYRING, compress="zlib"),
        Sealer(compress="zlib"),
    ]
    readers = [Codec(sealer=s) for s in sealers] + [
        Codec(),
        Codec(sealer=Sealer(keyring=OTHER_KEYRING)),
    ]

    @_settings(count)
    @given(
        st.integers(0, 2**32),
        st.binary(max_size=48),
        st.one_of(json_values, st.dictionaries(st.sampled_from(["c", "e", "kid", "n"]), scalars)),
        st.integers(0, 4),
    )
    def run(seed: int, extra: bytes, header: Json, times: int) -> None:
        rng = random.Random(seed)
        sealer = rng.choice(sealers)
        key = rng.choice(["k", "k2"])
        sealed = sealer.seal(_envelope_bytes(rng), "k")
        roll = rng.random()
        if roll < 0.5:
            body = mutate_bytes(sealed, rng, extra, times) if times else sealed
        elif roll < 0.8:  # a forged header
            try:
                head = orjson.dumps(header, option=orjson.OPT_NON_STR_KEYS)
            except (orjson.JSONEncodeError, TypeError):
                head = b"{"
            size = len(head) if rng.random() < 0.8 else rng.randrange(65536)
            body = MAGIC + size.to_bytes(2, "big") + head + extra
        else:  # a compressed payload that is not what the header says
            payload = zlib.compress(extra * rng.randint(1, 200)) if rng.random() < 0.5 else extra
            head = orjson.dumps({"c": "zlib"} if rng.random() < 0.7 else {"c": "lz4"})
            body = MAGIC + len(head).to_bytes(2, "big") + head + payload
        reader = rng.choice(readers)
        h.call("container", lambda: reader.decode(body, key), lambda: _preview(body))

    run()


def _transcript_bytes(fmt: str, rng: random.Random, pool: list[Json], extra: bytes) -> bytes:
    if fmt == "aider":
        return _markdown_bytes(rng, extra)
    seeds = TRANSCRIPT_SEEDS[fmt] or [{}]
    records: list[Json] = []
    for _ in range(rng.randint(0, 12)):
        record = rng.choice(seeds)
        if rng.random() < 0.5:
            record = mutate(record, rng, pool, rng.randint(1, 4))
        records.append(record)
    container = "jsonl" if fmt not in WRAPPER else rng.choice(["jsonl", "array", "object"])
    if container == "jsonl":
        lines = []
        for record in records:
            try:
                line = dump_line(record)
            except (orjson.JSONEncodeError, TypeError):
                line = json.dumps(record, default=str).encode("utf-8", "surrogatepass") + b"\n"
            roll = rng.random()
            if roll < 0.05:
                line = line[: rng.randrange(len(line))] + b"\n"
            elif roll < 0.08:
                line = extra + b"\n"
            elif roll < 0.1:
                line = b"\n" if rng.random() < 0.5 else b"   \r\n"
            elif roll < 0.12:
                line = line.replace(b"\n", b"\r\n")
            elif roll < 0.13:
                depth = rng.randint(900, 3000)
                line = b'{"type":"user","message":' + b"[" * depth + b"]" * depth + b"}\n"
            lines.append(line)
        data = b"".join(lines)
        if data and rng.random() < 0.1:
            data = data[: rng.randrange(len(data))]  # torn final line
    else:
        doc: Json = records
        if container == "object":
            doc = {WRAPPER[fmt]: records}
            for member in ("model", "system", "instructions"):
                if rng.random() < 0.3:
                    doc[member] = rng.choice(pool or ["x"]) if rng.random() < 0.5 else "gpt-x"
        try:
            data = orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS)
        except (orjson.JSONEncodeError, TypeError):
            data = json.dumps(doc, default=str).encode("utf-8", "surrogatepass")
        if rng.random() < 0.15:
            data = mutate_bytes(data, rng, extra, rng.randint(1, 3))
    if rng.random() < 0.1:
        data = b"\xef\xbb\xbf" + data
    if rng.random() < 0.03:
        data = extra * 50
    return data


def _markdown_bytes(rng: random.Random, extra: bytes) -> bytes:
    """An Aider history of the seed lines in random order and number, some torn or replaced."""
    lines = [str(line) for line in TRANSCRIPT_SEEDS["aider"]]
    data = "\n".join(rng.choice(lines) for _ in range(rng.randint(0, 40))).encode()
    if rng.random() < 0.3:
        data = mutate_bytes(data, rng, extra, rng.randint(1, 3))
    if rng.random() < 0.05:
        data = extra * 50
    return data


def _read_all(path: Path, forced: Any) -> None:
    transcript = open_transcript(path, format=forced)
    turns = list(transcript)
    plan = plan_integrity(transcript)
    repaired = list(plan.apply(transcript))
    plan.report.lines()
    if repaired:
        turns_to_checkpoint(repaired)
    if turns:
        turns_to_checkpoint(turns)
    if transcript.format == "turns":
        list(read_turns(path))


def fuzz_transcripts(h: Harness, count: int, folder: Path) -> None:
    per_format = max(1, count // len(FORMATS))
    for fmt in FORMATS:
        with h.timed(f"transcript:{fmt}"):
            _fuzz_format(h, fmt, per_format, folder)


def _fuzz_format(h: Harness, fmt: str, count: int, folder: Path) -> None:
    suffix = "md" if fmt == "aider" else "json" if fmt in WRAPPER else "jsonl"
    path = folder / f"fuzz-{fmt}.{suffix}"

    @_settings(count)
    @given(
        st.integers(0, 2**32),
        st.lists(json_values, max_size=3),
        st.binary(max_size=64),
        st.booleans(),
    )
    def run(seed: int, pool: list[Json], extra: bytes, detect: bool) -> None:
        rng = random.Random(seed)
        data = _transcript_bytes(fmt, rng, pool, extra)
        path.write_bytes(data)
        forced = None if detect else fmt
        h.call(f"transcript:{fmt}", lambda: _read_all(path, forced), lambda: _preview(data))

    run()


# -- the campaign ---------------------------------------------------------------------------


def run_fuzz(inputs: int, *, hang_seconds: float = HANG_SECONDS) -> tuple[Tally, Harness]:
    """About ``inputs`` inputs over every target; the tally and the per-target figures."""
    harness = Harness(hang_seconds)
    tally = Tally("fuzz")
    started = time.monotonic()
    share = {name: max(1, inputs * pct // 100) for name, pct in SHARES.items()}
    with tempfile.TemporaryDirectory(prefix="ac-fuzz-") as tmp:

        def timed(name: str, fn: Callable[[Harness, int], None]) -> Callable[[], None]:
            def step() -> None:
                with harness.timed(name):
                    fn(harness, share[name])

            return step

        steps: list[tuple[list[str], Callable[[], None]]] = [
            (["door"], timed("door", fuzz_door)),
            (["envelope"], timed("envelope", fuzz_envelope)),
            (["codec"], timed("codec", fuzz_codec)),
            (["container"], timed("container", fuzz_container)),
            (
                [f"transcript:{f}" for f in FORMATS],
                lambda: fuzz_transcripts(harness, share["transcripts"], Path(tmp)),
            ),
        ]
        for names, step in steps:
            gc.collect()
            rss = _rss_mb()
            step()
            gc.collect()
            grown = _rss_mb() - rss
            for name in names:
                fig = harness.figures.setdefault(name, TargetFigures(name))
                fig.rss_growth_mb = grown
                fig.peak_rss_mb = _peak_mb()
    for fig in harness.figures.values():
        tally.trials += fig.inputs
        tally.acknowledged += fig.accepted
        tally.errors.update(fig.refused)
        tally.extra["slowest ms"] = max(tally.extra["slowest ms"], round(fig.slowest * 1000))
        tally.extra["peak KB/input"] = max(tally.extra["peak KB/input"], round(fig.peak_input_kb))
    for finding in harness.findings.values():
        kind = "stalled" if finding.signature.startswith("Hang") else "foreign"
        for _ in range(finding.count):
            tally.violation(
                kind,
                f"{finding.target}: {finding.signature}: {finding.error} | input: {finding.example}",
                known=finding.known,
            )
    tally.extra["peak RSS MB"] = round(_peak_mb())
    tally.seconds = time.monotonic() - started
    return tally, harness


def print_figures(tally: Tally, harness: Harness, out: Callable[[str], None] = print) -> None:
    head = ["target", "inputs", "accepted", "refused (library errors)", "undocumented",
            "hangs", "slowest ms", "seconds", "peak KB/input", "RSS growth MB"]  # fmt: skip
    rows = []
    for fig in harness.figures.values():
        refused = ", ".join(f"{k} {v}" for k, v in fig.refused.most_common()) or "-"
        rows.append([fig.name, str(fig.inputs), str(fig.accepted), refused, str(fig.unexpected),
                     str(fig.hangs), f"{fig.slowest * 1000:.0f}", f"{fig.seconds:.1f}",
                     f"{fig.peak_input_kb:.0f}", f"{fig.rss_growth_mb:+.1f}"])  # fmt: skip
    rows.append([
        "total", str(tally.trials), str(tally.acknowledged),
        str(sum(tally.errors.values())), str(tally.foreign), str(tally.stalled),
        str(tally.extra["slowest ms"]), f"{tally.seconds:.0f}",
        str(tally.extra["peak KB/input"]), f"peak {tally.extra['peak RSS MB']}",
    ])  # fmt: skip
    out(
        f"\nFuzz campaign ({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, "
        f"{tally.seconds:.0f} s, hang limit {HANG_SECONDS:.0f} s per input)"
    )
    out(markdown_table(head, rows))
    for finding in harness.findings.values():
        mark = f" [known bug {finding.known}]" if finding.known else ""
        out(f"\n- {finding.target}: {finding.signature} x{finding.count}{mark}\n  {finding.error}"
            f"\n  smallest input: {finding.example}")  # fmt: skip


def bomb_probe(megabytes: int = 64) -> tuple[int, float]:
    """Bytes in, and MB allocated at the peak, decoding a zlib container of ``megabytes`` of
    zeros (a decompression bomb: nothing in it is JSON)."""
    payload = zlib.compress(b"\x00" * (megabytes * 2**20), 9)
    head = orjson.dumps({"c": "zlib"})
    body = MAGIC + len(head).to_bytes(2, "big") + head + payload
    tracemalloc.start()
    with suppress(CheckpointError):
        Codec().decode(body, "bomb")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return len(body), peak / 2**20


AMPLIFICATION_LIMIT = 4.0
"""Peak memory while refusing a decompressed payload, in multiples of its size."""


def memory_probe(tally: Tally, megabytes: int) -> str:
    """Decode a zlib bomb; more than ``AMPLIFICATION_LIMIT`` times the payload is a finding."""
    size, peak = bomb_probe(megabytes)
    line = (
        f"zlib container probe: a {size / 1024:.0f} KiB record ({megabytes} MiB decompressed) "
        f"is refused through a {peak:.0f} MB peak allocation"
    )
    if peak > AMPLIFICATION_LIMIT * megabytes:
        tally.violation("unbounded", line)
    return line


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Fuzz campaign over every untrusted-input reader")
    parser.add_argument("--inputs", type=int, default=None, help="default 100000")
    parser.add_argument("--small", action="store_true", help="the CI size (3000)")
    args = parser.parse_args(argv)
    inputs = args.inputs or (3000 if args.small else 100_000)
    tally, harness = run_fuzz(inputs)
    probe = memory_probe(tally, 8 if inputs < 10_000 else 64)
    print_figures(tally, harness)
    print(f"\n{probe}")
    return 0 if tally.ok else 1


if __name__ == "__main__":
    sys.exit(main())
