"""The checkpoint phase inside a scale's ranks (bench.train.checkpointing): a rank that fails in it tells
the others at their next meeting point and every rank leaves together, so all of them reach the summary's
gather; the summary's `checkpoint` then names the failing rank's own error, not the others' stop.

Two ranks in one process, each a thread meeting through bench.storage.checkpoint_local.LocalSync (the
exchange `bench checkpoint` uses), on a real folder; the model and optimizer are torch's."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace

import torch

from bench.config.models import TrainConfig
from bench.storage.checkpoint_local import LocalSync
from bench.train.checkpointing import Stall, phase, summary_block

SPEC = {"bytes_per_rank": "1MiB", "writes": 1, "reads": 1}


def ranks(directories: list[Path], mode: str = "size", spec: dict = SPEC) -> list[dict]:
    """Each rank's `phase` on its own directory (all of them meet at every round)."""
    barrier, out = threading.Barrier(len(directories)), [None] * len(directories)
    spec = {"mode": "model", "writes": 1, "reads": 1} if mode == "model" else spec

    def rank(r: int, folder: str) -> None:
        cfg = TrainConfig(workload="ssd", synthetic=True, steps=1, checkpoint=spec, checkpoint_dir=directories[r])
        dist = SimpleNamespace(rank=r, size=len(directories), host="node", device=torch.device("cpu"))
        dist.allgather = LocalSync(r, len(directories), barrier, Path(folder)).allgather
        model = torch.nn.Linear(64, 64)
        out[r] = phase(cfg, dist, model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))

    with tempfile.TemporaryDirectory() as folder:
        threads = [threading.Thread(target=rank, args=(r, folder)) for r in range(len(directories))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    return [{"phase": p} for p in out]


def test_two_ranks_write_and_read_each_others_shards(tmp_path):
    store = tmp_path / "store"
    phases = ranks([store, store])
    block = summary_block(
        TrainConfig(workload="ssd", synthetic=True, steps=1, checkpoint=SPEC, checkpoint_dir=store), phases
    )
    assert block["status"] == "done" and block["ranks"] == 2 and block["bytes"] == 2 << 20
    assert [r["read_from"] for r in block["per_rank"]] == [1, 0] and block["cleanup"]["left"] == []
    assert list(store.iterdir()) == []
    model = ranks([store, store], "model")  # torch.save of each rank's model and SGD state, torch.load back
    assert [p["phase"]["record"]["writes"][0]["bytes"] > 64 * 64 * 4 for p in model] == [True, True]
    assert list(store.iterdir()) == []


def test_a_rank_failing_alone_stops_every_rank_at_the_next_meeting_and_is_the_one_named(tmp_path):
    store, blocked = tmp_path / "store", tmp_path / "not-a-folder"
    blocked.write_text("a file where rank 1's folder should be")
    phases = ranks([store, blocked])
    assert phases[1]["phase"]["peer"] is False and "FileExistsError" in phases[1]["phase"]["error"]
    assert phases[0]["phase"] == {"error": f"rank 1: {phases[1]['phase']['error']}", "peer": True}
    cfg = TrainConfig(workload="ssd", synthetic=True, steps=1, checkpoint=SPEC, checkpoint_dir=store)
    block = summary_block(cfg, phases)
    assert block["status"] == "failed" and block["error"] == phases[1]["phase"]["error"]
    assert list(store.iterdir()) == []  # rank 0 stopped before it made anything


def test_reads_the_page_cache_served_are_shown_but_labelled_not_cold():
    """On tmpfs no page can be evicted: every restore is served from memory, and the scale's row says so."""
    from bench.analysis.frame import checkpoint_columns

    with tempfile.TemporaryDirectory(dir="/dev/shm") as shm:
        store = Path(shm)
        cfg = TrainConfig(workload="ssd", synthetic=True, steps=1, checkpoint=SPEC, checkpoint_dir=store)
        block = summary_block(cfg, ranks([store, store]))
        assert block["status"] == "done" and block["read"]["cold"] is False and len(block["read"]["not_cold"]) == 2
        assert list(store.iterdir()) == []
    row = checkpoint_columns({"checkpoint": block})
    assert row["ckpt_state"] == "not_cold" and row["ckpt_note"].startswith("2 checkpoint read(s) started with")
    assert row["ckpt_read_mb_s"] == block["read_mb_s"] > 0  # shown, with the label; judged nowhere


def test_the_reports_interval_of_a_phase_of_several_checkpoints_holds_its_rate(tmp_path):
    """Three checkpoints written and read back: the report's 95% interval (a bootstrap over the checkpoints)
    holds the phase's own GB/s, as the table prints them side by side."""
    from bench.report.html import checkpoint_intervals

    store, spec = tmp_path / "store", {"bytes_per_rank": "1MiB", "writes": 3, "reads": 3}
    cfg = TrainConfig(workload="ssd", synthetic=True, steps=1, checkpoint=spec, checkpoint_dir=store)
    block = summary_block(cfg, ranks([store, store], spec=spec))
    spans = checkpoint_intervals([{"workload": "ssd", "gpus": 2, "result": {"summary": {"checkpoint": block}}}])
    for kind in ("write", "read"):
        low, high = spans[("ssd", 2)][kind]
        assert 0 < low <= block[f"{kind}_mb_s"] / 1e3 <= high, (kind, low, high, block[f"{kind}_mb_s"])


def test_a_save_folder_swapped_for_a_link_is_neither_written_through_nor_emptied(tmp_path):
    """Saves during training on a shared store: during the first save (written, not yet removed) someone
    who can rename entries there moves this rank's save folder away and puts a link to their own folder
    in its place, a folder holding their step0.pt and step7.pt. Nothing of theirs is removed, the next
    save is not written there, and our own saves are still removed from our folder wherever it went."""
    store, theirs, moved = tmp_path / "store", tmp_path / "someone-elses", tmp_path / "moved"
    theirs.mkdir()
    for name in ("step0.pt", "step7.pt"):
        (theirs / name).write_bytes(f"their {name}".encode())
    seen: list[list[str]] = []

    def barrier() -> None:  # every rank's save written: the moment between a save and its removal
        if not seen:
            stall.folder.rename(moved)
            stall.folder.symlink_to(theirs)
        seen.append(sorted(p.name for p in theirs.iterdir()))

    cfg = TrainConfig(workload="ssd", synthetic=True, steps=1, checkpoint_every_steps=1, checkpoint_dir=store)
    model = torch.nn.Linear(8, 8)
    stall = Stall(cfg, SimpleNamespace(rank=0, barrier=barrier), model, torch.optim.SGD(model.parameters(), lr=0.1))
    stall.save()
    stall.save()  # into our folder (held open), not through the link
    assert seen == [["step0.pt", "step7.pt"]] * 2  # their step0.pt not removed, our step1.pt not written there
    stall.close()  # their step7.pt is no file of ours either
    assert [(theirs / n).read_bytes() for n in ("step0.pt", "step7.pt")] == [b"their step0.pt", b"their step7.pt"]
    assert list(moved.iterdir()) == []  # both saves were ours: removed from our folder
    report = stall.report(1.0)
    assert report["saves"] == 2
    assert report["left"] == [f"{stall.folder}: no longer the folder this rank made; left as it is"]
    assert stall.folder.is_symlink() and [p.name for p in store.iterdir()] == [stall.folder.name]
