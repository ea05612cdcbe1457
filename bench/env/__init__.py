"""The environment a run measured (its fingerprint)."""
