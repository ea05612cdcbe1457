"""The trigger's settle: kept where a scheduler runs tasks, dropped where dag.test() runs them inline."""

from __future__ import annotations

from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms, set_supervisor_comms

from scalewatch.triggers import SETTLE_S, settle_seconds


def test_a_task_outside_dag_test_keeps_the_settle():
    assert SETTLE_S == 15.0
    assert settle_seconds() == SETTLE_S


def test_a_task_run_inline_by_dag_test_needs_no_settle():
    with set_supervisor_comms(InProcessSupervisorComms(supervisor=None)):
        assert settle_seconds() == 0.0
    assert settle_seconds() == SETTLE_S
