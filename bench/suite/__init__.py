"""The suite's run, in the order of the DAG's tasks: plan (matrix, run spec, folder) -> run (stage,
each scale, the differential reruns, the storage probe) -> record (results, store, report, once).
`bench sweep` and the Airflow tasks call the same functions."""
