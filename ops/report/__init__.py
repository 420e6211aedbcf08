"""The run report: plots and one HTML page from runs' events."""
