"""The systemd unit templates and per-run env files, shipped as package data (tatu.units)."""
if __name__ != "tatu.units":
    raise ImportError("import tatu.units, not units (the folder installs as tatu.units)")
