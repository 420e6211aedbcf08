"""What a sweep writes down before anything runs: the plan file, its configurations and values, the
rule (parsed once), the sequential design, the interpolation, the members, and the lock that holds
them all as one typed locked plan. Imports nothing else of tatu.sweep but its error."""
