"""The results schema (bench.results.schema): the one place a results column is named."""
