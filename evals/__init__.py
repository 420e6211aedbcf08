"""tatu.evals (see docs/architecture.md)."""
# The folder installs as tatu.evals; importing it as a bare top-level "evals" (for example from
# the repository root, where the current directory is on sys.path) would create a second,
# divergent copy of the module tree.
if __name__ != "tatu.evals":
    raise ImportError("import tatu.evals, not evals (the folder installs as tatu.evals)")
