"""tatu.sweep: pre-registered sweeps in four packages, plan/ (what is locked), run/ (running it), judge/ (the verdict), report/ (presenting it); see docs/architecture.md."""
# The folder installs as tatu.sweep; importing it as a bare top-level "sweep" (for example from
# the repository root, where the current directory is on sys.path) would create a second,
# divergent copy of the module tree.
if __name__ != "tatu.sweep":
    raise ImportError("import tatu.sweep, not sweep (the folder installs as tatu.sweep)")
