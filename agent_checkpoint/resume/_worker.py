"""The resume worker loop: find failed runs, claim one at a time, resume, store the result.

Several workers (threads, processes, machines) can run it against one store: a run is claimed
before it is touched, re-read after the claim (another worker may have resumed it meanwhile),
and the result is written through the claim, so a worker that lost its lease cannot overwrite
the newer state. A handler that raises leaves the run as it was, and the claim is released.

Workers list the same runs in the same order, so most of what one lists is resumed by another
before it gets there. Each listed run's head is read first (one read) and a run that is no
longer failed is skipped without claiming it: a claim is a conditional write, a read and a
release. The re-read after the claim stays the check that decides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .._claims import Claim, ClaimedError
from .._model import RunCheckpoint
from .._store import Store, check_store
from .._store_types import check_count, ttl_ms
from ..errors import InvalidArgumentError, LeaseError, NotFoundError
from ._seed import ResumeSeed, resume_on_error

__all__ = ["Handler", "WorkerReport", "resume_failed_runs"]

Handler = Callable[[ResumeSeed, Claim], RunCheckpoint | None]
"""Runs the resumed agent from the seed and returns its next checkpoint (``None``: store the
seed's own checkpoint, i.e. the run restored without its failure point)."""


@dataclass
class WorkerReport:
    resumed: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    skipped: int = 0


def resume_failed_runs(
    store: Store,
    handler: Handler,
    *,
    worker: str,
    ttl: float = 300.0,
    agent_id: str | None = None,
    owner: str | None = None,
    agent_filter: str | None = None,
    phase: str | None = None,
    limit: int | None = None,
) -> WorkerReport:
    """Resume failed runs (newest first) until none are left or ``limit`` were resumed."""
    check_store(store, "resume_failed_runs")
    if not isinstance(worker, str) or not worker:
        raise InvalidArgumentError(f"worker must be a non-empty name, got {worker!r}")
    ttl_ms(ttl)  # refused now, not at the first failed run found
    if limit is not None:
        check_count(limit, "limit", least=1)
    report = WorkerReport()
    for summary in store.iter_summaries(
        failed=True, owner=owner, agent_id=agent_filter, phase=phase, page_size=100
    ):
        if limit is not None and len(report.resumed) >= limit:
            break
        current = store.head(summary.key)
        if current is None or current.failure_phase is None:
            report.skipped += 1  # resumed (or deleted) by another worker since it was listed
            continue
        try:
            claim = store.claim(summary.key, worker, ttl=ttl)
        except (ClaimedError, NotFoundError):
            report.skipped += 1
            continue
        with claim:
            checkpoint = claim.get()
            if checkpoint is None or checkpoint.failure_point is None:
                report.skipped += 1  # resumed by another worker since it was listed
                continue
            try:
                seed = resume_on_error(checkpoint, agent_id=agent_id)
                result = handler(seed, claim)
                claim.put(result if result is not None else seed.checkpoint())
            except LeaseError as exc:
                report.failed.append((summary.key, str(exc)))
                continue
            except Exception as exc:  # the handler's failure: the run stays as it was
                report.failed.append((summary.key, f"{type(exc).__name__}: {exc}"))
                continue
            report.resumed.append(summary.key)
    return report
