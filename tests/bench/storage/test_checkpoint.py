"""The checkpoint phase against real files on real stores: an ext4 on a loop device held by real cgroup-v1
blkio limits (write and read), a full tmpfs, and links planted among the shards."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import subprocess
import zlib
from pathlib import Path

import pytest

from bench.cli import main
from bench.errors import ConfigError
from bench.storage.checkpoint import (
    CheckpointSpaceError,
    CheckpointSpec,
    aggregate,
    check_space,
    parse_setting,
    read_partners,
    run_rank,
)
from bench.storage.checkpoint_files import (
    KINDS,
    ROOT_PREFIX,
    CheckpointError,
    Created,
    make_folders,
    remove_files,
    remove_folders,
    shard_names,
    size_split,
)
from tests.conftest import BENCH
from tests.infra.faults import blkio_read_throttle, blkio_throttle, small_disk, store_device, wait_for

MiB = 1 << 20


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """An ext4 on a loop device of its own: a blkio limit on it holds only the checkpoint's I/O."""
    root = tmp_path_factory.mktemp("ckpt-store")
    with store_device(root / "store.img", root / "store", 160) as mount:
        yield mount


def cli(*args: str, prefix: str = "") -> subprocess.CompletedProcess:
    cmd = [BENCH, "checkpoint", *args]
    if prefix:
        cmd = ["sh", "-c", f'{prefix} && exec "$@"', "sh", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def ours(path: Path) -> list[Path]:
    return sorted(path.glob(f"{ROOT_PREFIX}*"))


class OneRank:
    """A one-rank run's meeting points (every allgather of one rank is its own value), which also lets
    a test act between the phases: `on_written(files)` runs when the writes are done, before any read."""

    def __init__(self, on_written=None) -> None:
        self.on_written = on_written

    def allgather(self, obj) -> list:
        obj = json.loads(json.dumps(obj))
        if self.on_written and isinstance(obj, list) and obj and isinstance(obj[0], dict) and "ino" in obj[0]:
            self.on_written(obj)
        return [obj]


@pytest.mark.rates
@pytest.mark.slow
def test_write_bandwidth_matches_a_blkio_write_throttle(store):
    rate = 4_000_000
    with blkio_throttle(store, rate, "write") as prefix:
        done = cli("--path", str(store), "--bytes-per-rank", "16MiB", "--ranks", "2", "--writes", "1", "--reads", "1",
                   "--json", prefix=prefix)  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    # 2 x 16 MiB through a 4 MB/s limit both ranks share: the phase's rate is the limit's, however
    # the kernel divided it between them (the slowest rank's time is the checkpoint's)
    assert doc["write"]["bytes"] == 2 * 16 * MiB
    assert doc["write"]["mb_s"] == pytest.approx(rate / 1e6, rel=0.10), doc["write"]
    # the CLI's contract keys (issue 40), the same figures as the phases'
    assert doc["status"] == "done" and doc["ranks"] == 2 == len(doc["per_rank"])
    assert (doc["write_mb_s"], doc["read_mb_s"]) == (doc["write"]["mb_s"], doc["read"]["mb_s"])
    assert doc["bytes"] == doc["write"]["bytes"]
    assert doc["duration_s"] == pytest.approx(doc["write"]["seconds"] + doc["read"]["seconds"])
    assert all(r["write_mb_s"] <= rate / 1e6 * 1.10 for r in doc["per_rank"])
    assert doc["read"]["mb_s"] > 2 * rate / 1e6  # reads are not held: the limit is on writes only
    assert doc["cleanup"] == {"removed": 4, "left": []} and not ours(store)


@pytest.mark.rates
@pytest.mark.slow
def test_cold_read_bandwidth_matches_a_blkio_read_throttle(store):
    rate = 6_000_000
    with blkio_read_throttle(store, rate) as prefix:
        done = cli("--path", str(store), "--bytes-per-rank", "16MiB", "--ranks", "2", "--writes", "1", "--reads", "1",
                   "--json", prefix=prefix)  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    read = doc["read"]
    assert read["mb_s"] == pytest.approx(rate / 1e6, rel=0.10), read
    # cold, and cachestat saw every byte come in from the store
    assert read["cold"] and doc["residency"] == "cachestat"
    assert read["storage_bytes"] == pytest.approx(read["bytes"], rel=0.02)
    assert [(r["rank"], r["read_from"], r["other_node"]) for r in doc["per_rank"]] == [(0, 1, False), (1, 0, False)]
    assert doc["write"]["mb_s"] > 2 * rate / 1e6
    assert doc["nodes"] == 1 and doc["cleanup"]["left"] == [] and not ours(store)


def _rank_writing(parent: int, rank: int, store: Path, past: int) -> int | None:
    """The pid of `bench checkpoint` `parent`'s rank `rank` (its process named ckpt-rank{rank}) once it
    is mid-write: more than `past` bytes given to write(), a file of the store open."""
    for entry in os.listdir("/proc"):
        try:
            if not entry.isdigit() or Path(f"/proc/{entry}/comm").read_text().strip() != f"ckpt-rank{rank}":
                continue
            status = Path(f"/proc/{entry}/status").read_text()
            if f"\nPPid:\t{parent}\n" not in status:
                continue
            io_ = dict(line.split(": ") for line in Path(f"/proc/{entry}/io").read_text().splitlines())
            fds = [os.readlink(f) for f in Path(f"/proc/{entry}/fd").iterdir()]
        except OSError:
            continue
        if int(io_["wchar"]) > past and any(f.startswith(str(store)) for f in fds):
            return int(entry)
    return None


def test_a_rank_killed_mid_write_leaves_no_shard_counted_and_no_file_behind(store):
    # 2 x 8 MiB under a 4 MB/s write limit: each rank's optimizer-state fsync lasts seconds; rank 0
    # (whose folders they are) is killed in it, its model states written, its optimizer states not yet
    cmd = [BENCH, "checkpoint", "--path", str(store), "--bytes-per-rank", "8MiB", "--ranks", "2", "--writes", "1",
           "--reads", "1", "--json"]  # fmt: skip
    with blkio_throttle(store, 4_000_000, "write") as prefix:
        proc = subprocess.Popen(["sh", "-c", f'{prefix} && exec "$@"', "sh", *cmd], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            past = size_split(8 * MiB)["model_states"] + MiB
            pid = wait_for(lambda: _rank_writing(proc.pid, 0, store, past), 60, 0.05, "rank 0 mid-write")
            os.kill(pid, signal.SIGKILL)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 1, err
    assert "rank 0 ended without a result (killed by SIGKILL)" in err
    doc = json.loads(out)
    assert (doc["status"], doc["failed_rank"], doc["ranks"]) == ("failed", 0, 2)
    assert doc["write_mb_s"] is doc["read_mb_s"] is doc["duration_s"] is None  # no figure of a failed phase
    # the killed rank's cut-short shard is not counted; the other rank's, complete, is
    killed, other = doc["per_rank"]
    assert (killed["writes"], killed["write_bytes"]) == (0, 0) and "killed by SIGKILL" in killed["outcome"]
    assert (other["writes"], other["write_bytes"]) == (1, 8 * MiB) and doc["bytes"] == 8 * MiB
    # nothing behind: the killed rank's optimizer states were never named; its model states, named and
    # in its journal, are removed for it, as are the other rank's two files (by that rank) and the folders
    assert doc["cleanup"] == {"removed": 3, "left": []}
    assert not ours(store)


def _killed_once_named(directory: str, exchange: str) -> None:
    """A one-rank phase SIGKILLed in the one window its journal of made files cannot cover: its first
    file complete and named (linkat), that journal entry not yet written."""
    from bench.storage.checkpoint_local import _journal

    note = _journal(Path(exchange), 0)

    def journal(key: str, value) -> None:
        if key == "made":
            os.kill(os.getpid(), signal.SIGKILL)
        note(key, value)

    spec = CheckpointSpec(mode="size", bytes_per_rank=MiB, writes=1, reads=1)
    run_rank(0, 1, Path(directory), spec, OneRank(), journal=journal)


def test_a_rank_killed_between_naming_a_file_and_journaling_it_leaves_nothing_behind(store, tmp_path):
    """The parent's cleanup after a killed rank removes the file the rank named but never noted as made
    (by the naming it journaled first), then the folders; nothing of ours is left."""
    import multiprocessing

    from bench.storage.checkpoint_local import _failed, _noted, _result

    exchange = tmp_path / "exchange"
    exchange.mkdir()
    proc = multiprocessing.get_context("spawn").Process(target=_killed_once_named, args=(str(store), str(exchange)))
    proc.start()
    proc.join(120)
    try:
        assert proc.exitcode == -signal.SIGKILL
        assert _noted(exchange, 0, "made") is None and _noted(exchange, 0, "cleanup") is None
        (named,) = [p for p in store.rglob("*.pt")]  # complete, named, in no journal of made files
        assert named.name == shard_names(0)["model_states"] and named.stat().st_size == size_split(MiB)["model_states"]
        summary = _failed(store, exchange, [_result(exchange, 0, proc.exitcode)], 0)
        assert summary["cleanup"] == {"removed": 1, "left": []}
        assert "killed by SIGKILL" in summary["per_rank"][0]["outcome"] and summary["bytes"] == 0
        assert not ours(store)
    finally:
        for root in ours(store):  # a failing run must not leave its files to the tests after it
            for p in sorted(root.rglob("*"), reverse=True):
                p.rmdir() if p.is_dir() else p.unlink()
            root.rmdir()


def test_a_stop_between_naming_and_noting_claims_the_file_only_while_the_name_holds_it(store):
    """The rank's own side of the same window (a SIGTERM's SystemExit after the linkat, before `made`):
    the file goes into `made` where its name holds it, and nothing does where the name holds another."""
    from bench.storage.checkpoint_files import _claim_if_named, _create, _name

    made: list[Created] = []
    fd_dir = os.open(store, os.O_RDONLY | os.O_DIRECTORY)
    fds = [_create(fd_dir, "claimed.pt")[0], _create(fd_dir, "other.pt")[0]]
    try:
        os.write(fds[0], b"ours")
        _name(fds[0], fd_dir, "claimed.pt")
        _claim_if_named(fds[0], fd_dir, "claimed.pt", "claimed.pt", made)
        (store / "other.pt").write_bytes(b"theirs")  # the name taken by another file: ours was never named
        _claim_if_named(fds[1], fd_dir, "other.pt", "other.pt", made)
        assert [m.rel for m in made] == ["claimed.pt"] and made[0].ino == os.fstat(fds[0]).st_ino
        assert remove_files(store, made) == (1, []) and (store / "other.pt").read_bytes() == b"theirs"
    finally:
        for fd in (*fds, fd_dir):
            os.close(fd)
        (store / "other.pt").unlink()


def test_shards_are_named_as_deepspeed_and_split_as_dlio(store):
    seen: dict[str, bytes] = {}

    def look(files):
        for f in files:
            seen[f["rel"]] = (store / f["rel"]).read_bytes()

    spec = CheckpointSpec(mode="size", bytes_per_rank=7 * MiB, writes=2, reads=3)
    record = run_rank(0, 1, store, spec, OneRank(look))
    root = next(iter(seen)).split("/")[0]
    assert root.startswith(ROOT_PREFIX)
    assert sorted(seen) == sorted(
        f"{root}/global_step{s}/zero_pp_rank_0_mp_rank_00_{kind}.pt" for s in range(2) for kind in KINDS
    )
    model = seen[f"{root}/global_step0/zero_pp_rank_0_mp_rank_00_model_states.pt"]
    optim = seen[f"{root}/global_step0/zero_pp_rank_0_mp_rank_00_optim_states.pt"]
    assert (len(model), len(optim)) == (MiB, 6 * MiB) == tuple(size_split(7 * MiB).values())
    # nothing a store could shrink: incompressible, and no 4 KiB block written twice
    data = b"".join(seen.values())
    assert len(zlib.compress(data[: 4 * MiB], 1)) > 0.99 * 4 * MiB
    blocks = {hashlib.blake2b(data[i : i + 4096], digest_size=16).digest() for i in range(0, len(data), 4096)}
    assert len(blocks) == len(data) // 4096
    # one rank reads its own shard, cold, step by step; its files and folders are gone afterwards
    assert [r["step"] for r in record["reads"]] == [0, 1, 0]
    assert all(r["cold"] and r["bytes"] == 7 * MiB for r in record["reads"])
    assert record["cleanup"] == {"removed": 4, "left": []} and not ours(store)


def test_model_mode_saves_and_restores_the_model_and_optimizer_states(store):
    import torch

    from bench.storage.checkpoint_local import standalone_states

    states = standalone_states("ssd", "tiny")
    loaded = {}

    def look(files):
        for f in files:
            loaded[f["rel"].rsplit("_", 2)[-2] + "_states"] = torch.load(store / f["rel"], weights_only=True)

    record = run_rank(0, 1, store, CheckpointSpec(mode="model", writes=1, reads=1), OneRank(look), states)
    params = states["model_states"]["module"]
    assert all(torch.equal(loaded["model_states"]["module"][k], v) for k, v in params.items())
    optimizer = loaded["optim_states"]["optimizer"]
    momentum = optimizer["state"]
    assert len(momentum) == sum(len(g["params"]) for g in optimizer["param_groups"]) > 0
    assert all(s["momentum_buffer"].abs().sum() > 0 for s in momentum.values())
    (read,) = record["reads"]
    assert read["cold"] and read["bytes"] == record["writes"][0]["bytes"]
    assert not ours(store)


def test_a_link_swapped_in_for_a_shard_is_neither_read_nor_removed(store, tmp_path):
    outside = tmp_path / "precious"
    outside.write_bytes(b"not the checkpoint's")

    def swap(files):
        target = store / next(f["rel"] for f in files if f["rel"].endswith("optim_states.pt"))
        target.unlink()
        target.symlink_to(outside)

    spec = CheckpointSpec(mode="size", bytes_per_rank=2 * MiB, writes=1, reads=1)
    with pytest.raises(CheckpointError, match="symbolic link"):
        run_rank(0, 1, store, spec, OneRank(swap))
    assert outside.read_bytes() == b"not the checkpoint's"
    # our model-states file is removed; the link is not ours: left, and so is the folder holding it
    (root,) = ours(store)
    assert [p.name for p in (root / "global_step0").iterdir()] == [shard_names(0)["optim_states"]]
    assert (root / "global_step0" / shard_names(0)["optim_states"]).is_symlink()
    for p in (root / "global_step0").iterdir():
        p.unlink()
    (root / "global_step0").rmdir()
    root.rmdir()


def test_cleanup_removes_our_files_and_folders_only(store):
    folders = make_folders(store, 2)
    root = store / folders[0].rel
    made = []
    for step in range(2):
        for name in shard_names(0).values():
            path = root / f"global_step{step}" / name
            path.write_bytes(b"x" * 10)
            made.append(Created.of(str(path.relative_to(store)), path.stat()))
    # someone replaced one of our files with theirs (ext4 hands it the freed inode number: the same
    # name and inode, another file), and left a file of theirs beside ours
    replaced = root / "global_step1" / shard_names(0)["model_states"]
    replaced.unlink()
    replaced.write_bytes(b"theirs")
    assert replaced.stat().st_ino in {m.ino for m in made}
    (root / "global_step0" / "notes.txt").write_text("theirs")
    removed, left = remove_files(store, made)
    assert removed == 3 and len(left) == 1 and "no longer the file this run wrote" in left[0]
    left = remove_folders(store, folders)
    theirs = {"global_step0", "global_step1", replaced.name, "notes.txt"}
    assert sorted(p.name for p in root.rglob("*")) == sorted(theirs)
    assert len(left) == 3  # both step folders hold files that are not ours, and so the root is not empty
    for p in (replaced, root / "global_step0" / "notes.txt"):
        p.unlink()
    assert remove_folders(store, folders) == [] and not ours(store)


def test_a_checkpoint_that_does_not_fit_is_refused_naming_the_sizes(tmp_path):
    with small_disk(tmp_path / "disk", "24M") as disk:
        done = cli("--path", str(disk), "--bytes-per-rank", "8MiB", "--ranks", "2", "--writes", "2")
        assert done.returncode == 2, done.stderr
        assert "2 writes x 2 rank(s) x 8.0 MiB per rank need 32.8 MiB" in done.stderr
        assert "24.0 MiB is free" in done.stderr
        assert list(disk.iterdir()) == []  # refused before anything was written
        # a rank refuses as the command does (in the suite every rank does, together)
        too_big = CheckpointSpec(mode="size", bytes_per_rank=8 * MiB, writes=3)
        with pytest.raises(CheckpointSpaceError, match=r"3 writes x 1 rank\(s\) x 8\.0 MiB per rank need 24\.6 MiB"):
            run_rank(0, 1, disk, too_big, OneRank())
        assert list(disk.iterdir()) == []
        # what fits runs; a tmpfs's pages are its storage and cannot be evicted: no read there is cold
        record = run_rank(0, 1, disk, CheckpointSpec(mode="size", bytes_per_rank=4 * MiB, writes=1, reads=2), OneRank())
        result = aggregate([record])
        assert result["read"]["cold"] is False and len(result["read"]["not_cold"]) == 2
        assert list(disk.iterdir()) == []
    with pytest.raises(CheckpointSpaceError, match=r"need 1\.0 TiB"):
        check_space(tmp_path, [512 << 30, 512 << 30], 1)


def test_reads_come_from_another_node_where_there_is_one():
    assert read_partners(["a"]) == [0]
    assert read_partners(["a", "a"]) == [1, 0]
    assert read_partners(["a", "a", "b", "b"]) == [2, 3, 0, 1]
    assert read_partners(["a", "b", "a", "b"]) == [1, 2, 3, 0]
    # uneven nodes: the shift with the most readers elsewhere; every shard still read exactly once
    partners = read_partners(["a", "a", "a", "b"])
    assert sorted(partners) == [0, 1, 2, 3] and sum(["a", "a", "a", "b"][p] == "b" for p in partners[:3]) == 1


def test_a_phase_lasts_as_long_as_its_slowest_rank():
    def record(rank, write_s, read_s):
        return {
            "rank": rank,
            "host": "h",
            "domain": f"d{rank}",
            "read_from": 1 - rank,
            "other_node": True,
            "residency": "cachestat",
            "writes": [{"step": 0, "bytes": 100e6, "seconds": write_s}],
            "reads": [
                {
                    "step": 0,
                    "from_rank": 1 - rank,
                    "bytes": 100e6,
                    "seconds": read_s,
                    "resident_before": 0,
                    "storage_bytes": 100e6,
                    "cold": True,
                }
            ],
            "cleanup": {"removed": 2, "left": []},
        }

    result = aggregate([record(1, 4.0, 1.0), record(0, 1.0, 2.0)])
    write, read = result["write"], result["read"]
    assert write["mb_s"] == pytest.approx(200 / 4.0) and write["checkpoints"][0]["slowest_rank"] == 1
    assert read["mb_s"] == pytest.approx(200 / 2.0) and read["checkpoints"][0]["slowest_rank"] == 0
    assert [r["write_mb_s"] for r in result["per_rank"]] == [100.0, 25.0]
    assert result["nodes"] == 2 and result["read"]["other_node_share"] == 1.0 and result["cleanup"]["removed"] == 4


def test_the_setting_is_off_model_or_a_size():
    assert parse_setting("off") is None and parse_setting(None) is None
    assert parse_setting("model") == CheckpointSpec(mode="model")
    spec = parse_setting({"bytes_per_rank": "2GiB", "writes": 3, "reads": 2})
    assert (spec.mode, spec.bytes_per_rank, spec.writes, spec.reads) == ("size", 2 << 30, 3, 2)
    for bad, named in (
        ("on", "checkpoint: 'on' is not one of off, model"),
        ({"bytes_per_rank": 10}, "checkpoint.bytes_per_rank"),
        ({"bytes_per_rank": "1GiB", "writes": 0}, "checkpoint.writes"),
        ({"writes": 2}, "bytes_per_rank: required"),
        ({"mode": "model", "bytes_per_rank": "1GiB"}, "give one or the other"),
        ({"bytes_per_rank": "1GiB", "extra": 1}, "checkpoint.extra"),
    ):
        with pytest.raises(ConfigError, match=named.replace("(", r"\(")):
            parse_setting(bad)


def run_cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 2
    return code, err.getvalue()


def test_bad_flags_exit_2_naming_them(tmp_path):
    base = ["checkpoint", "--path", str(tmp_path)]
    for args, named in (
        (["--bytes-per-rank", "0"], "--bytes-per-rank: Input should be greater than or equal to 1048576"),
        (["--bytes-per-rank", "lots"], "--bytes-per-rank"),
        (["--bytes-per-rank", "2TiB"], "1 MiB to 1 TiB"),
        (["--bytes-per-rank", "1MiB", "--ranks", "0"], "--ranks: 0 must be between 1 and 64"),
        (["--bytes-per-rank", "1MiB", "--writes", "0"], "--writes"),
        (["--bytes-per-rank", "1MiB", "--reads", "101"], "--reads"),
        (["--bytes-per-rank", "1MiB", "--preset", "tiny"], "--preset: only with --model"),
        (["--model", "ssd", "--bytes-per-rank", "1MiB"], "not allowed with argument --model"),
        (["--model", "resnet"], "--model"),
        ([], "one of the arguments --bytes-per-rank --model is required"),
    ):
        code, err = run_cli(base + args)
        assert code == 2 and named in err, (args, err)
    code, err = run_cli(["checkpoint", "--path", str(tmp_path / "nowhere"), "--bytes-per-rank", "1MiB"])
    assert code == 2 and "--path:" in err and "not an existing folder" in err
    assert list(tmp_path.iterdir()) == []
