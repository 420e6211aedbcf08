"""A sweep plan: the TOML as written and what it means (see docs/architecture.md)."""
