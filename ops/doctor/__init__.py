"""tatu doctor: what protects a run from the OOM killers (see docs/architecture.md)."""
