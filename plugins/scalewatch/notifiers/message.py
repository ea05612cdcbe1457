"""The alert text: every failing (workload, GPUs, metric, value, bound) and where the report is."""

from __future__ import annotations


def alert_text(suite_run_id: str, failures: list[dict], report: str | None, report_url: str | None = None) -> str:
    lines = [f"scalewatch: scaling check FAILED for suite run {suite_run_id} ({len(failures)} failing figure(s))"]
    for f in failures:
        reason = f" — {f['reason']}" if f.get("reason") else ""
        lines.append(
            f"• {f['workload']} @ {f['gpus']} GPUs: {f['metric']} = {f['value']} "
            f"(bound {f['bound']}; {f['expectation']}){reason}"
        )
    if report:
        lines.append(f"Report: {report_url or report}")
    return "\n".join(lines)
