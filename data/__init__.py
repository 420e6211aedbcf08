"""tatu.data (see docs/architecture.md)."""
# The folder installs as tatu.data; importing it as a bare top-level "data" (for example from
# the repository root, where the current directory is on sys.path) would create a second,
# divergent copy of the module tree.
if __name__ != "tatu.data":
    raise ImportError("import tatu.data, not data (the folder installs as tatu.data)")
