"""Judging a sweep's members: what each achieved, per-line scores, statistics over seeds, the
sequential looks and their log, the schedule, and the verdict of the locked rule. Reads the plan
(tatu.sweep.plan) and the run dirs; never the presentation (tatu.sweep.report)."""
