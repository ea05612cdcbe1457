"""Exception types; the CLI and the Airflow tasks turn these into messages once, at the edge."""


class BenchError(Exception):
    """Base class: anything the user can fix by changing input or environment."""


class ConfigError(BenchError):
    """A field of a config, flag or Param is invalid; the message names the field."""


class DatasetError(BenchError):
    """A dataset file or annotation is missing, corrupt or inconsistent; names the file."""


class StagingError(DatasetError):
    """Copying onto the storage under test failed; nothing half-copied is recorded."""


class StorageLost(BenchError):
    """The storage holding the dataset went away mid-run (a lost mount, a dead server): the run fails."""


class ResultsInputError(BenchError):
    """A results or history table is malformed; names column and row."""


class LaunchError(BenchError):
    """A run could not be submitted or its hosts are not usable; names the host."""


class RunFailed(BenchError):
    """A launched run ended in a non-success state."""


class MeasurementError(BenchError):
    """A rank measured nothing usable (no step after warm-up, no positive rate): never a valid result."""
