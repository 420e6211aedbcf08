"""Presenting a judged sweep: the closing text's tables, the HTML page, the plots, the prose and the
conclusions, and the status text. Reads the judge's records (tatu.sweep.judge); runs nothing."""
