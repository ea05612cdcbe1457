"""`bench evaluate` and `bench detect` (filled in with the analysis package)."""


def add_parsers(sub) -> None:
    return None
