"""The storage under test, measured: fio's read ceiling of the staged dataset (`fio_probe`) and the
checkpoint phase's writes and cold reads (`checkpoint`, its files `checkpoint_files`, and the phase on
its own `checkpoint_local`). Beside the dataset code (`bench.data`: generating, staging and reading a
dataset), below the training: nothing here imports `bench.train`."""
