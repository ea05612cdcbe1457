"""A rank's settings as one JSON file, `train.json` in the run's folder: the same `TrainConfig` the
worker validated, read back and validated by the same model in each rank (`bench train --spec FILE`).

Why a file and not flags: the flags were a second encoding of the model written by hand (`to_argv`
and argparse's parser for it), which every new setting had to join twice and which two settings once
crossed wrongly. JSON is the model's own form: `model_dump_json` on the worker, `model_validate_json`
in the rank, and the run folder is already the one place every node of a run sees (its ranks write
their metrics there). Only the fields the worker set travel (`exclude_unset`), so a rank's model
keeps which fields were given, as the worker's did (`amp` without `precision` stays an alias).

Why the rank checks a digest: a run folder on a shared store may be writable by others, and a file there
can be swapped between the worker's write and a rank's read (flags on a command line could not be). The
rank wrapper's command carries the JSON's sha256 (`--spec-sha256`, on the worker's side of the launch),
and a rank refuses a file whose bytes are not the ones its launcher wrote.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path

from bench.config.models import RunSpec, TrainConfig
from bench.config.types import parse
from bench.errors import ConfigError
from bench.safe_fs import RefusedFile, read_bounded, write_file

TRAIN_SPEC = "train.json"
MAX_SPEC_BYTES = 64 << 10  # a TrainConfig is under 2 KB; anything near this is not one
HEREDOC_END = "SCALEWATCH_TRAIN_SPEC"  # a line compact JSON (always one line) can never be
SHA256_RE = r"[0-9a-f]{64}"


def rank_train_config(spec: RunSpec) -> TrainConfig:
    """The run's `TrainConfig` as its ranks run it: their metrics in the run folder, the submit's nonce."""
    return spec.train.model_copy(update={"metrics_out": spec.output_dir / "metrics", "run_nonce": spec.nonce or None})


def spec_text(spec: RunSpec) -> str:
    return rank_train_config(spec).model_dump_json(exclude_unset=True)


def spec_sha256(spec: RunSpec) -> str:
    """The digest a rank checks the file against (of the JSON line, without its newline)."""
    return hashlib.sha256(spec_text(spec).encode()).hexdigest()


def spec_path(spec: RunSpec) -> Path:
    return spec.output_dir / TRAIN_SPEC


def write_train_spec(spec: RunSpec) -> Path:
    """Written by the worker where it sees the run folder (local, ssh), never through a planted link."""
    path = spec_path(spec)
    write_file(path, spec_text(spec) + "\n")
    return path


def heredoc(spec: RunSpec) -> str:
    """Shell lines that write the spec where the job runs (a batch script the worker may hand to a
    login node over ssh: the worker does not see the cluster's run folder). The delimiter is quoted, so
    the shell expands nothing in the JSON. Never through a link planted at the name while the job
    queued: the JSON goes to a new file of mktemp's (O_EXCL) beside it, renamed over the name (a rename
    replaces a link, never writes through it)."""
    path = spec_path(spec)
    folder, name = shlex.quote(str(path.parent)), shlex.quote(str(path))
    return (
        f"SPEC_TMP=$(mktemp {folder}/.{TRAIN_SPEC}.XXXXXX) || exit 71\n"
        f"cat > \"$SPEC_TMP\" <<'{HEREDOC_END}'\n{spec_text(spec)}\n{HEREDOC_END}\n"
        f'mv -fT "$SPEC_TMP" {name} || exit 71'
    )


def read_train_spec(path: Path, sha256: str | None = None) -> TrainConfig:
    """The rank's side: the file read without following a link at its name, checked against the digest
    its launcher sent (`sha256`; None: a person's own file), validated by the model."""
    path = path.absolute()
    try:
        text = read_bounded(path.parent, path.name, MAX_SPEC_BYTES)
    except FileNotFoundError as error:
        raise ConfigError(f"--spec: {path} does not exist") from error
    except RefusedFile as error:
        raise ConfigError(f"--spec: {error}") from error
    except OSError as error:  # a permission refused, a directory named: the rank's log says which and why
        raise ConfigError(f"--spec: {path} cannot be read ({error.strerror or error})") from error
    if sha256 is not None and hashlib.sha256(text.rstrip(b"\n")).hexdigest() != sha256:
        raise ConfigError(
            f"--spec: {path} is not the file its launcher wrote (its sha256 differs from --spec-sha256): "
            "refused; was the run folder written by someone else?"
        )
    try:
        data = json.loads(text)
    except ValueError as error:
        raise ConfigError(f"--spec: {path} is not JSON ({error})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--spec: {path} holds {type(data).__name__}, not a rank's settings object")
    try:
        return parse(TrainConfig, data)
    except ConfigError as error:
        raise ConfigError(f"--spec {path}: {error}") from None
