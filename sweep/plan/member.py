"""A sweep's member: one configuration at one seed, as the plan defines it and the lock holds it."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Member:
    """One run of the sweep: a configuration at one seed."""

    name: str         # replay-n6-s3
    run: str          # <sweep>.<name>: TATU_RUN, the unit instance, the run dir
    stage: str        # "tune" or "compare"
    config_key: str   # replay-n6: the configuration without its seed
    values: dict      # axis variable -> value (strings, as the environment holds them); CONFIG -> its name
    seed: int
    env: dict         # every variable the member's env file holds

    @property
    def run_dir(self) -> Path:
        """Where its daemon writes (TATU_OUT/TATU_RUN): what the member achieved is read from here."""
        return Path(self.env["TATU_OUT"]) / self.run

    def to_json(self) -> dict:
        return {"name": self.name, "run": self.run, "stage": self.stage, "config_key": self.config_key,
                "values": self.values, "seed": self.seed, "env": self.env}

    @classmethod
    def from_json(cls, doc: dict) -> "Member":
        return cls(doc["name"], doc["run"], doc["stage"], doc["config_key"], dict(doc["values"]), int(doc["seed"]),
                   dict(doc["env"]))
