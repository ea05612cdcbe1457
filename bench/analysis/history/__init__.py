"""Runs over time: change points (offline and as the weekly runs saw them), the regression floor,
annotations and re-baselining, per-node health, and the labelled histories the detector is tuned on.
Plain frames and series in, plain values out: the store persists, it does not judge."""
