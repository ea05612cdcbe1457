"""The DAG's task bodies, one module per group in the order the DAG runs them: `plan` (the run's settings
validated once, at the edge, into the plan the other tasks read), `sweep` (staging, the sweeps of leftover
jobs, the confirming reruns; the scales themselves are `scalewatch.operators.TrainScaleOperator`), `probe`
(fio), `record` (evaluate, store, report), `alert` and `verdict`. `scalewatch.dag_factory` only wires them.

DAG files import these modules when they are parsed: the work's imports stay inside the functions."""
