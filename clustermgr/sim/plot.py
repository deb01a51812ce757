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

from clustermgr.errors import UsageError
from clustermgr.sim.results import Figures, Sample

MAX_POINTS = 4000  # per line: enough for a screen, small enough for an HTML page
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
        nodes_ax.step(
            days, cloud, where="post", color=colour, lw=0.8, label=f"cloud up: {figures.strategy}"
        )
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
    step = max(1, len(timeline) // MAX_POINTS)
    points = list(timeline[::step])
    if timeline and points[-1] is not timeline[-1]:
        points.append(timeline[-1])
    return (
        [s.at_s / 86400 for s in points],
        [float(s.onprem_busy) for s in points],
        [float(s.cloud_active) for s in points],
        [float(s.queued) for s in points],
        [s.cost for s in points],
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
