"""A rank's GETs from the store under test (issue 64): every byte received counted, every failed try
counted and tried again, shared by every loader that reads over S3 (the emulated ranks' records,
bench.loaders.s3_records; the image models' JPEGs and masks, bench.loaders.s3_images).

Why boto3 GETs in the loader's worker processes: each worker opens its own client (a client is not
safe across fork), so `threads` workers are `threads` connections in flight, as MLPerf Storage's object
readers run them. No client-side cache sits in between: every byte a rank consumed crossed the wire.

The bytes each rank received are counted in a shared counter (`received`), sampled like the file
counters (bench.metrics.sources.s3: `bytes_source` `s3`); a GET that came back short is an error, not a
smaller sample (a body cut short is botocore's IncompleteReadError, tried again below; a whole response
of the wrong size is a DatasetError at once).

A store that drops connections: each GET is tried GET_ATTEMPTS times (GET_BACKOFF_S doubling between
tries), here and not inside boto3, so that every failed try is counted (`errors`, shared by the
workers); the rank's summary carries the count and the verdict makes such a scale INCONCLUSIVE naming
it (its figures hold the store's stalls). An object whose every try failed ends the run (StorageLost),
as a lost mount does: never a silently shorter epoch.
"""

from __future__ import annotations

import multiprocessing
import os
import time

from bench.data.location import S3Location, node_s3_client
from bench.errors import DatasetError, StorageLost

GET_ATTEMPTS = 5
GET_BACKOFF_S = 0.5  # before the 2nd try; doubled before each next one (7.5 s over all five)

# What a busy or throttling store answers with, worth another try (besides any 5xx)
BUSY_CODES = frozenset({"SlowDown", "RequestTimeout", "Throttling", "ThrottlingException", "RequestLimitExceeded"})


def _retryable() -> tuple[type[Exception], ...]:
    """What a dropped or refused connection, a timeout or a 5xx raises in botocore."""
    from botocore import exceptions as e

    return (
        e.ClientError,
        e.ConnectionError,  # refused, a connect timeout (botocore's, not the builtin)
        e.ConnectionClosedError,  # reset or closed before the response
        e.IncompleteReadError,
        e.ReadTimeoutError,
        e.ResponseStreamingError,
    )


def server_side(error: Exception) -> bool:
    """An error the server may not repeat: no response at all (a dropped or refused connection), a 5xx,
    a 429 or a busy store's code; other ClientErrors (403, 404) are answers, never tried again."""
    response = getattr(error, "response", None)
    if not isinstance(response, dict):
        return True
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    return status >= 500 or status == 429 or response.get("Error", {}).get("Code") in BUSY_CODES


class CountedGets:
    """GETs under one prefix with the node's own credentials, on a client per process (a forked loader
    worker opens its own), counting into counters every worker shares: `received` (bytes), `errors`
    (failed tries). Picklable into DataLoader workers: the client is not carried, only the counters."""

    def __init__(self, location: S3Location) -> None:
        self.location = location
        self.received = multiprocessing.Value("q", 0)  # shared with the forked workers
        self.errors = multiprocessing.Value("q", 0)
        self._client, self._pid = None, None

    def __getstate__(self) -> dict:
        return self.__dict__ | {"_client": None, "_pid": None}

    def _connection(self):
        if self._client is None or self._pid != os.getpid():
            self._client, self._pid = node_s3_client(retries=1), os.getpid()  # every try is ours to count
        return self._client

    def get(self, name: str, offset: int | None = None, length: int | None = None, what: str = "object") -> bytes:
        """Object `name` under the prefix (the bytes at offset..offset+length when given), tried up to
        GET_ATTEMPTS times; a response of another size than `length` is a DatasetError naming it."""
        key = self.location.key(name)
        ranged = {} if offset is None or length is None else {"Range": f"bytes={offset}-{offset + length - 1}"}
        where = f"{what} at {offset}" if ranged else what
        retryable = _retryable()
        wait, last = GET_BACKOFF_S, ""
        for attempt in range(GET_ATTEMPTS):
            if attempt:
                time.sleep(wait)
                wait *= 2
            try:
                data = self._connection().get_object(Bucket=self.location.bucket, Key=key, **ranged)["Body"].read()
            except retryable as error:
                if not server_side(error):
                    raise
                last = f"{type(error).__name__}: {error}"
            else:
                with self.received.get_lock():
                    self.received.value += len(data)
                if length is not None and len(data) != length:  # a whole response of the wrong size: the object
                    ignored = ", or the store ignored Range" if ranged else ""
                    raise DatasetError(
                        f"s3://{self.location.bucket}/{key}: a GET of the {length}-byte {where} returned "
                        f"{len(data)} (the object is not what the manifest says{ignored})"
                    )
                return data
            with self.errors.get_lock():
                self.errors.value += 1
        raise StorageLost(
            f"s3://{self.location.bucket}/{key}: {GET_ATTEMPTS} GETs of the {where} failed ({last}): "
            "the store dropped or refused the connections"
        )
