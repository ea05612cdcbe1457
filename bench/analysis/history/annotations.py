"""Annotations on change points: a person marks a change as expected or explained, with a note, and the
series re-baselines from it.

"New storage firmware, faster is right": once marked, the regression floor and the change watch judge
the series only on runs from that change on, so the old level neither flags the new one as an
improvement forever nor holds a later regression back. The change itself stays on the dashboard with
its annotation. Notes are plain text: markup is refused at the edge and everything is escaped on pages.

Annotations are a log (revision 0014): every word is kept with its author, time and DAG, and a change
point's annotation is its newest word (`ResultsStore.add_annotation`, `annotations`, `annotation_history`).
A series is keyed by (cluster, workload, GPUs, config), not by DAG: two suite DAGs running the same
config on one cluster share its history, floor and change watch, so one annotation re-baselines the
series for all of them; whoever adds one needs edit permission on every DAG whose runs hold the series
(`ResultsStore.dag_ids_of_series`), not only on the DAG of the run the change happened in.
"""

from __future__ import annotations

import re
from typing import Literal

import pandas as pd
from pydantic import Field, field_validator

from bench.config.types import NAME_RE, WORKLOADS, Frozen

MAX_NOTE_CHARS = 2000
Kind = Literal["expected", "explained"]
KINDS: tuple[str, ...] = ("expected", "explained")
_MARKUP = re.compile(r"<\s*[A-Za-z!/?]|&[A-Za-z#][A-Za-z0-9]*;")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# A note is one line (issue 48): stored text reaches files other programs read line by line (the SQLite
# store's own file was read as an OpenSSH config, whose `Match exec` line ran), so no note may start a
# line of its own anywhere. One line loses nothing a note needs; escaping it for every reader would not.
_LINE_BREAK = re.compile("[\n\r\x85\u2028\u2029]")


class Annotation(Frozen):
    """One person's word on one stored change point (its key is the change_alerts key)."""

    cluster: str = Field(min_length=1, max_length=64)
    workload: str
    gpus: int = Field(ge=1, le=4096)
    config_key: str = Field(min_length=1, max_length=128)
    metric: str = Field(min_length=1, max_length=64)
    changed_at: str = Field(min_length=1, max_length=64)
    kind: Kind
    note: str = Field(min_length=1, max_length=MAX_NOTE_CHARS)

    @field_validator("cluster")
    @classmethod
    def _cluster(cls, value: str) -> str:
        if not NAME_RE.fullmatch(value):
            raise ValueError(f"cluster {value!r} does not match {NAME_RE.pattern}")
        return value

    @field_validator("workload")
    @classmethod
    def _workload(cls, value: str) -> str:
        # a real model or a workload file's name (emulated workloads have series too): the change point
        # itself must exist, which the annotation's writer checks
        if value not in WORKLOADS and not NAME_RE.fullmatch(value):
            raise ValueError(
                f"workload {value!r}: a model ({', '.join(WORKLOADS)}) or a name matching {NAME_RE.pattern}"
            )
        return value

    @field_validator("note")
    @classmethod
    def _plain_text(cls, value: str) -> str:
        if _MARKUP.search(value):
            raise ValueError("note: markup (HTML tags or entities) is not allowed; write plain text")
        if _CONTROL.search(value):
            raise ValueError("note: control characters are not allowed")
        if _LINE_BREAK.search(value.strip()):
            raise ValueError("note: one line of plain text; line breaks are not allowed")
        return value.strip()


def baseline_since(annotations: pd.DataFrame, cluster: str, workload: str, gpus: int, config_key: str) -> str | None:
    """The newest annotated change of the series: its runs from then on are the series' baseline (the
    same whether `annotations` holds each change point's newest word or all of them)."""
    if annotations is None or annotations.empty:
        return None
    mine = annotations[
        (annotations["cluster"] == cluster)
        & (annotations["workload"] == workload)
        & (annotations["gpus"].astype(int) == int(gpus))
        & (annotations["config_key"] == config_key)
    ]
    return str(mine["changed_at"].max()) if not mine.empty else None


def rebaselined(series: pd.DataFrame, since: str | None) -> pd.DataFrame:
    """A series' accepted runs from its baseline on (all of them when nothing is annotated)."""
    if since is None or series.empty:
        return series
    return series[series["started_at"].astype(str) >= since].reset_index(drop=True)
