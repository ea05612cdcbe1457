"""The bytes a rank's S3 reads brought back (issue 64): over S3 there is no page cache and no block device
on the reading node, so the dataset's bytes are what the rank's GETs received, counted by its loader's
workers in one shared counter (bench.loaders.s3_get) and sampled here like the file counters.

Why the rank's own count and not a server counter: the server's (RGW's usage log, the OSD's reads) is
not reachable from every node and counts every client; the suite cross-checks the two in its tests
(tests/bench/s3/), within 2%.
"""

from __future__ import annotations


class S3BytesSource:
    name = "s3"

    def __init__(self, received) -> None:
        self.received = received  # a multiprocessing.Value the loader's workers add to

    def sample(self) -> dict[str, int]:
        return {"s3_read_bytes": int(self.received.value)}
