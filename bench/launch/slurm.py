"""Slurm backend: sbatch script from the RunSpec, ranks via srun, state via scontrol/sacct.

Results on a remote cluster come back as a tar stream over ssh, unpacked here by Python's tarfile:
the archive is the cluster's word, not ours, so only regular files and folders under ranks/,
metrics/ and logs/ are accepted, within FETCH_MAX_BYTES and FETCH_MAX_MEMBERS. A link, hard link,
device or FIFO, an absolute name or one with '..' fails the fetch naming the member: a cluster-side
`logs/rank1.log -> /etc/...` never becomes a link on the worker for collecting to follow.

The job's environment is the batch script's own (bench.launch.environment): `--export=NONE` keeps the
submitter's out of the job record, the script exports the allow-listed names (this worker's values when
it submits, a system PATH when a login node does), and srun hands the ranks only those names. The job
and its steps start in `/` (`--chdir=/`), never in the submitter's folder or slurmstepd's /tmp fallback.
A job id is digits only, checked before it reaches scontrol, sacct or scancel (a handle read back from a
run folder may carry anything).
"""

from __future__ import annotations

import math
import os
import shlex
import subprocess
import tarfile
from pathlib import Path, PurePosixPath
from typing import IO

from bench.config.models import RunSpec
from bench.errors import LaunchError
from bench.launch.base import Handle, RunState
from bench.launch.commands import CommandRunner
from bench.launch.environment import SAFE_CWD, kept, python_module, srun_export, tool_environment
from bench.launch.options import LauncherOptions
from bench.launch.python import node_python
from bench.launch.supervisor import rank_argv
from bench.launch.train_spec import heredoc
from bench.safe_fs import reason_text, write_file

RESULT_PARTS = ("ranks", "metrics", "logs")
# A results archive larger than this (summed member sizes) or with more members is refused, not unpacked:
# a run's records, metrics and logs are far smaller; a runaway or hostile archive must not fill the worker.
FETCH_MAX_BYTES = 2 << 30
FETCH_MAX_MEMBERS = 100_000
# After the archive's end, the padding tar writes (a record, 10 KiB by default) is read and dropped so the
# remote tar does not fail on a closed pipe; more than this after the end is refused.
TRAILER_MAX_BYTES = 1 << 20

SLURM_STATES = {
    "PENDING": RunState.PENDING,
    "REQUEUED": RunState.PENDING,
    "CONFIGURING": RunState.RUNNING,
    "RUNNING": RunState.RUNNING,
    "COMPLETING": RunState.RUNNING,
    "SUSPENDED": RunState.RUNNING,
    "COMPLETED": RunState.COMPLETED,
    "FAILED": RunState.FAILED,
    "TIMEOUT": RunState.TIMEOUT,
    "CANCELLED": RunState.CANCELLED,
    "NODE_FAIL": RunState.NODE_FAIL,
    "OUT_OF_MEMORY": RunState.OUT_OF_MEMORY,
    "BOOT_FAIL": RunState.NODE_FAIL,
    "DEADLINE": RunState.TIMEOUT,
    "PREEMPTED": RunState.FAILED,
}


def _time_limit(seconds: int) -> str:
    minutes = max(1, math.ceil(seconds / 60))
    return f"{minutes // 1440}-{minutes % 1440 // 60:02d}:{minutes % 60:02d}:00"


def job_name(run_id: str) -> str:
    return f"sw-{run_id}"


# The batch script's PATH when a login node submits it: the worker's PATH means nothing there, and
# `--export=NONE` gives the job none of the login session's.
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# sbatch directives the suite sets itself: a suite's own would give the job the submitter's environment
# or folder back.
OWN_DIRECTIVES = ("--export", "--export-file", "--chdir", "--get-user-env")


def job_id_of(handle: Handle) -> str:
    """The handle's Slurm job id, digits only: anything else (`--user=...`, a list) is refused, naming it."""
    job = str(handle.get("job_id", ""))
    if not job.isascii() or not job.isdigit():
        raise LaunchError(f"job id {reason_text(repr(job), 40)}: not a Slurm job id (digits only); refused")
    return job


def batch_environment(spec: RunSpec, remote: bool) -> dict[str, str]:
    """What the batch script exports before anything runs: the allow-listed part of this worker's
    environment (a login node's submit: a system PATH alone), then the run's own `env` setting."""
    base = {"PATH": NODE_PATH} if remote else kept()
    # SLURM_* travel from sbatch's own environment, and the job's own (its id, its nodes) must win
    return {k: v for k, v in base.items() if not k.startswith("SLURM_")} | dict(spec.env)


def _directives(spec: RunSpec) -> list[str]:
    """The suite's `sbatch_directives`, refused where they would undo the job's environment or folder."""
    for directive in spec.sbatch_directives:
        if directive.split("=", 1)[0] in OWN_DIRECTIVES:
            raise LaunchError(
                f"sbatch directive {directive!r}: the suite sets the job's environment and folder itself "
                "(--export=NONE, --chdir=/); refused"
            )
    return [f"#SBATCH {d}" for d in spec.sbatch_directives]


def batch_script(spec: RunSpec, python: str, remote: bool = False) -> str:
    """The sbatch script; every interpolated value is validated by RunSpec and shlex-quoted here.
    `remote`: a login node submits it (its environment is a system PATH, not this worker's)."""
    nodes = len(spec.where.hosts) or max(1, math.ceil(spec.ranks / (spec.where.ranks_per_node or spec.ranks)))
    per_node = spec.ranks // nodes
    if per_node * nodes != spec.ranks:
        raise LaunchError(f"ranks: {spec.ranks} do not divide evenly over {nodes} nodes")
    out = spec.output_dir
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={q(job_name(spec.run_id))}",
        f"#SBATCH --nodes={nodes}",
        f"#SBATCH --ntasks-per-node={per_node}",
        f"#SBATCH --cpus-per-task={spec.where.cpus_per_rank}",
        f"#SBATCH --time={_time_limit(spec.where.time_limit_s)}",
        f"#SBATCH --output={q(str(out / 'logs' / 'slurm-%j.out'))}",
        "#SBATCH --kill-on-invalid-dep=yes",
    ]
    if spec.where.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={spec.where.gpus_per_node}")
        lines.append("#SBATCH --gpus-per-task=1")  # one GPU per rank, as a slot
    if spec.where.oversubscribe:
        lines += ["#SBATCH --overcommit", "#SBATCH --oversubscribe"]
    if spec.where.partition:
        lines.append(f"#SBATCH --partition={q(spec.where.partition)}")
    if spec.where.account:
        lines.append(f"#SBATCH --account={q(spec.where.account)}")
    lines += [*_directives(spec), "#SBATCH --export=NONE", "#SBATCH --chdir=/"]
    addr_file = out / "rendezvous.addr"
    addr_flag = f" --addr {q(spec.rendezvous_addr)}" if spec.rendezvous_addr else ""
    if spec.where.rendezvous_interface:
        addr_flag += f" --interface {q(spec.where.rendezvous_interface)}"
    environment = batch_environment(spec, remote)
    rendezvous = python_module(python, "bench.launch.rendezvous", "--port-file", str(addr_file))
    lines += [
        "set -u",
        f"cd {SAFE_CWD} || exit 71",
        *(f"export {k}={q(v)}" for k, v in environment.items()),
        f"mkdir -p {q(str(out / 'logs'))} {q(str(out / 'ranks'))}",
        f"rm -f {q(str(addr_file))}",
        heredoc(spec),  # the ranks' settings, written where they run (bench.launch.train_spec)
        f"{shlex.join(rendezvous)}{addr_flag} --backend {q(spec.train.backend)} &",
        "RDV=$!",
        "trap 'kill -TERM $RDV 2>/dev/null' EXIT",
        # a rendezvous that exits (an interface this node lacks: its error is in the job's log) ends the wait
        f"for _ in $(seq 600); do [ -s {q(str(addr_file))} ] && break; "
        "kill -0 $RDV 2>/dev/null || break; sleep 0.1; done",
        f"[ -s {q(str(addr_file))} ] || {{ echo 'rendezvous did not start' >&2; exit 70; }}",
        f"srun {q(srun_export(environment))} --chdir={SAFE_CWD} --kill-on-bad-exit=1 --cpu-bind=cores --output="
        + q(str(out / "logs" / "rank%t.log"))
        + " "
        + shlex.join(rank_argv(spec, python, ["--slot-from", "slurm", "--rendezvous-file", str(addr_file)])),
    ]
    return "\n".join(lines) + "\n"


class SlurmLauncher:
    name = "slurm"
    poll_s = 1.0  # a poll asks the controller (scontrol, then sacct; over ssh from a login node)

    def __init__(self, runner: CommandRunner | None = None) -> None:
        self.runner = runner or CommandRunner()

    def check(self, spec: RunSpec) -> None:
        if spec.where.partition:
            done = self.runner.run(["sinfo", "-h", "-p", spec.where.partition, "-o", "%P"], check=False)
            if done.returncode != 0 or not done.stdout.strip():
                raise LaunchError(f"partition {spec.where.partition}: not found by sinfo ({done.stderr.strip()})")
        self._check_slots(spec)

    def _check_slots(self, spec: RunSpec) -> None:
        """Ranks per node x cpus_per_rank must fit the partition's nodes, named, before sbatch."""
        if spec.where.oversubscribe:
            return
        nodes = len(spec.where.hosts) or max(1, math.ceil(spec.ranks / (spec.where.ranks_per_node or spec.ranks)))
        per_node = math.ceil(spec.ranks / nodes)
        argv = ["sinfo", "-h", "-N", "-o", "%N %c"] + (["-p", spec.where.partition] if spec.where.partition else [])
        done = self.runner.run(argv, check=False)
        cpus = {}
        for line in done.stdout.splitlines() if done.returncode == 0 else []:
            name, _, count = line.partition(" ")
            if count.strip().isdigit():
                cpus[name] = int(count)
        if not cpus:
            return  # sinfo gave nothing to check against: sbatch itself refuses what cannot fit
        largest = max(cpus, key=cpus.get)
        slots = cpus[largest] // spec.where.cpus_per_rank
        if per_node > slots:
            raise LaunchError(
                f"node {largest}: {per_node} ranks per node asked, but it has {slots} slot(s) "
                f"({cpus[largest]} CPUs / cpus_per_rank {spec.where.cpus_per_rank}); set oversubscribe to allow it"
            )

    def submit(self, spec: RunSpec) -> Handle:
        self.check(spec)
        # The worker's interpreter when submitting locally; on a login node, the spec's (or python3 there).
        python = node_python(spec.python, self.runner.remote)
        # slurmd opens --output before the script runs: the folders must exist where the job runs.
        folders = [str(spec.output_dir / "logs"), str(spec.output_dir / "ranks")]
        self.runner.run(["mkdir", "-p", *folders])
        script = batch_script(spec, python, self.runner.remote)
        if not self.runner.remote:
            write_file(spec.output_dir / "job.sbatch", script)
        done = self.runner.run(["sbatch", "--parsable"], stdin=script)
        job_id = done.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise LaunchError(f"sbatch returned no job id: {done.stdout!r}")
        return {
            "backend": self.name,
            "run_id": spec.run_id,
            "output_dir": str(spec.output_dir),
            "job_id": job_id,
            "ranks": spec.ranks,
        }

    def poll(self, handle: Handle) -> tuple[RunState, str]:
        """The job's state; a failure to ask (controller down, login node unreachable) is UNKNOWN, never FAILED."""
        try:
            job = job_id_of(handle)
        except LaunchError as error:
            return RunState.FAILED, str(error)
        state, reason = self._state(handle, job)
        return state, reason_text(reason)

    def _state(self, handle: Handle, job: str) -> tuple[RunState, str]:
        """poll's answer for the valid job id `job`, its reason as scontrol or sacct gave it."""
        try:
            done = self.runner.run(["scontrol", "-o", "show", "job", job], check=False)
        except LaunchError as error:
            return RunState.UNKNOWN, f"scontrol: {error}"
        if done.returncode != 0 and "invalid job id" not in done.stderr.lower():
            return RunState.UNKNOWN, f"scontrol exit {done.returncode}: {done.stderr.strip()[:300]}"
        fields = dict(t.split("=", 1) for t in done.stdout.split() if "=" in t) if done.returncode == 0 else {}
        raw = fields.get("JobState")
        if raw is not None and fields.get("JobName") != job_name(handle["run_id"]):
            # Job ids restart after a controller loses its state: that id is someone else's job now.
            return RunState.FAILED, f"job {job} now names {fields.get('JobName')!r}, not this run"
        if raw is None:  # the controller answered and no longer knows the job: ask accounting
            try:
                acct = self.runner.run(
                    ["sacct", "-n", "-P", "-X", "-j", job, "-o", "State,ExitCode,Reason,JobName"], check=False
                )
            except LaunchError as error:
                return RunState.UNKNOWN, f"sacct: {error}"
            if acct.returncode != 0:
                if "accounting storage is disabled" in acct.stderr.lower():
                    return RunState.FAILED, f"job {job} is gone from scontrol and this cluster keeps no accounting"
                return RunState.UNKNOWN, f"sacct exit {acct.returncode}: {acct.stderr.strip()[:300]}"
            parts = acct.stdout.strip().splitlines()[0].split("|") if acct.stdout.strip() else []
            if not parts:
                return RunState.FAILED, f"job {job} unknown to scontrol and sacct"
            if len(parts) > 3 and parts[3] and parts[3] != job_name(handle["run_id"]):
                return RunState.FAILED, f"job {job} now names {parts[3]!r}, not this run"
            raw, fields = (
                parts[0].split()[0],
                {"ExitCode": parts[1], "Reason": parts[2] if len(parts) > 2 else ""},
            )
        state = SLURM_STATES.get(raw, RunState.FAILED)
        reason = f"slurm {raw}"
        if state.finished and state != RunState.COMPLETED:
            reason += f" exit {fields.get('ExitCode', '?')} reason {fields.get('Reason', 'None')}"
        return state, reason

    def cancel(self, handle: Handle) -> None:
        """scancel of the handle's job alone: its id checked digits-only, after `--` (never an option)."""
        self.runner.run(["scancel", "--", job_id_of(handle)], check=False)

    def fetch(self, handle: Handle, local_dir: Path) -> None:
        """Bring ranks/, metrics/ and logs/ back from a remote cluster's output folder, or fail loudly.

        What an earlier attempt left locally is replaced, never read: the copy lands in a fresh folder
        first and only a complete copy replaces the old one. A failed ssh or remote tar, or an archive
        holding anything but regular files and folders (see extract_results), is a LaunchError.
        """
        if not self.runner.remote:
            return
        import shutil
        import tempfile

        remote = shlex.join(["tar", "-C", handle["output_dir"], "-cf", "-", *RESULT_PARTS])
        assert self.runner.ssh and self.runner.login_host
        local_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".fetch-", dir=local_dir))
        try:
            self._receive(handle, remote, staging)
            for part in RESULT_PARTS:
                shutil.rmtree(local_dir / part, ignore_errors=True)
                if (staging / part).exists():
                    os.replace(staging / part, local_dir / part)
        except LaunchError:
            for part in ("metrics", "ranks"):  # nothing of an earlier attempt may pass for this one
                shutil.rmtree(local_dir / part, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _receive(self, handle: Handle, remote: str, staging: Path) -> None:
        """Run the remote tar over ssh and unpack its stream into staging; LaunchError naming what failed.

        A refused archive stops the transfer at once (ssh is killed): nothing more of it is read.
        """
        assert self.runner.ssh and self.runner.login_host
        problem = ""
        with subprocess.Popen(
            self.runner.ssh.argv(self.runner.login_host, remote),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=tool_environment(),
            cwd=SAFE_CWD,
        ) as src:
            try:
                extract_results(src.stdout, staging)
            except LaunchError as error:
                problem = str(error)
                src.kill()
            src.stdout.close()
            err = src.stderr.read().decode(errors="replace").strip()
            src.wait(timeout=120)
        if problem or src.returncode != 0:
            why = "; ".join(x for x in (problem, err) if x)
            raise LaunchError(
                f"fetching {handle['output_dir']} from {self.runner.login_host} failed "
                f"(ssh/tar exit {src.returncode}): {reason_text(why)}"
            )


def extract_results(stream: IO[bytes], dest: Path) -> None:
    """Unpack a results tar stream into dest: regular files and folders under RESULT_PARTS only.

    Every member is checked before anything of it is written (check_member), then extracted with
    tarfile's 'data' filter as a second guard (no owners, no special modes). The summed sizes and the
    member count are bounded; the stream is read to its end so the sender finishes cleanly.
    """
    total = 0
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for count, member in enumerate(tar, 1):
                check_member(member)
                total += member.size
                if total > FETCH_MAX_BYTES or count > FETCH_MAX_MEMBERS:
                    raise LaunchError(
                        f"results archive member {member.name!r}: the archive exceeds {FETCH_MAX_BYTES} bytes "
                        f"or {FETCH_MAX_MEMBERS} members; refused"
                    )
                tar.extract(member, dest, filter="data")
        _drain(stream)
    except (tarfile.TarError, OSError) as error:
        raise LaunchError(f"results archive unreadable or not unpacked: {error}") from None


def check_member(member: tarfile.TarInfo) -> None:
    """Refuse, naming it, a member that is not a regular file or folder under ranks/, metrics/ or logs/."""
    path = PurePosixPath(member.name)
    if path.is_absolute() or not path.parts or path.parts[0] not in RESULT_PARTS or ".." in path.parts:
        raise LaunchError(
            f"results archive member {member.name!r}: not a path under {', '.join(RESULT_PARTS)}; refused"
        )
    if not (member.isreg() or member.isdir()):
        raise LaunchError(
            f"results archive member {member.name!r}: is a {_kind(member)}; "
            "only regular files and folders are fetched (refused, nothing of it written)"
        )


def _kind(member: tarfile.TarInfo) -> str:
    """What a refused member is, in words."""
    if member.issym():
        return "symbolic link"
    if member.islnk():
        return "hard link"
    if member.ischr() or member.isblk():
        return "device"
    if member.isfifo():
        return "FIFO"
    return "special file"


def _drain(stream: IO[bytes]) -> None:
    """Read what follows the archive's end (tar's record padding), refusing more than TRAILER_MAX_BYTES."""
    left = TRAILER_MAX_BYTES
    while chunk := stream.read(min(64 << 10, left + 1)):
        left -= len(chunk)
        if left < 0:
            raise LaunchError(f"results archive: more than {TRAILER_MAX_BYTES} bytes after its end; refused")


NAME = SlurmLauncher.name


def build(options: LauncherOptions) -> SlurmLauncher:
    """sbatch on the login node over ssh where one is given, else the Slurm CLI here."""
    return SlurmLauncher(
        CommandRunner(options.ssh if options.login_host else None, options.login_host, options.slurm_env)
    )
