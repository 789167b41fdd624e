"""How the S3 backend reaches its bucket (``s3.py`` holds the backend): the boto3 client
``from_url`` builds, the check that the bucket exists (creating it on request), the
translation of botocore's errors into the library's, and the threads that send requests in
parallel.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError, IncompleteReadError
from botocore.exceptions import ConnectionError as BotoConnectionError
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random_exponential

from ..errors import BackendError, BackendUnavailableError
from .base import translate_errors
from .s3_writes import error_code, error_status

T = TypeVar("T")
R = TypeVar("R")

PAGE = 1000
TRANSIENT = (BotoConnectionError, HTTPClientError, IncompleteReadError)
THROTTLED = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestLimitExceeded"}
    | {"TooManyRequests", "ServiceUnavailable", "InternalError"}
)


# After a create, the gateway may still answer "no such bucket" for a while: SeaweedFS caches a
# miss for at least 30 s, and a request racing another client's create can cache it just after
# the create cleared it. The first operation waits for the bucket to be seen, this long at most.
VISIBLE_WITHIN = 60.0


def _not_yet_visible(exc: BaseException) -> bool:
    return isinstance(exc, ClientError) and error_code(exc) == "NoSuchBucket"


class S3Bucket:
    """The client, bucket and request threads of an ``S3Backend``, which sets them up."""

    name: str
    client: Any
    bucket: str
    _records: str
    _create: bool
    _region: str | None
    _bucket_checked: bool
    _bucket_lock: threading.Lock
    _lock: threading.Lock
    _closed: bool
    _pool: ThreadPoolExecutor | None
    _segment_threads: ThreadPoolExecutor | None

    @classmethod
    def _connect(cls, endpoint_url: str | None, region: str | None, profile: str | None) -> Any:
        """A new boto3 client, for ``from_url`` to own."""
        config = Config(
            # the Store's retry policy governs; botocore's own retries would hide faults
            retries={"mode": "standard", "total_max_attempts": 1},
            connect_timeout=5,
            read_timeout=20,  # losing conditional racers may wait seconds for their 412
            max_pool_connections=32,
            s3={"addressing_style": "path"} if endpoint_url else None,
        )
        with translate_errors(cls.name, "open", transient=TRANSIENT, fatal=(BotoCoreError,)):
            session = boto3.session.Session(profile_name=profile)
            return session.client(
                "s3", endpoint_url=endpoint_url, region_name=region, config=config
            )

    def _map(self, fn: Callable[[T], R], items: Sequence[T], *, segments: bool = False) -> list[R]:
        """``fn`` over ``items`` in parallel; ``segments``: on the segment threads, a pool of
        their own, since loads run on the other one (a load waiting there on its own pool
        could wait forever). After ``close()`` items run one by one: no threads are left."""
        pool = None
        if len(items) > 1:
            with self._lock:
                pool = None if self._closed else self._threads(segments)
        if pool is None:
            return [fn(item) for item in items]
        return list(pool.map(fn, items))

    def _threads(self, segments: bool) -> ThreadPoolExecutor:
        """The pool ``_map`` runs on, made on first use (called under ``_lock``)."""
        if segments:
            if self._segment_threads is None:
                self._segment_threads = ThreadPoolExecutor(
                    16, thread_name_prefix="agent-checkpoint-s3-segments"
                )
            return self._segment_threads
        if self._pool is None:
            self._pool = ThreadPoolExecutor(16, thread_name_prefix="agent-checkpoint-s3")
        return self._pool

    def _check_bucket(self, operation: str) -> None:
        """A missing bucket would read as missing keys (a GET's 404 on a key names no bucket),
        so the first operation checks the bucket once, one thread at a time, with a listing
        of one key: it reaches the bucket the way object requests do, and needs what HeadBucket
        needs (s3:ListBucket). A 403 (a policy scoped to the prefix) proves nothing: with
        ``create_bucket`` the create is tried anyway, and a 403 to it is no answer either."""
        if self._bucket_checked:
            return
        with self._bucket_lock, self._translate(operation):
            if self._bucket_checked:
                return
            try:
                self._probe()
            except ClientError as exc:
                if error_status(exc) == 403:
                    if self._create:  # no wait after it: a listing cannot tell here either
                        self._create_bucket(denied_is_fine=True)
                    self._bucket_checked = True
                    return
                if error_status(exc) != 404:
                    raise
                if not self._create:
                    raise BackendError(
                        f"s3 bucket {self.bucket!r} does not exist; create it, or open the "
                        "store with create_bucket=True",
                        backend=self.name,
                        operation=operation,
                    ) from exc
                self._create_bucket()
                self._await_bucket()
            self._bucket_checked = True

    def _probe(self) -> None:
        self.client.list_objects_v2(Bucket=self.bucket, Prefix=self._records, MaxKeys=1)

    def _create_bucket(self, *, denied_is_fine: bool = False) -> None:
        """Create the bucket; another client creating it first is success. Matched by error
        code, not by ``client.exceptions``: botocore builds those classes lazily and threads
        racing the first call can get different classes for the same code."""
        location = {"LocationConstraint": self._region}
        try:
            if self._region and self._region != "us-east-1":
                self.client.create_bucket(Bucket=self.bucket, CreateBucketConfiguration=location)
            else:
                self.client.create_bucket(Bucket=self.bucket)
        except ClientError as exc:
            if error_code(exc) == "BucketAlreadyOwnedByYou":
                return
            if not (denied_is_fine and error_status(exc) == 403):
                raise

    def _await_bucket(self) -> None:
        """Return once the bucket just created (by us or by a racing client) is seen; still
        missing after ``VISIBLE_WITHIN`` seconds, ``NoSuchBucket`` is raised. A 403 (a
        policy that allows creating the bucket but not listing it) cannot tell: go on."""
        try:
            Retrying(
                retry=retry_if_exception(_not_yet_visible),
                wait=wait_random_exponential(multiplier=0.05, max=2.0),
                stop=stop_after_delay(VISIBLE_WITHIN),
                reraise=True,
            )(self._probe)
        except ClientError as exc:
            if error_status(exc) != 403:
                raise

    @contextmanager
    def _translate(self, operation: str) -> Iterator[None]:
        try:
            with translate_errors(
                self.name, operation, transient=TRANSIENT, fatal=(BotoCoreError,)
            ):
                yield
        except ClientError as exc:
            code, status = error_code(exc), error_status(exc)
            detail = f"bucket {self.bucket!r} does not exist" if code == "NoSuchBucket" else exc
            transient = code in THROTTLED or status == 429 or status >= 500
            raise (BackendUnavailableError if transient else BackendError)(
                f"s3 {operation} failed: {code or status}: {detail}",
                backend=self.name,
                operation=operation,
            ) from exc
