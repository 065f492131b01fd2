"""The names of the files a report writes into its folder (one list: the writer and the guard that keeps a user's own
files from being written over both read it)."""

PLOT_NAMES = ("throughput", "memory", "scaling", "loss", "step_time")
"""The report's plots, each written as NAME.png (dsbench/report/plots.py)."""
REPORT_FILES = ("report.md", "report.csv", "report.json", "report.html", *(f"{name}.png" for name in PLOT_NAMES))
