"""Growing histories on any backend: the store-side segment layer.

An agent that checkpoints after every iteration writes a history that only grows. A backend
that offers only the five record operations and ``namespace`` still gets puts that cost
O(new messages): the ``Store`` wraps it in ``Segmented``, which adds ``save_split`` and
``append`` built from records alone; the ``Writer`` (``_store_writes.py``) and the ``Appender``
(``_appender.py``) drive it. The extension is proven, not assumed: each layout carries a hash
chain over its history content (``chain``), and ``append`` applies only when the stored
revision and digest are the ones the writer extended; otherwise it changes nothing and
returns ``None``, and the writer falls back to a whole write. ``load`` always returns the
assembled bytes, identical to what a whole write would have stored, so readers, ``copy``,
``migrate`` and the CLI never see pieces.

A record whose history is stored in pieces is a *layout record*, in the byte format of
``_segment_format.py``; its pieces are records of the backend's ``segments`` namespace.

Writes: a whole write (``save_split``) keeps its history inline, however long, so it is one
write and a get of it one read. An append that keeps the inline content under
``inline_bytes`` rewrites only the layout record (one conditional write). Past it, the inline
content (and, when the record would hold more than ``max_segments`` pieces, the newest run of
pieces, ``merge_start``) is written first as a new piece, then the layout record is saved on
the revision it extends: that save is the commit point. A lost condition changes nothing (the new piece is dropped again), a crash
before the commit leaves a piece no record refers to (``collect_orphans`` finds it; young
ones may belong to a write in flight, hence ``grace``), and pieces a commit replaced are
dropped after it. A reader that finds a piece gone (replaced under it) reads again.

Revisions never repeat over a key's life (the backend contract), so a layout record at the
revision a writer committed or read is exactly what it saw: the layer remembers the layouts of
the last records it wrote or read, and appends without reading first. A write of a key it
knows nothing of first tries to create it (``_new_key_likely``), which replaces nothing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol, runtime_checkable

import orjson

from ._bounded import Bounded
from ._model import now_ms
from ._segment_format import Chunk, Layout, Split, merge, merge_start
from ._telemetry import current
from .backends._base import (
    Backend,
    Batched,
    Closable,
    Expiring,
    Forgetting,
    Query,
    Record,
    Summary,
)
from .errors import BackendUnavailableError, ConflictError, UnreadableEnvelopeError

__all__ = ["INLINE_BYTES", "PIECES", "Collecting", "Segmented"]

PIECES = "segments"
"""The namespace that holds the pieces."""

INLINE_BYTES = 16 * 1024
"""History content kept in the layout record before it spills into a piece, unless the
backend declares its own ``segment_inline_bytes`` (where rewriting more bytes per put costs
less than a piece: one more round trip per read)."""

KNOWN_BYTES = 16 * 1024 * 1024
"""Inline history the layouts a store remembers may hold in all (``Segmented._remember``)."""

MAX_PIECES = 16
"""Pieces a record holds before new ones are merged, unless the backend declares its own
``segment_max_pieces`` (one that reads many records in one round trip: ``Batched``). Each
piece past it merges the newest run of pieces (``merge_start``); a backend that declares its
own count has its pieces written as a run, merged whole when it fills: an O(1) manifest, and
no merged piece rewritten (a dead row version, on PostgreSQL) on the way."""

_UNREAD = Layout((), b"", b"", "")  # remembered as existing, its layout too long to keep

PIECE_CACHE_BYTES = 16 * 1024 * 1024
"""Piece contents a store keeps in memory (pieces are immutable): the writer's own reads of
a long history then fetch only the layout record."""

_READS = 8  # a reader racing writers that replace pieces reads the layout again this often


@runtime_checkable
class Collecting(Protocol):
    """Optional: segments kept as objects of their own, which a writer that died between
    uploading a segment and committing its record leaves behind, referenced by no record."""

    def collect_orphans(self, *, delete: bool = False, grace: float = 300.0) -> int:
        """How many segment objects older than ``grace`` seconds no record refers to; with
        ``delete``, remove them. Younger ones may belong to a write still in flight."""
        ...


class Segmented(Closable):
    """``inner`` with ``save_split`` and ``append`` made of its five record operations and
    its ``segments`` namespace (see the module docstring). Everything else passes through."""

    def __init__(
        self, inner: Any, *, inline_bytes: int | None = None, max_segments: int | None = None
    ) -> None:
        self.inner: Backend = inner
        self.name = inner.name
        declared = getattr(inner, "segment_inline_bytes", INLINE_BYTES)
        self.inline_bytes: int = inline_bytes if inline_bytes is not None else declared
        # A whole write keeps its history inline, however long: one write, and a get of it
        # one read. The first append that outgrows ``inline_bytes`` moves it into a piece
        # (appends rewrite the inline content each time; a whole write does once). An
        # explicit ``inline_bytes`` holds for both (the tests make whole writes spill so).
        self.whole_inline_bytes = inline_bytes if inline_bytes is not None else sys.maxsize
        # Pieces a record holds before they are merged: a read costs one round trip a piece,
        # unless the backend reads many in one (``Batched``) and says how many. Its pieces
        # are then a run (``Layout.grown``), which is merged whole when it reaches that count.
        declared_pieces = getattr(inner, "segment_max_pieces", None)
        self.runs = declared_pieces is not None
        self.max_segments: int = max_segments or declared_pieces or MAX_PIECES
        self.create_first: bool = getattr(inner, "segment_create_first", True)
        self._pieces: Backend | None = None
        self._keeper: Expiring | None = None  # the pieces' backend, where pieces expire
        self._known: Bounded[tuple[int, Layout | None]] = Bounded(KNOWN_BYTES, count=256)
        self._contents: Bounded[bytes] = Bounded(PIECE_CACHE_BYTES)

    # -- the five operations -----------------------------------------------------------

    def load(self, key: str) -> Record | None:
        return self._reading(key, self._assembled)

    def load_many(self, keys: Sequence[str], last: int | None = None) -> list[Record | None]:
        """``[load(k) for k in keys]`` (with ``last``: ``[load_tail(k, last) for k in
        keys]``): the records in one round trip where the backend reads several at once
        (``Batched``), each then assembled as ``load`` (``load_tail``) does (a record that
        changed while its pieces were read is read again on its own)."""
        assemble = self._assembled if last is None else self._tail_of(last)
        if not isinstance(self.inner, Batched) or len(keys) < 2:
            return [self._reading(key, assemble) for key in keys]
        found: list[Record | None] = []
        for key, record in zip(keys, self.inner.load_many(keys), strict=True):
            if record is None:
                found.append(None)
                continue
            layout = Layout.unpack(record.body)
            whole = assemble(record, layout)
            if whole is None:
                found.append(self._reading(key, assemble))
                continue
            self._remember(key, record.summary.revision, layout)
            found.append(whole)
        return found

    def load_tail(self, key: str, count: int) -> Record | None:
        """``key``'s record holding at least the newest ``count`` entries of its history (a
        reader of the newest few: ``Store.get_json(key, last=count)``): a plain record as
        stored; a layout record with its inline content and only as many of its newest
        pieces as hold ``count`` entries, read newest first: as many pieces a round trip (where
        the backend batches) as the size of the entries seen so far says the rest take. What
        it holds of the history is its newest entries, in order; the rest of the record is
        whole.
        """
        return self._reading(key, self._tail_of(count))

    def _tail_of(self, count: int) -> Callable[[Record, Layout | None], Record | None]:
        return lambda record, layout: self._tail(record, layout, count) if layout else record

    def _reading(
        self, key: str, assemble: Callable[[Record, Layout | None], Record | None]
    ) -> Record | None:
        """``key``'s record, read again (up to ``_READS`` times) while ``assemble`` finds a
        piece of its layout gone, replaced by a newer write."""
        for _ in range(_READS):
            record = self.inner.load(key)
            if record is None:
                return None
            layout = Layout.unpack(record.body)
            whole = assemble(record, layout)
            if whole is not None:
                # What a later write of this store replaces, unless another writes between.
                self._remember(key, record.summary.revision, layout)
                return whole
        raise BackendUnavailableError(
            f"{self.name} load of {key!r}: the record kept changing while it was read",
            backend=self.name,
            operation="load",
        )

    def _tail(self, record: Record, layout: Layout, count: int) -> Record | None:
        held, start = _entries(layout.inline), len(layout.pieces)
        seen_bytes, seen_pieces = len(layout.inline), 0
        piece_bytes = float(self.inline_bytes)  # a run's pieces carry no size: about this
        contents: list[bytes] = []  # newest first
        summary = record.summary
        while held < count and start > 0:
            # As many pieces in one round trip as the size of an entry says the rest take:
            # of those seen so far, or before any, of the whole history's messages. Each piece
            # holds an entry or more, so never more pieces than entries wanted.
            entry = seen_bytes / held if held else summary.size / max(summary.message_count, 1)
            need, want = (count - held) * entry, 0
            while want < min(start, count - held):
                want += 1
                size = layout.pieces[start - want][1] or piece_bytes
                need -= size
                if need <= 0 or not size:
                    break
            start -= want
            read = self._read_pieces(
                record.key, [p for p, _ in layout.pieces[start : start + want]]
            )
            if any(content is None for content in read):
                # replaced meanwhile (read again) or gone: as a whole read says
                return self._assembled(record, layout, start)
            for content in reversed(read):
                assert content is not None
                contents.append(content)
                held += _entries(content)
                seen_bytes += len(content)
                seen_pieces += 1
            piece_bytes = (seen_bytes - len(layout.inline)) / seen_pieces
        return _with_body(record, layout.assemble(reversed(contents)))

    def whole(self, record: Record) -> Record | None:
        """``record`` as a reader gets it: a layout record assembled from its pieces (``None``
        if one is gone because the record was replaced meanwhile: read it again); any other
        record as it is. A piece missing from the record still stored raises
        ``UnreadableEnvelopeError`` naming it."""
        return self._assembled(record, Layout.unpack(record.body))

    def _assembled(self, record: Record, layout: Layout | None, start: int = 0) -> Record | None:
        """``record`` with its history assembled from its pieces from ``start`` on."""
        if layout is None:
            return record
        key = record.key
        pieces = layout.pieces[start:]
        contents = self._read_pieces(key, [piece for piece, _ in pieces])
        if all(c is not None for c in contents):
            return _with_body(record, layout.assemble(c for c in contents if c is not None))
        again = self.inner.head(key)
        if again is not None and again.revision == record.summary.revision:
            missing = [p for (p, _), c in zip(pieces, contents, strict=True) if not c]
            raise UnreadableEnvelopeError(
                f"record {key!r} (revision {again.revision}) refers to history segments "
                f"that are gone from the {self.name} store: {', '.join(missing)}",
                session_id=key,
                stored_preview="",
            )
        return None

    def head(self, key: str) -> Summary | None:
        return self.inner.head(key)

    def scan(self, query: Query) -> list[Summary]:
        return self.inner.scan(query)

    def scan_loaded(
        self, query: Query, last: int | None = None
    ) -> list[tuple[Summary, Record | None]]:
        """``scan``, each summary with its record as ``load_many(keys, last)`` reads it
        (``None``: deleted since it was listed): where the backend lists with its records
        (``scan_loaded``), one read of each serves both."""
        scan_loaded = getattr(self.inner, "scan_loaded", None)
        if not callable(scan_loaded):
            summaries = self.inner.scan(query)
            records = self.load_many([summary.key for summary in summaries], last)
            return list(zip(summaries, records, strict=True))
        assemble = self._assembled if last is None else self._tail_of(last)
        found: list[tuple[Summary, Record | None]] = []
        for summary, record in scan_loaded(query):
            layout = Layout.unpack(record.body)
            whole = assemble(record, layout)
            if whole is None:  # a piece gone: replaced since, read again
                found.append((summary, self._reading(summary.key, assemble)))
                continue
            self._remember(summary.key, record.summary.revision, layout)
            found.append((summary, whole))
        return found

    def save(
        self, record: Record, *, expect_revision: int | None = None, create_only: bool = False
    ) -> Summary:
        """A whole record; the pieces of the layout it replaces are dropped (but for those
        ``record`` names itself, if it is a layout record saved again as it was)."""
        if self._new_key_likely(record.key, expect_revision, create_only):
            try:
                return self.save(record, create_only=True)
            except ConflictError:
                pass  # it exists: read what it holds, then replace it
        old = None if create_only else self._layout(record.key, revision=expect_revision)
        try:
            summary = self.inner.save(
                record, expect_revision=expect_revision, create_only=create_only
            )
        except BaseException:
            self._forget(record.key)
            raise
        new = Layout.unpack(record.body)  # bytes that are a layout keep the pieces they name
        self._remember(record.key, summary.revision, new)
        self._drop_replaced(record.key, old, new)
        return summary

    def drop(self, key: str, *, expect_revision: int | None = None) -> bool:
        old = self._layout(key)
        dropped = self.inner.drop(key, expect_revision=expect_revision)
        self._forget(key)
        self._drop_pieces(key, old.pieces if old else ())
        return dropped

    def namespace(self, name: str) -> Backend:
        return self.inner.namespace(name)  # type: ignore[attr-defined, no-any-return]

    def setup(self) -> None:
        """The backend's ``setup`` (tables, indexes), where it has one, and the pieces'
        namespace's: made here, not by the first long history a process writes (a
        PostgreSQL namespace is a table of its own). A ``Store`` built on a ``Segmented``
        of its own sets up what is under it."""
        if callable(setup := getattr(self.inner, "setup", None)):
            setup()
            self._pieces_backend()

    def close(self) -> None:
        self.inner.close()

    @property
    def closed(self) -> bool:
        return getattr(self.inner, "closed", False) is True

    # -- growing histories ---------------------------------------------------------------

    def save_split(
        self,
        record: Record,
        split: Split,
        *,
        expect_revision: int | None = None,
        create_only: bool = False,
    ) -> Summary:
        """``save``, storing ``split`` as the record's head and its history content.
        ``record.body`` is empty: ``record.summary.size`` is the size of the assembled bytes."""
        layout = Layout((), split.head, split.segment, split.digest)
        limit = self.whole_inline_bytes
        spills = len(layout.inline) > limit  # then a refused create would write a piece twice
        if not spills and self._new_key_likely(record.key, expect_revision, create_only):
            try:
                return self._commit(record, layout, None, None, True, limit)
            except ConflictError:
                pass  # it exists: read what it holds, then replace it
        old = None if create_only else self._layout(record.key, revision=expect_revision)
        return self._commit(record, layout, old, expect_revision, create_only, limit)

    def append(
        self, summary: Summary, split: Split, *, base_revision: int, base_digest: str
    ) -> Summary | None:
        """Atomically, if the stored record is at ``base_revision`` with ``base_digest``:
        ``plan_save``'s rules (``summary.size``, the assembled size, kept), the head replaced
        and ``split.segment`` added to the history. Otherwise change nothing and return
        ``None``: another write came between, and the writer writes whole."""
        key = summary.key
        base = self._layout(key, revision=base_revision)
        if base is None or base.digest != base_digest:
            return None
        inline = merge([base.inline, split.segment])
        layout = Layout(base.pieces, split.head, inline, split.digest, base.run)
        try:
            return self._commit(
                Record(summary, b""), layout, base, base_revision, False, self.inline_bytes
            )
        except ConflictError as exc:
            if type(exc) is not ConflictError:
                raise  # ownership: the caller's full write reports it
            return None

    def _commit(
        self,
        record: Record,
        layout: Layout,
        old: Layout | None,
        expect_revision: int | None,
        create_only: bool,
        limit: int,
    ) -> Summary:
        """Write ``layout``'s new piece (if its inline content outgrew ``limit``), then the
        layout record on ``expect_revision``; drop the pieces it replaced."""
        key = record.key
        written: str | None = None
        with self._together():
            if len(layout.inline) > limit:
                layout, written = self._spill(key, layout)
            body = layout.pack()
            try:
                self._keep_pieces(key, layout, written)
                summary = self.inner.save(
                    Record(record.summary, body),
                    expect_revision=expect_revision,
                    create_only=create_only,
                )
            except ConflictError:
                self._forget(key)
                if written is not None:  # refused: nothing refers to the new piece
                    self._drop_pieces(key, ((written, 0),))
                raise
            except BaseException:
                self._forget(key)  # the save may have landed: its piece must stay, but its
                if written is not None:  # name may be written again if it did not
                    self._contents.pop(f"{key}#{written}")
                raise
            self._remember(key, summary.revision, layout)
            self._drop_replaced(key, old, layout)
        return summary

    def _together(self) -> AbstractContextManager[object]:
        """One transaction for a commit's new piece, layout record and replaced pieces, where
        the backend can make its writes one (``grouped()``: the SQLite store, whose put is
        then one sync); elsewhere each write is its own, as the module docstring says."""
        grouped = getattr(self.inner, "grouped", None)
        return grouped() if callable(grouped) else nullcontext()

    def _spill(self, key: str, layout: Layout) -> tuple[Layout, str]:
        """``layout`` with its inline content moved into a new piece. When the record would
        otherwise hold more than ``max_segments``, the new piece merges the newest run of
        pieces with it (``merge_start``) or, where pieces form a run, all of them."""
        pieces = layout.pieces
        start = len(pieces)
        if self.runs and pieces and not layout.run:
            start = 0  # listed pieces (an older write) become a run, once
        elif start + 1 > self.max_segments:
            start = 0 if self.runs else merge_start([n for _, n in pieces], self.max_segments)
        merged = self._read_pieces(key, [piece for piece, _ in pieces[start:]])
        if any(content is None for content in merged):
            raise ConflictError(f"record {key!r} changed while it was written", key=key)
        content = merge([*(c for c in merged if c is not None), layout.inline])
        fresh = os.urandom(8).hex()
        layout, piece = layout.grown(start, len(content), fresh=fresh, as_run=self.runs)
        self._pieces_backend().save(
            Record(_piece_summary(f"{key}#{piece}", key, len(content)), content),
            create_only=True,
        )
        self._contents.put(f"{key}#{piece}", content, len(content))
        if (operation := current()) is not None:
            operation.segments += 1
        return layout, piece

    # -- pieces --------------------------------------------------------------------------

    def _pieces_backend(self) -> Backend:
        if self._pieces is None:
            pieces: Backend = self.inner.namespace(PIECES)  # type: ignore[attr-defined]
            self._keeper = pieces if isinstance(pieces, Expiring) else None  # checked once
            self._pieces = pieces
        return self._pieces

    def _read_pieces(self, key: str, pieces: list[str]) -> list[bytes | None]:
        """The contents of ``pieces`` (``None`` for one that is gone): one round trip where
        the backend reads several records at once (``Batched``), else one per piece."""
        if not pieces:  # most records: their history is all inline
            return []
        keys = [f"{key}#{piece}" for piece in pieces]
        found = [self._contents.get(k) for k in keys]
        wanted = [k for k, content in zip(keys, found, strict=True) if content is None]
        if wanted:
            backend = self._pieces_backend()
            if isinstance(backend, Batched) and len(wanted) > 1:
                records = backend.load_many(wanted)
            else:
                records = [backend.load(k) for k in wanted]
            read = {k: r.body for k, r in zip(wanted, records, strict=True) if r is not None}
            for k, content in read.items():
                self._contents.put(k, content, len(content))
            found = [read.get(k) if c is None else c for k, c in zip(keys, found, strict=True)]
        return found

    def _keep_pieces(self, key: str, layout: Layout, written: str | None) -> None:
        """Before a commit: a fresh expiry for the pieces ``layout`` keeps (where pieces
        expire, ``Expiring``); the one just ``written`` has its own."""
        if not layout.pieces:  # most writes
            return
        kept = [f"{key}#{piece}" for piece, _ in layout.pieces if piece != written]
        if kept:
            self._pieces_backend()  # opened once: learns whether its records expire
            if self._keeper is not None:
                self._keeper.keep(kept)

    def _drop_replaced(self, key: str, old: Layout | None, new: Layout | None) -> None:
        """After a commit of ``new`` over ``old``: drop the pieces ``new`` no longer keeps."""
        if old is None or not old.pieces:  # most writes: none to drop
            return
        kept = {piece for piece, _ in new.pieces} if new else set()
        self._drop_pieces(key, [p for p in old.pieces if p[0] not in kept])

    def _drop_pieces(self, key: str, pieces: Iterable[tuple[str, int]]) -> None:
        """Drop pieces no record refers to any longer; one that stays (a fault) is an orphan
        for ``collect_orphans``, never a reason to fail a write that landed."""
        pieces = list(pieces)
        if not pieces:  # most writes: no namespace to open, no protocol check (~25 us)
            return
        backend = self._pieces_backend()
        remove = backend.forget if isinstance(backend, Forgetting) else backend.drop
        for piece, _ in pieces:
            self._contents.pop(f"{key}#{piece}")
            try:
                remove(f"{key}#{piece}")
            except Exception:
                return

    def collect_orphans(self, *, delete: bool = False, grace: float = 300.0) -> int:
        """Pieces older than ``grace`` seconds that no layout record refers to; with
        ``delete``, dropped (each on the revision seen, so nothing newer goes). What the
        backend itself collects (a disk store's temp files of killed writers) is included."""
        found, pieces = 0, self._opened_pieces()
        for backend in (self.inner, *pieces):
            if callable(collect := getattr(backend, "collect_orphans", None)):
                found += int(collect(delete=delete, grace=grace))
        for backend in pieces:
            found += self._collect_pieces(backend, delete=delete, grace=grace)
        return found

    def _opened_pieces(self) -> tuple[Backend, ...]:
        """The pieces' backend, unless the store has never had one: a backend whose
        namespaces make storage (``namespace_exists``) is then left as it was."""
        exists = getattr(self.inner, "namespace_exists", None)
        if self._pieces is None and callable(exists) and not exists(PIECES):
            return ()
        return (self._pieces_backend(),)

    def _collect_pieces(self, pieces: Backend, *, delete: bool, grace: float) -> int:
        cutoff = now_ms() - int(grace * 1000)
        found, after = 0, None
        referenced: dict[str, set[str]] = {}
        while True:
            page = pieces.scan(
                Query(saved_before=cutoff, after=after, limit=500, oldest_first=True)
            )
            for summary in page:
                key, _, piece = summary.key.rpartition("#")
                if key not in referenced:
                    record = self.inner.load(key)
                    layout = None if record is None else Layout.unpack(record.body)
                    referenced[key] = {p for p, _ in layout.pieces} if layout else set()
                if piece in referenced[key]:
                    continue
                found += 1
                if delete:
                    try:
                        pieces.drop(summary.key, expect_revision=summary.revision)
                    except ConflictError:
                        found -= 1
            if len(page) < 500:
                return found
            after = (page[-1].saved_at, page[-1].key)

    # -- what this layer remembers -------------------------------------------------------

    def _new_key_likely(self, key: str, expect_revision: int | None, create_only: bool) -> bool:
        """Whether an unconditional write should first try to create ``key``: this layer
        knows nothing of it, so it would otherwise read the record (one round trip) only to
        learn which pieces the write replaces. A run's first checkpoint is such a write, and
        a creation replaces nothing; a refused one costs one round trip before the read."""
        if create_only or expect_revision is not None or not self.create_first:
            return False
        return key not in self._known

    def _layout(self, key: str, *, revision: int | None = None) -> Layout | None:
        """The layout stored under ``key`` (at ``revision``, if given): remembered when this
        layer committed it, else read.

        A write that states no revision (``revision`` None) takes the remembered layout as
        what it replaces, without a read: if another writer replaced it meanwhile, the pieces
        of that writer's layout are left behind, for ``collect_orphans`` (nothing a record
        refers to is ever dropped: the write replaces the record that referred to them)."""
        known = self._known.get(key)
        if known is not None and revision in (None, known[0]) and known[1] is not _UNREAD:
            return known[1]
        record = self.inner.load(key)
        if record is None or (revision is not None and record.summary.revision != revision):
            return None
        return Layout.unpack(record.body)

    def _remember(self, key: str, revision: int, layout: Layout | None) -> None:
        """Keep the layout stored at ``revision``, unless a newer one is known: a slow read
        finishing after another thread's write must not bring back what that write replaced
        (a key's revisions only grow, across deletes too). Layouts hold their inline
        history, which a whole write leaves long: at most ``KNOWN_BYTES`` of it in all, and
        one longer than an eighth of that only as known to exist (read again to append)."""
        size = len(layout.inline) if layout is not None else 0
        if size > KNOWN_BYTES // 8:
            layout, size = _UNREAD, 0
        self._known.put(key, (revision, layout), size, unless=lambda known: known[0] > revision)

    def _forget(self, key: str) -> None:
        self._known.pop(key)


def _entries(content: Chunk) -> int:
    """History entries in ``content`` (the history array's contents, or a part of them made
    of whole entries); bytes that are not JSON count as enough, and their reader reports
    them unreadable."""
    if not content:
        return 0
    try:
        return len(orjson.loads(b"".join((b"[", content, b"]"))))
    except orjson.JSONDecodeError:
        return sys.maxsize


def _with_body(record: Record, body: bytes) -> Record:
    """``record`` assembled: ``body``, and the summary sized to it (as stored, most often)."""
    s = record.summary
    if s.size != len(body):
        s = s.revised(owner=s.owner, revision=s.revision, size=len(body))
    return Record(s, body)


def _piece_summary(piece_key: str, key: str, size: int) -> Summary:
    return Summary(piece_key, key, now_ms(), None, None, None, None, 0, size, 0)
