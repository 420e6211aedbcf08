"""Interpolated members of a sweep (see docs/architecture.md)."""
