"""The alert text: every failing (workload, GPUs, metric, value, bound), and links a recipient can open.

Each item is one line (`lines_of`): a reason or an evidence string carries what the nodes reported, such
as another user's process name (`prctl` lets a process name itself with a line break), and a line break
in it would start a line of its own in the alert, one that could read as a verdict ("• all scales pass").
"""

from __future__ import annotations

import re

# control characters and the line breaks Unicode adds (NEL, LINE and PARAGRAPH SEPARATOR)
_BREAKS = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]+")


def one_line(text: str) -> str:
    """`text` with every control character and line break turned into a space."""
    return _BREAKS.sub(" ", text)


def lines_of(lines: list[str]) -> str:
    """The alert's text: each item one line, whatever its free text holds."""
    return "\n".join(one_line(line) for line in lines)


def alert_text(
    suite_run_id: str,
    failures: list[dict],
    report: str | None,
    report_url: str | None = None,
    run_url: str | None = None,
    inconclusive: list[dict] | None = None,
    slow_nodes: list[str] | None = None,
    at_au: dict[str, list[dict]] | None = None,
    figures: list[dict] | None = None,
    interfering: list[dict] | None = None,
    storage: str | None = None,
) -> str:
    """`figures`: the figures whose own validity rule failed (a read too short for a rate), each stated as
    an INCONCLUSIVE item of its row (bench.analysis.verdict.evaluate.inconclusive_figures). `interfering`:
    the nodes whose ranks lost their cores to one process in several runs
    (bench.analysis.history.interference), listed under the slow nodes: both are a node to look at.
    `storage`: the storage under test as the nodes read it (bench.env.fingerprint.storage_under_test)."""
    inconclusive, figures = inconclusive or [], figures or []
    verdict = "FAILED" if failures else "INCONCLUSIVE"
    lines = [
        f"scalewatch: scaling check {verdict} for suite run {suite_run_id} "
        f"({len(failures)} failing figure(s), {len(inconclusive)} inconclusive row(s)"
        + (f", {len(figures)} inconclusive figure(s))" if figures else ")")
    ]
    if storage:
        lines.append(f"storage under test: {storage}")
    for f in failures:
        reason = f" — {f['reason']}" if f.get("reason") else ""
        cause = f"; bottleneck: {f['bottleneck']} — {f['evidence']}" if f.get("bottleneck") else ""
        lines.append(
            f"• {f['workload']} @ {f['gpus']} GPUs: {f['metric']} = {f['value']} "
            f"(bound {f['bound']}; {f['expectation']}){reason}{cause}"
        )
    for i in inconclusive:
        lines.append(f"• {i['workload']} @ {i['gpus']} GPUs: inconclusive — {i['reason']}")
    for i in figures:
        lines.append(f"• {i['workload']} @ {i['gpus']} GPUs: {i['figure']} INCONCLUSIVE — {i['reason']}")
    lines += [f"• slow node: {line}" for line in slow_nodes or []]
    lines += interference_lines(interfering or [])
    lines += at_au_lines(at_au or {})
    return lines_of(lines + link_lines(report, report_url, run_url))


def interference_lines(interfering: list[dict]) -> list[str]:
    """One item per node that lost its ranks' cores to the same process in several recent runs: its line
    ("node X: `proc` took 30% of the ranks' cores in 3 of the last 5 runs") names the node and process."""
    return [f"• {n['line']}" for n in interfering]


def node_news(
    cluster: str, suite_run_id: str, slow_nodes: list[str], interfering: list[dict], links: tuple
) -> list[tuple[str, str]]:
    """(subject, text) of a passing week's node findings, none without any: a slow node or a node another
    process keeps taking cores from is news in a passing week too. `links`: (report, report_url, run_url)."""
    if not slow_nodes and not interfering:
        return []
    what = " and ".join(w for w, found in (("slow node(s)", slow_nodes), ("node interference", interfering)) if found)
    text = lines_of(
        [f"scalewatch: {what} on cluster {cluster} (suite run {suite_run_id})"]
        + [f"• {line}" for line in slow_nodes]
        + interference_lines(interfering)
        + link_lines(*links)
    )
    return [(f"scalewatch: {what} on {cluster} ({suite_run_id})", text)]


def at_au_lines(at_au: dict[str, list[dict]]) -> list[str]:
    """An emulated workload's headline figure (bench.analysis.verdict.accelerators), measured and projected:
    the AU failure a recipient reads above says where AU fell, this says how many accelerators it feeds."""
    lines = []
    for workload, entries in at_au.items():
        for e in entries:
            if e.get("accelerators") is None:
                continue
            how = "measured" if e.get("measured") else "projected"
            lines.append(
                f"• {workload}: accelerators_at_au = {e['accelerators']} {e.get('accelerator', '')} "
                f"at AU >= {e.get('min_au')} ({how}; {e.get('basis', '')})"
            )
    return lines


def change_text(
    suite_run_id: str, changes: list[dict], report: str | None, report_url: str | None, run_url: str | None
) -> str:
    """Change points the latest run confirmed in the weekly history (each sent once), and recoveries."""
    lines = [f"scalewatch: the weekly history changed, confirmed by suite run {suite_run_id} (sent once)"]
    lines += [f"• [{c['cluster']}] {c['line']}" for c in changes]
    return lines_of(lines + link_lines(report, report_url, run_url))


def link_lines(report: str | None, report_url: str | None, run_url: str | None) -> list[str]:
    lines = []
    if report_url:
        lines.append(f"Report: {report_url}")
    elif report:
        lines.append(f"Report (a path on the Airflow worker; set [api] base_url for a link): {report}")
    if run_url:
        lines.append(f"Airflow run: {run_url}")
    return lines
