"""Benchmark section 17: is the emulation itself ever the bottleneck? (issue 39)

One emulated rank (retinanet-b200's profile: 24 records of 322957 bytes per 0.04755 s, so 163 MB/s at
AU 1) reads a generated JPEG set from this machine's disk, unthrottled, evicted before every run; its
per-rank MB/s (records per measured second x record bytes) over that demand, per repeat, with a 95% t-interval
on the mean log ratio. Target >= 0.95: the read path plus the timed wait keep up with the accelerator.
Run with 1 and 2 reader threads: on these 2 shared cores one thread's cold preads at queue depth 1 are
the candidate limit, not the wait.
"""

from __future__ import annotations

import statistics
import sys

from runner import Context, main_for, ratio_interval, train

NUMBER = 17
TITLE = "emulation overhead"

BATCH, RECORD, SECONDS = 24, 322957, 0.04755
DEMAND_MB_S = BATCH * RECORD / SECONDS / 1e6


def run(ctx: Context) -> None:
    from bench.data.records import RecordsSpec, generate_records

    data = ctx.tmp / "records"
    generate_records(RecordsSpec("jpeg", 1536, 1, RECORD, 0, seed=4), data)
    for threads in (1, 2):
        ratios, aus = [], []
        for _ in range(max(ctx.repeats, 3)):
            args = ["--workload", "retinanet-b200", "--data", str(data), "--accelerator-s", repr(SECONDS)]
            args += ["--accelerator", "retinanet-b200", "--record-format", "jpeg", "--batch-size", str(BATCH)]
            args += ["--loader-threads", str(threads), "--epochs", "1", "--warmup-steps", "2", "--backend", "ddp"]
            s = train(args)
            rank = s["per_rank"][0]
            # measured steps only (warm-up excluded): records per second x record bytes
            ratios.append(rank["images_per_s"] * RECORD / 1e6 / DEMAND_MB_S)
            aus.append(rank["breakdown"]["au"])
        mid, low, high = ratio_interval(ratios)
        ctx.add(
            "17 emulation",
            f"1 rank, {threads} reader thread(s): per-rank MB/s / {DEMAND_MB_S:.0f} MB/s demand",
            f"{mid:.3f}",
            f"target >= 0.95; 95% CI [{low:.3f}, {high:.3f}], {len(ratios)} runs; "
            f"median AU {statistics.median(aus):.3f}",
        )


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
