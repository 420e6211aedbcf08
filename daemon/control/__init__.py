"""The daemon's control socket: protocol, access, server, client (see docs/architecture.md)."""
