"""`--plot`: one figure an admin reads in ten seconds.

Left, one panel per bursting strategy: cloud nodes up over the on-prem nodes busy (shaded),
on one scale, so the strategies are compared panel by panel instead of hidden under each
other. Right, top to bottom: how long jobs waited (the share of jobs that started within a
wait, every strategy, static included), jobs waiting over time (the bursting strategies:
static's backlog would flatten them; its peak is named instead), and the cumulative cloud
cost with each line labelled at its end.

A PNG (or SVG/PDF, by the file name) from matplotlib, or an HTML page holding the same
figure as inline SVG with the figures table, to open in a browser.
"""

from __future__ import annotations

import html
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clustermgr.core.errors import UsageError
from clustermgr.sim.clairvoyant import waste_captured
from clustermgr.sim.results import Figures, Sample, quantile, readable_duration

NODE_POINTS = 250  # time buckets per node line: a year in ~1.5-day means, readable
QUEUE_POINTS = 120  # time buckets of the queue: the most jobs waiting in each
COST_POINTS = 1500
REACTIVE_COPIES = ("bound", "clairvoyant")
BASELINES = ("static", "reactive", "bound", "clairvoyant")
CDF_POINTS = 400  # quantiles drawn per wait curve
IMAGE_SUFFIXES = (".png", ".svg", ".pdf")
SHORTEST_WAIT_MIN = 0.1  # the wait axis is logarithmic: waits under 6 s are drawn at 6 s
LABEL_GAP = 0.1  # cost labels at least this share of the axis apart


@dataclass(frozen=True)
class PlotRun:
    figures: Figures
    timeline: Sequence[Sample]
    waits: Sequence[float]  # seconds, one per job that started


def check_target(path: Path) -> None:
    """Refuse a target we cannot write before hours of replay, not after."""
    if path.suffix.lower() not in (*IMAGE_SUFFIXES, ".html"):
        raise UsageError(f"--plot {path}: use a .png, .svg, .pdf or .html file name")
    if not path.parent.is_dir():
        raise UsageError(f"--plot {path}: directory {path.parent} does not exist")


def write_plot(path: Path, title: str, runs: Sequence[PlotRun]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    colours = {run.figures.strategy: f"C{number}" for number, run in enumerate(runs)}
    names = {run.figures.strategy for run in runs}
    # bound and clairvoyant replay reactive's schedule: their waits and queue are reactive's
    # (and bound's nodes too), so they are drawn once, as reactive
    copies = set(REACTIVE_COPIES) if "reactive" in names else set()
    bursting = [run for run in runs if run.figures.strategy != "static"] or list(runs)
    scheduled = [run for run in runs if run.figures.strategy not in copies]
    figure = pyplot.figure(figsize=(14, max(8.0, 2.0 * len(bursting))), layout="constrained")
    figure.suptitle(title, fontsize="large")
    halves: Any = figure.subfigures(1, 2, width_ratios=[1.15, 1])  # typed as one or many
    left, right = halves
    _node_panels(
        left, [r for r in bursting if r.figures.strategy != "bound" or not copies], colours
    )
    waits_ax, queue_ax, cost_ax = right.subplots(3, 1)
    note = " (bound, clairvoyant: as reactive)" if copies & names else ""
    _waits(waits_ax, scheduled, colours, note)
    _queue(queue_ax, scheduled, colours, note)
    _cost(cost_ax, bursting, colours)
    try:
        if path.suffix.lower() == ".html":
            buffer = io.StringIO()
            figure.savefig(buffer, format="svg")
            path.write_text(_page(title, buffer.getvalue(), [run.figures for run in runs]))
        else:
            figure.savefig(path, dpi=100)
    except OSError as exc:
        raise UsageError(f"--plot {path}: cannot write: {exc.strerror}") from None
    finally:
        pyplot.close(figure)


def _node_panels(subfigure: Any, runs: Sequence[PlotRun], colours: dict[str, str]) -> None:
    axes = subfigure.subplots(len(runs), 1, sharex=True, sharey=True, squeeze=False)[:, 0]
    for ax, run in zip(axes, runs, strict=True):
        days, busy, cloud, _, _, _ = _columns(run.timeline, NODE_POINTS)
        name = run.figures.strategy
        ax.fill_between(days, busy, step="post", color="0.8", lw=0, label="on-prem busy")
        ax.fill_between(days, cloud, step="post", color=colours[name], alpha=0.6, lw=0)
        ax.plot([], [], color=colours[name], lw=4, label="cloud up")
        paid, used = run.figures.paid_node_hours, run.figures.used_node_hours
        title = f"{name}: cloud nodes up; {paid:,.0f} node-h paid for {used:,.0f} used"
        ax.set_title(title, loc="left", fontsize="medium")
        ax.set_ylabel("nodes")
        ax.grid(alpha=0.3)
        ax.margins(x=0)
    axes[0].legend(loc="upper right", fontsize="small")
    axes[-1].set_xlabel(f"days since the first job (means over {_bucket(runs, NODE_POINTS)})")


def _waits(ax: Any, runs: Sequence[PlotRun], colours: dict[str, str], note: str) -> None:
    """The share of jobs that waited longer than each wait (log-log: the tail shows)."""
    for run in runs:
        ordered = sorted(run.waits)
        if not ordered:
            continue
        minutes = [
            max(quantile(ordered, i / CDF_POINTS) / 60, SHORTEST_WAIT_MIN)
            for i in range(1, CDF_POINTS + 1)
        ]
        longer = [1 - i / CDF_POINTS + 1 / CDF_POINTS for i in range(1, CDF_POINTS + 1)]
        name = run.figures.strategy
        mean = readable_duration(run.figures.wait_mean_s)
        p95 = readable_duration(run.figures.wait_p95_s)
        label = f"{name}: mean {mean}, p95 {p95}"
        ax.step(minutes, longer, where="pre", color=colours[name], lw=1.4, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(left=SHORTEST_WAIT_MIN)
    ax.set_ylim(1 / CDF_POINTS, 1.05)
    ax.yaxis.set_major_formatter(_percent())
    ax.set_title("jobs that waited longer than a wait (lower: better)", loc="left")
    ax.set_xlabel(f"wait (minutes){note}")
    ax.legend(loc="lower left", fontsize="small")
    ax.grid(alpha=0.3, which="major")


def _queue(ax: Any, runs: Sequence[PlotRun], colours: dict[str, str], note: str) -> None:
    off_scale = None
    for run in runs:
        days, _, _, _, _, peak = _columns(run.timeline, QUEUE_POINTS)
        name = run.figures.strategy
        if name == "static" and len(runs) > 1:
            off_scale = f"static: up to {max(peak, default=0):,.0f} (off this scale)"
            continue
        ax.step(days, peak, where="post", color=colours[name], lw=1.2, label=name)
    if off_scale:
        ax.plot([], [], color=colours["static"], label=off_scale)
    ax.set_title(f"most jobs waiting at once, per {_bucket(runs, QUEUE_POINTS)}", loc="left")
    ax.set_ylabel("jobs")
    ax.set_xlabel(f"days since the first job{note}")
    ax.legend(loc="upper right", fontsize="small")
    ax.grid(alpha=0.3)
    ax.margins(x=0)


def _bucket(runs: Sequence[PlotRun], points: int) -> str:
    span = max(
        (run.timeline[-1].at_s - run.timeline[0].at_s for run in runs if run.timeline), default=0.0
    )
    days = span / points / 86400
    return f"{days:.1f} days" if days >= 1 else f"{days * 24:.1f} hours"


def _cost(ax: Any, runs: Sequence[PlotRun], colours: dict[str, str]) -> None:
    ends: list[tuple[float, float, str]] = []
    last_day = 0.0
    for run in runs:
        days, _, _, _, cost, _ = _columns(run.timeline, COST_POINTS)
        name = run.figures.strategy
        ax.plot(days, cost, color=colours[name], lw=1.3)
        if days:
            last_day = max(last_day, days[-1])
            ends.append((run.figures.cost, days[-1], name))
    top = max((end for end, _, _ in ends), default=0.0) or 1.0
    ax.set_xlim(0, last_day * 1.55 or 1)  # room on the right for the labels
    placed = -1.0
    captured = waste_captured({name: value for value, _, name in ends})
    for value, day, name in sorted(ends):
        at = max(value, placed + LABEL_GAP * top)
        placed = at
        share = captured.get(name)
        gain = f", {share:.0%} captured" if share is not None and name not in BASELINES else ""
        ax.annotate(
            f"{name} ${value:,.0f}{gain}",
            xy=(day, value),
            xytext=(last_day * 1.05, at),
            color=colours[name],
            fontsize="small",
            va="center",
            arrowprops={"arrowstyle": "-", "color": colours[name], "lw": 0.5},
        )
    ax.set_ylim(0, max(top, placed) * 1.08)
    ax.set_title("cloud cost, cumulative ($)", loc="left")
    ax.set_xlabel("days since the first job")
    ax.yaxis.set_major_formatter(_dollars())
    ax.grid(alpha=0.3)


def _percent() -> Any:
    from matplotlib.ticker import PercentFormatter

    return PercentFormatter(1.0)


def _dollars() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(
        lambda value, _: f"${value / 1000:,.0f}k" if value >= 1000 else f"${value:,.0f}"
    )


def _columns(timeline: Sequence[Sample], points: int) -> tuple[list[float], ...]:
    """Time-weighted means per time bucket (the cost: its value at each bucket's end; the
    last column: the most jobs waiting in the bucket): a year of events draws as a
    readable line, not a stride sample that hides the peaks."""
    if not timeline:
        return [], [], [], [], [], []
    start, end = timeline[0].at_s, timeline[-1].at_s
    width = max((end - start) / points, 1.0)
    # bucket -> [seconds, busy, cloud, queued, cost, most queued]
    buckets: dict[int, list[float]] = {}
    for sample, after in zip(timeline, [*timeline[1:], timeline[-1]], strict=True):
        held = max(after.at_s - sample.at_s, 1e-9)  # a sample holds until the next one
        sums = buckets.setdefault(int((sample.at_s - start) / width), [0.0] * 6)
        sums[0] += held
        sums[1] += sample.onprem_busy * held
        sums[2] += sample.cloud_active * held
        sums[3] += sample.queued * held
        sums[4] = sample.cost
        sums[5] = max(sums[5], sample.queued)
    ordered = sorted(buckets.items())
    return (
        [(start + index * width) / 86400 for index, _ in ordered],
        [sums[1] / sums[0] for _, sums in ordered],
        [sums[2] / sums[0] for _, sums in ordered],
        [sums[3] / sums[0] for _, sums in ordered],
        [sums[4] for _, sums in ordered],
        [sums[5] for _, sums in ordered],
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
