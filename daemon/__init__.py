"""tatu.daemon (see docs/architecture.md)."""
# The folder installs as tatu.daemon; importing it as a bare top-level "daemon" (for example from
# the repository root, where the current directory is on sys.path) would create a second,
# divergent copy of the module tree.
if __name__ != "tatu.daemon":
    raise ImportError("import tatu.daemon, not daemon (the folder installs as tatu.daemon)")
