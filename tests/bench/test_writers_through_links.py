"""Run-folder writers never write through a planted link (issue 48, the same class as records generation):
someone who can write into a run folder (a shared store, a run folder on NAS) plants a link at the
writer's temp name and at the file's own name, each pointing at a victim file; the writer must leave both
victims as they were and put its own whole file at the name."""

import errno
import json
from pathlib import Path

import pytest

from bench.launch.leftovers import HANDLE_FILE, record_handle
from bench.launch.supervisor import STATE, write_state
from bench.safe_fs import write_file
from scalewatch.notifiers.sent import SENT_FILE, SentLog

VICTIM = "the victim's own bytes\n"


def _state(out: Path) -> None:
    write_state(out, phase="running")


def _handle(out: Path) -> None:
    record_handle({"backend": "local", "run_id": "r", "output_dir": str(out)})


def _sent(out: Path) -> None:
    SentLog(out).add("webhook", "subject", "text")


def _plain(out: Path) -> None:
    write_file(out / "summary.json", json.dumps({"ok": True}))


WRITERS = [(_state, STATE), (_handle, HANDLE_FILE), (_sent, SENT_FILE), (_plain, "summary.json")]
# The temp names the writers used before they went through bench.safe_fs (and the one they use now).
TEMP_NAMES = {STATE: ".state.json.tmp", HANDLE_FILE: ".handle.json.tmp", SENT_FILE: ".alerts-sent.json.staged"}


@pytest.mark.parametrize(("write", "name"), WRITERS, ids=[n for _, n in WRITERS])
def test_a_planted_link_at_the_temp_name_or_the_name_is_never_written_through(tmp_path, write, name):
    out, victims = tmp_path / "run", tmp_path / "victims"
    out.mkdir()
    victims.mkdir()
    planted = {f".{name}.tmp", TEMP_NAMES.get(name, f".{name}.tmp"), name}
    for i, link in enumerate(sorted(planted)):
        victim = victims / f"victim{i}"
        victim.write_text(VICTIM)
        (out / link).symlink_to(victim)
    write(out)
    assert all(v.read_text() == VICTIM for v in victims.iterdir()), "a writer wrote through a planted link"
    written = out / name
    assert not written.is_symlink() and json.loads(written.read_text())  # its own whole file, at its name


def test_a_run_folders_subfolder_swapped_for_a_link_is_refused_not_written_into(tmp_path):
    """`metrics/`, `ranks/` or `logs/` planted as a link to someone's folder: the write is refused naming
    it, and nothing lands in their folder (neither a whole file nor an appended log line)."""
    from bench.safe_fs import RefusedFile, open_append

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "rank0.log").write_text(VICTIM)
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics").symlink_to(theirs)
    (run / "logs").symlink_to(theirs)
    with pytest.raises(RefusedFile, match="metrics"):
        write_file(run / "metrics" / "summary.json", "{}")
    with pytest.raises(OSError) as refused:
        open_append(run / "logs" / "rank0.log")
    assert refused.value.errno in (errno.ELOOP, errno.ENOTDIR), refused.value  # the folder's link, not another error
    assert sorted(p.name for p in theirs.iterdir()) == ["rank0.log"]
    assert (theirs / "rank0.log").read_text() == VICTIM


def test_the_supervisors_log_planted_as_a_link_is_refused_and_nothing_starts(tmp_path):
    """The local launcher's supervisor logs to `logs/supervisor.log` in the run folder: a link planted there
    (or at `logs/`) is refused naming it, the victim keeps its bytes, and no supervisor is started (before:
    a shell's `>>` appended the supervisor's output to the victim)."""
    from bench.config.models import RunSpec, TrainConfig
    from bench.errors import LaunchError
    from bench.launch.detached import DetachedLauncher

    victim = tmp_path / "victim"
    victim.write_text(VICTIM)
    out = tmp_path / "run"
    (out / "logs").mkdir(parents=True)
    (out / "logs" / "supervisor.log").symlink_to(victim)
    train = TrainConfig(workload="ssd", data=tmp_path / "data", steps=1, batch_size=1)
    spec = RunSpec(run_id="r", train=train, ranks=1, output_dir=out)
    with pytest.raises(LaunchError, match=r"supervisor\.log"):
        DetachedLauncher().submit(spec)
    assert victim.read_text() == VICTIM
    assert not (out / STATE).exists()
