"""What everything the suite starts gets of the worker's environment, and where it starts: one allow-list.

Why: an Airflow worker's environment holds its secrets (AIRFLOW__API_AUTH__JWT_SECRET, a connection's
URL in AIRFLOW_CONN_*, a results database's password). Whatever the suite starts (the detached
supervisor, its ranks, the rank wrappers, sbatch, srun and the batch script, the Slurm CLI, the storage
probe and staging on a node, fio) inherited all of it: on Slurm it was stored in slurmctld's job record
and given to every rank, on any launcher it reached a rank's /proc/<pid>/environ (issue 61, item 2).
So a started process gets only the names listed here, from this process's environment, and what its
launcher sets for it (a rank's placement and secret, the run's own `env` setting).

Why `/` and `python -P`: `python -m` puts the working folder first on sys.path, and Slurm starts a job
in the submitter's folder, or /tmp where the node lacks it: a `bench/` package planted there ran as the
job. Every Python the suite starts runs with -P (no working folder or script folder on sys.path) from
`/` (SAFE_CWD), and the batch script says `--chdir=/` and `--export=NONE` (its environment is written
in the script, from this allow-list) and hands srun only the names it exported.

Kept: the locale and time zone, PATH, HOME and the user's name, Python's own path (its empty or
relative entries dropped: they name the working folder), the loader's library path, SLURM_* (what the
Slurm tools read; SLURM_JWT, a credential, is not kept), the ranks' tuning variables (CUDA_*, NCCL_*,
GLOO_*, OMP_*, MKL_*, KMP_*, HOROVOD_*, DALI_*, TORCH_*, PYTORCH_*, ONEDNN_*, NVIDIA_*) and the
SCALEWATCH_* settings a rank reads, and AWS_ENDPOINT_URL(_S3) (the S3 endpoint a suite staged to; a node's
S3 keys are its own). Never kept, whatever matched: AIRFLOW*, and any name that says
SECRET, PASSWORD, PASSWD, TOKEN, JWT, CREDENTIAL or _KEY. The tools the worker runs itself (ssh,
sbatch, scontrol) also get the ssh agent's socket (TOOL_NAMES), which no rank is given.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

SAFE_CWD = "/"
KEPT_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "PYTHONPATH",
        "LD_LIBRARY_PATH",
        # what a rank reads of its own (bench.train.dist.base, bench.train.dist.ddp, bench.train.timing)
        "SCALEWATCH_TORCH_THREADS",
        "SCALEWATCH_DDP_TIMEOUT_S",
        "SCALEWATCH_BUSY_WINDOW_STEPS",
        # where a dataset in a bucket is (no secret; a node's keys are its own: bench.data.location)
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
    }
)
KEPT_PREFIXES = (
    "LC_",
    "SLURM_",
    "CUDA_",
    "NCCL_",
    "GLOO_",
    "OMP_",
    "MKL_",
    "KMP_",
    "HOROVOD_",
    "DALI_",
    "TORCH_",
    "PYTORCH_",
    "ONEDNN_",
    "NVIDIA_",
)
NEVER_PREFIXES = ("AIRFLOW",)
NEVER_WORDS = ("SECRET", "PASSWORD", "PASSWD", "TOKEN", "JWT", "CREDENTIAL", "_KEY")
# Besides the kept names, for the tools the worker runs itself (never for a rank): ssh's agent.
TOOL_NAMES = frozenset({"SSH_AUTH_SOCK"})


def kept_name(name: str) -> bool:
    """Whether `name` may travel from this process's environment to a process the suite starts."""
    upper = name.upper()
    if not (name.isascii() and name.isidentifier()):  # exported by a shell, listed in srun's --export=A,B
        return False
    if upper.startswith(NEVER_PREFIXES) or any(word in upper for word in NEVER_WORDS):
        return False
    return name in KEPT_NAMES or name.startswith(KEPT_PREFIXES)


def _python_path(value: str) -> str:
    """PYTHONPATH without its empty or relative entries: each of those names the working folder."""
    return os.pathsep.join(p for p in value.split(os.pathsep) if os.path.isabs(p))


def kept(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed part of `env` (this process's environment by default): what a rank may get of it."""
    source = os.environ if env is None else env
    out = {k: v for k, v in source.items() if kept_name(k)}
    if "PYTHONPATH" in out:
        out["PYTHONPATH"] = _python_path(out["PYTHONPATH"])
        if not out["PYTHONPATH"]:
            del out["PYTHONPATH"]
    return out


def rank_environment(*settings: Mapping[str, str]) -> dict[str, str]:
    """A rank's (or a node probe's) environment: the kept part of ours, then each of `settings` over it."""
    env = kept()
    for more in settings:
        env |= dict(more)
    return env


def tool_environment(settings: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a tool the worker runs (ssh, the Slurm CLI, the detached supervisor): the kept
    names, ssh's agent socket, then `settings` (a Slurm connection's SLURM_CONF, say)."""
    tools = {k: v for k, v in os.environ.items() if k in TOOL_NAMES}
    return kept() | tools | dict(settings or {})


def python_module(python: str, module: str, *args: str) -> list[str]:
    """`python -P -m module args`: the module found on the install's path, never in the working folder."""
    return [python, "-P", "-m", module, *args]


def srun_export(names: Iterable[str]) -> str:
    """srun's flag giving its tasks only `names` from the batch script's environment (and SLURM_*)."""
    listed = sorted(set(names))
    return "--export=" + (",".join(listed) if listed else "NONE")
