"""Running a locked plan: the coordinator, the backends it starts members on (foreground, systemd,
Ray), the coordinator's unit, the members' states, the cost estimate, HParams sessions and the
`tatu sweep` command line. It asks the judge (tatu.sweep.judge) what to run next and what was decided."""
