"""Statistics across seeds and their power (see docs/architecture.md)."""
