"""A sweep's sequential design: `[design]` of the plan (design.py) and the looks log (log.py); the
statistics are evals/seeds/sequential.py's."""
