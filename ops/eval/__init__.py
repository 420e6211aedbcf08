"""tatu eval and tatu compare (see docs/architecture.md)."""
