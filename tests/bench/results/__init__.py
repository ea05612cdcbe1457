"""The results schema contract."""
