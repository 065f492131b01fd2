"""``dsbench report``: tables, CSV/JSON/Markdown, plots and an HTML report from run folders (no re-run)."""
