"""Reports: plots of width sweeps (:mod:`netsor.report.plots`)."""

from netsor.report.plots import loglog_plot

__all__ = ["loglog_plot"]
