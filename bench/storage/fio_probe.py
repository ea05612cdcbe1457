"""The storage's read ceiling: fio reads the staged dataset's own files, cold, at rising parallelism.

Why fio and the dataset's files: the loader's figure is bounded by the loader (one core of JPEG
decode reads ~30 MB/s here) long before the storage; fio reads the same files with no decode, so its
plateau is what the storage can serve to this client. Direct I/O keeps every pass cold; where the
filesystem refuses O_DIRECT (FUSE mounts without `direct_io`) or most files are under one block, each
file's pages are evicted first (fio's `invalidate`) and every level reads its sample once. Each job
reads a disjoint share of the sample so no job is served from pages another job just read, and each
read starts after the files the reads before it touched, so a storage server's cache (which no
client-side flag empties) serves none of it while the sample lasts; a read that had to come back to
touched files is marked `fresh: false`.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.config.models import ProbingSettings
from bench.config.types import default_of
from bench.errors import BenchError

MIN_LEVEL_S = 1.0  # a level measured for less is too short to call a sustained rate
# fio ends a job capped at `runtime=1` a millisecond or two short of it (runtime 999 ms): a level read to its
# cap is the sustained second it was asked for, not a sample that ran out (it made a default probe at
# probe_seconds 0.5 inconclusive now and then, "432.5 MB in 1.00 s (under 1 s)")
LEVEL_TIMER_SLACK_S = 0.02


def too_short(seconds: float) -> bool:
    """A level read for less than MIN_LEVEL_S, beyond fio's timer slack: no sustained rate."""
    return seconds < MIN_LEVEL_S - LEVEL_TIMER_SLACK_S


PLATEAU_GAIN = 0.05  # two doublings that add less than this end the climb
MIN_DIRECT_BLOCK = 4096  # the logical block of 4Kn devices: the smallest direct read that works on all
MIN_BLOCK = 512
# What a file name (relative to its dataset) and a dataset folder may hold to reach fio's job file: the
# characters bench.config's SafePath allows. fio's job file is line- and option-based, so a newline in a
# name would add options (exec_prerun runs a command); `:` separates file names and `\\` escapes. No
# spaces either: refused rather than trusted to fio's trimming of option values.
SAFE_NAME_RE = re.compile(r"[A-Za-z0-9._/+@,=-]+")


class ProbeError(BenchError):
    """The probe could not measure: fio missing or failing (a path that is not a staged dataset is a
    DatasetError: bad input, not a failed measurement)."""


@dataclass(frozen=True)
class ProbeSettings:
    max_jobs: int = default_of(ProbingSettings, "probe_max_jobs")
    seconds: float = default_of(ProbingSettings, "probe_seconds")  # per level, direct I/O, the sample re-read cold
    max_files: int = 4096  # files sampled across the dataset (evenly spaced in the manifest)
    fio: str = "fio"


@dataclass
class ProbeResult:
    paths: list[str]
    ceiling_mb_s: float
    levels: list[dict]  # {"jobs", "mb_s", "bytes", "seconds", "fresh"}
    repeat: dict  # the best level read once more, after the climb (same keys as a level)
    block_size: int
    sample_files: int
    sample_bytes: int
    method: str  # "direct" or "buffered, evicted"
    conclusive: bool
    reason: str = ""
    fio_version: str = ""
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def sample_files(dirs: list[Path], max_files: int) -> list[tuple[Path, int]]:
    """(path, size) of the staged datasets' files: only trees with a scalewatch manifest are probed (a
    staged tree's MANIFEST.json, or a records folder's records.json: bench.data.records)."""
    from bench.data.records import RECORDS_MANIFEST, load_records
    from bench.data.stage import MANIFEST, load_manifest
    from bench.errors import DatasetError

    by_dir: dict[Path, list[tuple[Path, int]]] = {}
    for d in dirs:
        files = by_dir.setdefault(d, [])
        safe_name(d, str(d), "dataset folder")
        if (d / RECORDS_MANIFEST).is_file() and not (d / MANIFEST).exists():
            listed = load_records(d)["files"]
            files += [(d / safe_name(d, f["name"]), int(f["bytes"])) for f in listed if f["bytes"] > 0]
            continue
        try:
            doc = load_manifest(d)
        except DatasetError as error:
            raise DatasetError(f"--path {d}: not a staged dataset ({error}); stage it first (no {MANIFEST})") from None
        for rel, entry in doc["files"].items():
            path = d / safe_name(d, rel)
            if path.is_file() and not path.is_symlink() and entry.get("size", 0) > 0:
                files.append((path, int(entry["size"])))
    files = largest_read(by_dir)
    if not files:
        raise DatasetError(f"--path {', '.join(map(str, dirs))}: the staged dataset lists no readable files")
    if len(files) > max_files:  # evenly spaced: every part of the tree, not the first directory only
        step = len(files) / max_files
        files = [files[int(i * step)] for i in range(max_files)]
    return files


def largest_read(by_dir: dict[Path, list[tuple[Path, int]]]) -> list[tuple[Path, int]]:
    """Only the files of the datasets whose fitted block is the largest. One fio block size serves a
    level, and fio reads nothing of a file under one block: with an emulated workload's 323 kB records
    beside a real model's 8 kB images, a block fitted to the median read nothing from the images, and the
    shares of the images' jobs read nothing at all (README command 1's probe failed so). The ceiling is
    then the storage's for the largest reads the suite makes, the figure its bandwidth-bound workloads
    meet; datasets of small files read far below it (their loaders bind first)."""
    blocks = {d: fitted_block_size([s for _, s in fs]) for d, fs in by_dir.items() if fs}
    top = max(blocks.values(), default=0)
    return [f for d, fs in by_dir.items() if blocks.get(d) == top for f in fs]


def safe_name(d: Path, name: str, what: str = "file") -> str:
    """`name` when it is safe to write into an fio job file (SAFE_NAME_RE; a name in a dataset relative,
    with no `..`): a name from a manifest or a folder listing is anyone's who can write to the store, and
    fio runs what its job file says. Raises DatasetError naming the file before any job file exists."""
    from bench.errors import DatasetError

    bad = not SAFE_NAME_RE.fullmatch(name)
    if what == "file":  # the user's own --path may climb with '..'; a listed name may not leave it
        bad = bad or name.startswith("/") or ".." in Path(name).parts
    if bad:
        raise DatasetError(
            f"--path {d}: {what} name {name!r} is refused: the probe takes only letters, digits and "
            "._/+@,=- in names (no spaces, control characters, '..' or ':'); rename it"
        )
    return name


def fitted_block_size(sizes: list[int]) -> int:
    """The largest power of two at or below the median file size, 512 B to 1 MiB: one read per small
    file. fio reads whole blocks only (nothing of a file under one block), so it is never above the
    median; under 4 KiB the probe reads buffered (see MIN_DIRECT_BLOCK)."""
    median = statistics.median(sizes)
    return int(min(1 << 20, max(MIN_BLOCK, 1 << int(math.log2(max(median, 1))))))


def levels_for(max_jobs: int, files: int) -> list[int]:
    out, n = [], 1
    while n <= max_jobs and n <= files:
        out.append(n)
        n *= 2
    return out


FIO_LINE_MAX = 3800  # fio reads job-file lines into a 4096-character buffer


def _escape(name: str) -> str:
    return name.replace("\\", "\\\\").replace(":", "\\:")


def _shares(files: list[tuple[Path, int]], start: int, jobs: int) -> list[list[int]]:
    """Each job's files (indices into the sample): job j reads every j-th file from `start` on (disjoint
    shares: no job reads pages another has just cached), cut to what one fio option line holds."""
    root = _root(files)
    shares = []
    for j in range(jobs):
        share, used = [], 0
        for pos in range(j, len(files), jobs):
            i = (start + pos) % len(files)
            used += len(_escape(str(files[i][0].relative_to(root)))) + 1
            if used > FIO_LINE_MAX:
                break
            share.append(i)
        shares.append(share)
    return shares


def _root(files: list[tuple[Path, int]]) -> Path:
    return Path(os.path.commonpath([str(p.parent) for p, _ in files]))


def _jobfile(
    files: list[tuple[Path, int]], shares: list[list[int]], bs: int, direct: bool, seconds: float, cap: bool = False
) -> str:
    """One fio job per share, each reading its files one after another (as a loader's worker reads whole
    files), named relative to the sample's common folder. `cap`: a buffered read stops after `seconds`
    too (nodes reading together must read over the same window, not each its whole share)."""
    root = _root(files)
    lines = [
        "[global]",
        "rw=read",
        f"bs={bs}",
        "ioengine=psync",
        f"direct={int(direct)}",
        "invalidate=1",
        "file_service_type=sequential",
        "thread",
        f"directory={_escape(str(root))}",
    ]
    if direct:
        lines += ["time_based=1", f"runtime={max(1, round(seconds))}"]
    elif cap:
        lines += [f"runtime={max(1, round(seconds))}"]
    for j, share in enumerate(shares):
        names = [_escape(str(files[i][0].relative_to(root))) for i in share]
        lines += [f"[reader{j}]", "filename=" + ":".join(names)]
    return "\n".join(lines) + "\n"


def _fio_process() -> dict:
    """Where fio runs and with what: from `/`, with the allow-listed environment (bench.launch.environment),
    as everything the suite starts on a node (its job file and the files it reads are absolute paths)."""
    from bench.launch.environment import SAFE_CWD, rank_environment

    return {"env": rank_environment(), "cwd": SAFE_CWD}


def _run_fio(settings: ProbeSettings, jobfile: str):
    with tempfile.TemporaryDirectory(prefix="scalewatch-probe-") as tmp:
        job = Path(tmp) / "probe.fio"
        job.write_text(jobfile)
        try:
            return subprocess.run(
                [settings.fio, "--output-format=json", str(job)],
                capture_output=True,
                text=True,
                timeout=max(120, settings.seconds * 20),
                **_fio_process(),
            )
        except subprocess.TimeoutExpired:
            raise ProbeError(f"fio did not finish a {settings.seconds:.0f} s level within its time limit") from None


def _read_figures(done: subprocess.CompletedProcess) -> tuple[list[int], float]:
    """Each job's bytes and the level's seconds (its longest job's, as fio's group figure counts them)."""
    text = done.stdout
    try:
        doc = json.loads(text[text.index("{") :])
        reads = [job["read"] for job in doc["jobs"]]
        return [int(r["io_bytes"]) for r in reads], max(float(r["runtime"]) for r in reads) / 1000.0
    except (ValueError, KeyError, IndexError, TypeError):
        raise ProbeError(f"fio printed no JSON report: {(done.stderr or text)[-500:]}") from None


class _Sample:
    """The sampled files and which of them this probe has read so far. Each read starts after the files
    the reads before it touched, so while the sample lasts no read is served from what an earlier one
    left in a cache beyond the client's reach (a NAS head's, a FUSE server's: direct I/O and `invalidate`
    only empty the client's). A read that had to come back to touched files is marked not fresh."""

    def __init__(self, files: list[tuple[Path, int]]) -> None:
        self.files = files
        self.start = 0
        self.seen: set[int] = set()

    def shares(self, jobs: int) -> list[list[int]]:
        return _shares(self.files, self.start, jobs)

    def consume(self, shares: list[list[int]], job_bytes: list[int]) -> bool:
        """Mark what each job read (its files in order, up to its bytes); True when all of it was fresh."""
        touched: set[int] = set()
        wrapped = False
        for share, nbytes in zip(shares, job_bytes, strict=True):
            left = nbytes
            for i in share:
                if left <= 0:
                    break
                touched.add(i)
                left -= self.files[i][1]
            wrapped |= left > 0  # read past its last file: it came back to its first
        fresh = not wrapped and not touched & self.seen
        self.seen |= touched
        positions = [(i - self.start) % len(self.files) for i in touched]
        self.start = (self.start + max(positions, default=-1) + 1) % len(self.files)
        return fresh


def _read(
    settings: ProbeSettings, sample: _Sample, jobs: int, bs: int, direct: bool, dirs: list[Path], cap: bool = False
):
    """(fio's finished process, the level) for one read at `jobs` parallel readers."""
    shares = sample.shares(jobs)
    done = _run_fio(settings, _jobfile(sample.files, shares, bs, direct, settings.seconds, cap))
    if done.returncode != 0:
        return done, None
    job_bytes, seconds = _read_figures(done)
    nbytes = sum(job_bytes)
    if nbytes <= 0 or seconds <= 0:
        raise ProbeError(f"fio read nothing at {jobs} job(s) from {', '.join(map(str, dirs))}")
    fresh = sample.consume(shares, job_bytes)
    return done, {"jobs": jobs, "mb_s": nbytes / seconds / 1e6, "bytes": nbytes, "seconds": seconds, "fresh": fresh}


def _failed(done: subprocess.CompletedProcess, jobs: int) -> ProbeError:
    return ProbeError(f"fio failed at {jobs} job(s) (exit {done.returncode}): {done.stderr.strip()[-500:]}")


def probe(dirs: list[Path], settings: ProbeSettings = ProbeSettings()) -> ProbeResult:
    """Sustained cold read MB/s of the staged files at 1, 2, 4, ... jobs, then the best level once more;
    the ceiling is the better of the best level's two reads.

    Why the second read: on a shared disk one 3-second level can read 20% under the storage's usual
    ceiling (measured: 186.6 MB/s against a median of 233 over the probes before it), and the ceiling's
    regression check took that single reading for a slower store. A slower store reads slow twice. A
    second read that is not fresh while the first was is not taken: over a network mount the server's
    cache answered it (measured through sshfs: 6.8 MB/s from a disk throttled to 4.2)."""
    if shutil.which(settings.fio) is None:
        raise ProbeError(f"fio not found ({settings.fio!r}): scripts/install.sh installs it (apt package fio)")
    files = sample_files(dirs, settings.max_files)
    bs = fitted_block_size([s for _, s in files])
    version = subprocess.run(
        [settings.fio, "--version"], capture_output=True, text=True, **_fio_process()
    ).stdout.strip()
    direct = bs >= MIN_DIRECT_BLOCK
    sample = _Sample(files)
    levels: list[dict] = []
    stalled = 0
    for jobs in levels_for(settings.max_jobs, len(files)):
        done, level = _read(settings, sample, jobs, bs, direct, dirs)
        if level is None and direct and not levels and "Invalid argument" in (done.stderr + done.stdout):
            direct = False  # O_DIRECT refused by this filesystem: evict and read each file once instead
            done, level = _read(settings, sample, jobs, bs, direct, dirs)
        if level is None:
            raise _failed(done, jobs)
        best = max((lv["mb_s"] for lv in levels), default=0.0)
        levels.append(level)
        stalled = stalled + 1 if best and level["mb_s"] < best * (1 + PLATEAU_GAIN) else 0
        if stalled >= 2:
            break
    top = max(levels, key=lambda lv: lv["mb_s"])
    done, repeat = _read(settings, sample, top["jobs"], bs, direct, dirs)
    if repeat is None:
        raise _failed(done, top["jobs"])
    # A second read that came back to files an earlier read touched, when the first was fresh, may be a
    # storage server's cache answering: it is kept and shown, not taken for the ceiling.
    fair = repeat["fresh"] or not top["fresh"]
    ceiling = max(top, repeat, key=lambda lv: lv["mb_s"]) if fair else top
    reason = ""
    if too_short(ceiling["seconds"]):
        reason = (
            f"the best level read {ceiling['bytes'] / 1e6:.1f} MB in {ceiling['seconds']:.2f} s "
            f"(under {MIN_LEVEL_S:.0f} s): "
            "too little data to call a sustained ceiling; stage a larger dataset"
        )
    return ProbeResult(
        paths=[str(d) for d in dirs],
        ceiling_mb_s=float(ceiling["mb_s"]),
        levels=levels,
        repeat=repeat,
        block_size=bs,
        sample_files=len(files),
        sample_bytes=sum(s for _, s in files),
        method="direct" if direct else "buffered, evicted",
        conclusive=not reason,
        reason=reason,
        fio_version=version,
        extra={"next_offset": sample.start, "host": node_name()},
    )


def node_name() -> str:
    """This node as its launcher names it: Slurm's node name inside a job step, else the hostname."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def node_share(files: list[tuple[Path, int]], share: int, of: int, offset: int) -> list[tuple[Path, int]]:
    """Node `share` of `of`: every `of`-th file of the sample from `offset` on. The nodes' shares are
    disjoint (no node reads what another's read just brought into a storage server's cache), and each
    spans the whole tree, as the loader's shards do."""
    rotated = files[offset % len(files) :] + files[: offset % len(files)]
    return rotated[share::of]


def probe_share(
    dirs: list[Path], settings: ProbeSettings, share: int, of: int, offset: int, jobs: int, start_at: float | None
) -> dict:
    """One node's part of a multi-node level: `jobs` readers over this node's disjoint share, started at
    `start_at` (seconds since the epoch, the same for every node) and capped at `settings.seconds`, so
    the nodes read over one window. `next_offset`: where in the sample the next level starts fresh."""
    import time

    if shutil.which(settings.fio) is None:
        raise ProbeError(f"fio not found ({settings.fio!r}): scripts/install.sh installs it (apt package fio)")
    files = sample_files(dirs, settings.max_files)
    mine = node_share(files, share, of, offset)
    if not mine:
        raise ProbeError(f"share {share} of {of}: no files left in a sample of {len(files)}")
    bs = fitted_block_size([s for _, s in files])
    direct = bs >= MIN_DIRECT_BLOCK
    sample = _Sample(mine)
    if start_at is not None:
        time.sleep(max(0.0, start_at - time.time()))
    started = time.time()
    done, level = _read(settings, sample, jobs, bs, direct, dirs, cap=True)
    if level is None and direct and "Invalid argument" in (done.stderr + done.stdout):
        direct = False
        started = time.time()  # the read that counts starts now: a late retry is late, not the first try's
        done, level = _read(settings, sample, jobs, bs, direct, dirs, cap=True)
    if level is None:
        raise _failed(done, jobs)
    consumed = sample.start or len(mine)  # positions in the share; each stands for `of` in the sample
    method = "direct" if direct else "buffered, evicted"
    return share_doc(level, (share, of), started, start_at, method, (offset + consumed * of) % len(files))


def share_doc(
    level: dict, share: tuple[int, int], started: float, start_at: float | None, method: str, next_offset: int
) -> dict:
    """One node's part of a multi-node level as the suite reads it (bench.suite.node_probe.ShareDoc), for
    either probe: the level, this node, its share, when it started against the start asked for, how it
    read, and where in the sample the next level starts fresh."""
    return {
        **level,
        "host": node_name(),
        "share": share[0],
        "of": share[1],
        "started_at": started,
        "late_s": 0.0 if start_at is None else max(0.0, started - start_at),
        "method": method,
        "next_offset": next_offset,
    }


# The climb is judged stopped by the store when the most nodes read less than this share short of
# nodes x one node's ceiling (a level reads within ~10% of a tc-limited link; 15% keeps noise out).
BOUND_TOLERANCE = 0.15
BOUND_RULE = (
    "store: the aggregate at the most nodes probed is below (1 - 0.15) x nodes x per_node_mb_s "
    "(adding nodes no longer adds their reads: the store stops the climb); client otherwise (the "
    "aggregate still rises with nodes: each client's own read path is the limit; one node probed "
    "is client)"
)


def aggregate_bound(aggregate: list[dict], per_node_mb_s: float) -> str:
    """'client' or 'store' by BOUND_RULE, from the aggregate curve and one node's ceiling."""
    top = max(aggregate, key=lambda a: a["nodes"])
    if top["nodes"] <= 1:
        return "client"
    return "store" if top["mb_s"] < (1 - BOUND_TOLERANCE) * top["nodes"] * per_node_mb_s else "client"


def storage_at(probe: dict, nodes: int) -> tuple[float, str]:
    """(MB/s the storage gives `nodes` nodes reading at once, what binds it: 'client', 'store' or 'node').

    `nodes` x one node's ceiling while that is under the store's figure, the store's figure (the
    largest aggregate measured) above it. Where the probe saw no store limit (bound 'client'), the
    largest aggregate is all that is known: more nodes are not credited with more than was measured.
    Where one slow node bound the probe's level ('node', its slow_nodes), the same holds: the figure is
    that level's pace, a lower bound on the store's, never called the store's limit.
    A probe written before the multi-node curve is one node's ceiling (client)."""
    per_node = float(probe.get("per_node_mb_s") or probe["ceiling_mb_s"])
    aggregate = probe.get("aggregate") or [{"nodes": 1, "mb_s": per_node, "min_node_mb_s": per_node}]
    store = max(float(a["mb_s"]) for a in aggregate)
    clients = max(1, nodes) * per_node
    if clients < store:
        return clients, "client"
    return store, probe.get("bound") or "client"


def nodes_for(launcher: str, hosts: list[tuple[str, int]], ranks_per_node: int | None, gpus: int) -> int:
    """The nodes a scale of `gpus` ranks trains on: local one; ssh the hosts its ranks fill in order
    (slots first, as bench.launch.rendezvous.rank_plan places them); Slurm ranks_per_node a node."""
    if launcher == "local" or gpus <= 1:
        return 1
    if launcher == "ssh" and hosts:
        left, used = gpus, 0
        for _, slots in hosts:
            if left <= 0:
                break
            left, used = left - max(1, slots), used + 1
        return max(1, used)
    return max(1, math.ceil(gpus / ranks_per_node)) if ranks_per_node else 1
