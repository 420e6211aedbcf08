"""tatu.ops (see docs/architecture.md)."""
# The folder installs as tatu.ops; importing it as a bare top-level "ops" (for example from
# the repository root, where the current directory is on sys.path) would create a second,
# divergent copy of the module tree.
if __name__ != "tatu.ops":
    raise ImportError("import tatu.ops, not ops (the folder installs as tatu.ops)")
