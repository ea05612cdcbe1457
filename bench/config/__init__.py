"""Typed, validated configuration: every user input passes through these models once.

Airflow Params, CLI flags and config files are all turned into these models at the edge, then the
models are passed down; nothing deeper re-reads the environment or re-validates strings. One module
per concern, imported one way: `types` (choices, patterns, constrained types, `parse`), `defaults`,
`form` (the trigger form's side of a setting), `checkpoint`, `models` (`SuiteSettings` and the
internal views read from it), `settings` (reading user-given settings) and `trust` (who may set what).
"""
