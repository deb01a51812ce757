"""`--plot`: nodes over time (on-prem busy, cloud up, queue) and the cost curve, per strategy.

A PNG (or SVG/PDF, by the file name) from matplotlib, or an HTML page holding the same
figure as inline SVG with the figures table, to open in a browser.
"""

from __future__ import annotations

import html
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clustermgr.core.errors import UsageError
from clustermgr.sim.results import Figures, Sample

MAX_POINTS = 1500  # time buckets per line: enough for a screen, small for an HTML page
IMAGE_SUFFIXES = (".png", ".svg", ".pdf")


def check_target(path: Path) -> None:
    """Refuse a target we cannot write before hours of replay, not after."""
    if path.suffix.lower() not in (*IMAGE_SUFFIXES, ".html"):
        raise UsageError(f"--plot {path}: use a .png, .svg, .pdf or .html file name")
    if not path.parent.is_dir():
        raise UsageError(f"--plot {path}: directory {path.parent} does not exist")


def write_plot(path: Path, title: str, runs: Sequence[tuple[Figures, Sequence[Sample]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, (nodes_ax, queue_ax, cost_ax) = pyplot.subplots(
        3, 1, figsize=(11, 9), sharex=True, constrained_layout=True
    )
    figure.suptitle(title)
    for number, (figures, timeline) in enumerate(runs):
        days, busy, cloud, queued, cost = _columns(timeline)
        colour = f"C{number}"
        if number == 0:
            nodes_ax.step(days, busy, where="post", color="0.55", lw=0.8, label="on-prem busy")
        if figures.strategy != "static":
            label = f"cloud up: {figures.strategy}"
            nodes_ax.step(days, cloud, where="post", color=colour, lw=0.8, label=label)
        queue_ax.step(days, queued, where="post", color=colour, lw=0.8, label=figures.strategy)
        cost_ax.plot(
            days, cost, color=colour, lw=1.2, label=f"{figures.strategy}: ${figures.cost:,.0f}"
        )
    nodes_ax.set_ylabel("nodes")
    queue_ax.set_ylabel("jobs waiting")
    cost_ax.set_ylabel("cloud cost ($, cumulative)")
    cost_ax.set_xlabel("days since the first job")
    for axes in (nodes_ax, queue_ax, cost_ax):
        axes.legend(loc="upper left", fontsize="small")
        axes.grid(alpha=0.3)
    try:
        if path.suffix.lower() == ".html":
            buffer = io.StringIO()
            figure.savefig(buffer, format="svg")
            path.write_text(_page(title, buffer.getvalue(), [f for f, _ in runs]))
        else:
            figure.savefig(path, dpi=110)
    except OSError as exc:
        raise UsageError(f"--plot {path}: cannot write: {exc.strerror}") from None
    finally:
        pyplot.close(figure)


def _columns(timeline: Sequence[Sample]) -> tuple[list[float], ...]:
    """Time-weighted means per time bucket (the cost: its value at each bucket's end): a
    year of events draws as a readable line, not a stride sample that hides the peaks."""
    if not timeline:
        return [], [], [], [], []
    start, end = timeline[0].at_s, timeline[-1].at_s
    width = max((end - start) / MAX_POINTS, 1.0)
    buckets: dict[int, list[float]] = {}  # bucket -> [seconds, busy, cloud, queued, cost]
    for sample, after in zip(timeline, [*timeline[1:], timeline[-1]], strict=True):
        held = max(after.at_s - sample.at_s, 1e-9)  # a sample holds until the next one
        sums = buckets.setdefault(int((sample.at_s - start) / width), [0.0, 0.0, 0.0, 0.0, 0.0])
        sums[0] += held
        sums[1] += sample.onprem_busy * held
        sums[2] += sample.cloud_active * held
        sums[3] += sample.queued * held
        sums[4] = sample.cost
    ordered = sorted(buckets.items())
    return (
        [(start + index * width) / 86400 for index, _ in ordered],
        [sums[1] / sums[0] for _, sums in ordered],
        [sums[2] / sums[0] for _, sums in ordered],
        [sums[3] / sums[0] for _, sums in ordered],
        [sums[4] for _, sums in ordered],
    )


def _page(title: str, svg: str, figures: list[Figures]) -> str:
    rows = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in f.as_json().values())
        + "</tr>"
        for f in figures
    )
    head = "".join(f"<th>{html.escape(k)}</th>" for k in figures[0].as_json()) if figures else ""
    svg_body = svg[svg.find("<svg") :]
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif}table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:2px 6px}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>{svg_body}<table><tr>{head}</tr>{rows}</table>"
        "</body></html>\n"
    )


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)
