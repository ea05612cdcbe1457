"""One suite run judged: the results frame's derived figures, the expectations, the causes, the expected
scaling from measured ceilings, and the typed Evaluation (`evaluate`). Reads no history but what the
store hands it; imports nothing from the suite."""
