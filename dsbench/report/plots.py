"""PNG plots of report rows (matplotlib, Agg backend, imported lazily)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsbench.report.files import PLOT_NAMES
from dsbench.rows import Row

STATE_PARTS = [("params", "parameters"), ("grads", "gradients"), ("optimizer_states", "optimizer states"),
               ("master_weights", "fp32 master weights")]


def _labels(rows: list[Row], among: list[Row]) -> list[str]:
    """Each row's tick label: strategy and ranks, and its model when ``among`` (the report's rows) has several."""
    many = len({r.model for r in among}) > 1
    return [f"{row.strategy} x{row.world_size}" + (f"\n{row.model}" if many else "") for row in rows]


def figure(width: float = 9.0, height: float = 4.5) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height), dpi=110)


def save_figure(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def throughput(rows: list[Row], path: Path) -> Path:
    """Bars: wall-clock tokens/s (the throughput figure); markers: the timed region's median, p10-p90."""
    ok = [r for r in rows if r.timed_tokens_per_s is not None]
    fig, ax = figure()
    labels = _labels(ok, rows)
    ax.bar(labels, [r.tokens_per_s or 0 for r in ok], color="#4c72b0", label="wall clock over the measured window")
    timed = [r.timed_tokens_per_s for r in ok]
    ax.errorbar(labels, timed, yerr=[[t - r.timed_tokens_per_s_p10 for t, r in zip(timed, ok, strict=True)],
                                     [r.timed_tokens_per_s_p90 - t for t, r in zip(timed, ok, strict=True)]],
                fmt="o", color="#dd8452", capsize=4, label="timed region per step (median, p10-p90)")
    ax.set_ylabel("tokens/s (global)")
    ax.set_title("Throughput per strategy")
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", rotation=30)
    return save_figure(fig, path)


def memory(rows: list[Row], path: Path) -> Path:
    ok = [r for r in rows if r.model_states]
    figure(1, 1)  # selects the Agg backend
    import matplotlib.pyplot as plt

    plt.close("all")
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5.2), dpi=110)
    labels = _labels(ok, rows)
    bottom = [0.0] * len(ok)
    for key, name in STATE_PARTS:
        values = [r.model_states.get(key, 0) / 2**20 for r in ok]
        left.bar(labels, values, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    left.set_ylabel("MiB per rank (rank 0, counted from tensors)")
    left.set_title("Model states per rank")
    left.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=2)
    kind = (ok[0].memory_kind or "") if ok else ""
    right.bar(labels, [r.peak_memory_mib for r in ok], color="#dd8452")
    right.set_ylabel("MiB per rank (" + ("peak RSS: includes runtime and activations" if kind == "rss"
                                         else "CUDA max allocated") + ")")
    right.set_title("Peak memory per rank")
    for ax in (left, right):
        ax.tick_params(axis="x", rotation=30)
    return save_figure(fig, path)


def scaling(rows: list[Row], path: Path) -> Path:
    fig, ax = figure()
    series: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        if row.scaling_efficiency is not None:
            series.setdefault(row.strategy, []).append((row.world_size, row.scaling_efficiency))
    for name, points in sorted(series.items()):
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("ranks")
    ax.set_ylabel("scaling efficiency = tokens/s(N) / (N x tokens/s(1))")
    ax.set_title("Scaling efficiency vs world size")
    if series:
        ax.legend(fontsize=8)
    return save_figure(fig, path)


def losses(rows: list[Row], path: Path) -> Path:
    fig, ax = figure()
    for row, label in zip(rows, _labels(rows, rows), strict=True):
        run = next((r for r in row.runs if r.status == "ok" and r.losses), None)
        if run:
            ax.plot(range(1, len(run.losses) + 1), run.losses, label=label.replace("\n", " "))
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss (mean over the global batch)")
    ax.set_title("Loss curves (same data order and seed)")
    if ax.get_legend_handles_labels()[1]:
        ax.legend(fontsize=7, ncol=2)
    return save_figure(fig, path)


def step_times(rows: list[Row], path: Path) -> Path:
    ok = [r for r in rows if r.status == "ok"]
    fig, ax = figure()
    data = [[t * 1e3 for run in r.runs for t in run.step_times] for r in ok]
    if any(data):  # matplotlib's boxplot fails on no columns
        ax.boxplot(data, tick_labels=_labels(ok, rows))
    else:
        ax.text(0.5, 0.5, "no successful run", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("timed-region step time, ms (measured steps, all repeats)")
    ax.set_title("Step time distribution")
    ax.tick_params(axis="x", rotation=30)
    return save_figure(fig, path)


def all_plots(rows: list[Row], folder: Path) -> dict[str, Path]:
    """Write every plot into ``folder``; returns name -> path."""
    folder.mkdir(parents=True, exist_ok=True)
    makers = dict(zip(PLOT_NAMES, (throughput, memory, scaling, losses, step_times), strict=True))
    return {name: make(rows, folder / f"{name}.png") for name, make in makers.items()}


def by_link(rows: list[Any], links: list[str], path: Path) -> Path:
    """``dsbench whatif``'s plot: wall-clock tokens/s of each strategy at each link rate (rows: bench.whatif.Row)."""
    fig, ax = figure()
    for strategy in dict.fromkeys(r.strategy for r in rows):
        speed = {r.link: r.tokens_per_s for r in rows if r.strategy == strategy}
        ax.plot(links, [speed.get(link) or float("nan") for link in links], marker="o", label=strategy)
    ax.set_xlabel("link rate between the nodes (tc tbf, both ways)")
    ax.set_ylabel("tokens/s (wall clock)")
    ax.set_yscale("log")
    ax.set_title("Throughput by link rate")
    ax.legend(fontsize=8)
    return save_figure(fig, path)
