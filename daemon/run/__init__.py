"""A run dir: its lock, its paths, its state (see docs/architecture.md)."""
