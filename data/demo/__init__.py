"""The offline demo data from Debian packages (see docs/architecture.md)."""
