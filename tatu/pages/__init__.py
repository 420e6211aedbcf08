"""The look tatu's HTML reports share: the run report (tatu.ops.report) and the sweep page
(tatu.sweep.report.page) are written with the same page shell, style, tables and figures."""
