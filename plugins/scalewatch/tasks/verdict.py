"""The run's last task: it fails when the suite failed or was inconclusive, naming each scale and why."""

from __future__ import annotations

from airflow.sdk import task


@task(trigger_rule="all_done")
def verdict(outcome: dict | None) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    if not outcome:
        raise AirflowFailException("no evaluation: an upstream step failed (see alert)")
    if not outcome["passed"]:
        what = "failed" if outcome["failures"] else "inconclusive"
        raise AirflowFailException(
            f"scaling check {what}: " + "; ".join(lines(outcome)) + f" report {outcome['report']}"
        )


def lines(outcome: dict) -> list[str]:
    """One line per failing or inconclusive scale."""
    return [
        f"{f['workload']}@{f['gpus']} {f['metric']}={f['value']} bound {f['bound']}" for f in outcome["failures"]
    ] + [f"{i['workload']}@{i['gpus']} inconclusive: {i['reason']}" for i in outcome.get("inconclusive", [])]
