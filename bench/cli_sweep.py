"""`bench sweep` and `bench report` (filled in with the pipeline)."""


def add_parsers(sub) -> None:
    return None
