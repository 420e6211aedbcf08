"""tatu.model (see docs/architecture.md)."""
# The folder installs as tatu.model; importing it as a bare top-level "model" (for example from
# the repository root, where the current directory is on sys.path) would create a second,
# divergent copy of the module tree.
if __name__ != "tatu.model":
    raise ImportError("import tatu.model, not model (the folder installs as tatu.model)")
