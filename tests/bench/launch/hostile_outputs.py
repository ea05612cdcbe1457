"""A run's output folder as a hostile cluster side could leave it: links to a worker's secret or to
/dev/zero, and FIFOs, next to the regular records, summary and logs ranks write."""

from __future__ import annotations

import contextlib
import json
import os
import resource
from collections.abc import Iterator
from pathlib import Path

from tests.bench.launch.summaries import valid_summary

SECRET = "postgresql://scalewatch:S3CRET-pw@db.internal/scalewatch"
PLANTED = ("secret", "/dev/zero", "fifo")


def worker_secret(tmp_path: Path) -> Path:
    """A file only the worker has, holding the metadata database's URL as an Airflow config would."""
    path = tmp_path / "worker" / "airflow.cfg"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"rank": 1, "host": SECRET, "exit_code": 0, "sql_alchemy_conn": SECRET}) + "\n")
    return path


def run_folder(root: Path, ranks: int = 2) -> Path:
    """An output folder as ranks leave it: records, a valid summary, one log per rank."""
    for part in ("ranks", "metrics", "logs"):
        (root / part).mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        (root / "ranks" / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "host": "n1", "exit_code": 0}))
        (root / "logs" / f"rank{rank}.log").write_text("".join(f"rank {rank} step {i}\n" for i in range(50)))
    (root / "metrics" / "summary.json").write_text(json.dumps(valid_summary()))
    return root


def plant(path: Path, planted: str, secret: Path) -> None:
    """Put at `path` a link to the worker's secret ("secret") or to /dev/zero, or a FIFO ("fifo")."""
    path.unlink(missing_ok=True)
    if planted == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(secret if planted == "secret" else Path(planted))


def handle_for(out: Path, ranks: int = 2, backend: str = "slurm") -> dict:
    return {"backend": backend, "run_id": "r", "output_dir": str(out), "job_id": "7", "ranks": ranks}


@contextlib.contextmanager
def memory_bound(extra: int = 2 << 30) -> Iterator[None]:
    """At most `extra` more address space inside: a regression that reads /dev/zero whole fails with
    MemoryError instead of exhausting a shared machine's memory."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    in_use = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (in_use + extra, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
