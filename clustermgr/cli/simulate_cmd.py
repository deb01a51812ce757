"""`clustermgr simulate`: replay a workload trace through the policies; cost and wait."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from clustermgr.cli.context import AppContext
from clustermgr.cli.output import echo, emit_grid

REJECTED_SHOWN = 20


@click.command()
@click.option(
    "--trace",
    "trace_path",
    required=True,
    type=click.Path(path_type=Path),
    help="Workload trace: SWF (.swf, .swf.gz), sacct -P / --json, Alibaba GPU CSV.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["swf", "sacct", "alibaba"]),
    help="Trace format [default: from the file name and contents].",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path),
    help="Config with the templates, prices and chain [default: the global --config].",
)
@click.option(
    "--policy",
    "policies",
    multiple=True,
    metavar="NAME",
    help="static, reactive, bound, clairvoyant, default (the config's chain) or a+b+c; repeatable.",
)
@click.option(
    "--compare", is_flag=True, help="Add the static, reactive, bound and clairvoyant baselines."
)
@click.option(
    "--onprem-nodes",
    type=click.IntRange(min=0),
    help="On-prem nodes [default: [simulate] onprem_nodes, else the largest job].",
)
@click.option(
    "--scale-time",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Multiply submit times (below 1: a busier cluster).",
)
@click.option(
    "--procs-per-node",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="SWF processors per node.",
)
@click.option("--seed", type=int, help="Random seed (spot reclaims) [default: [simulate] seed].")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(path_type=Path),
    help="Write nodes, queue and cost over time to a .png/.svg/.pdf or .html file.",
)
@click.pass_obj
def simulate(
    app: AppContext,
    trace_path: Path,
    fmt: str | None,
    config_file: Path | None,
    policies: tuple[str, ...],
    compare: bool,
    onprem_nodes: int | None,
    scale_time: float,
    procs_per_node: int,
    seed: int | None,
    as_json: bool,
    plot_path: Path | None,
) -> None:
    """Replay a trace through the real policy chain and the baselines: cost, wait, plots."""
    from clustermgr.config import load_settings
    from clustermgr.sim.clairvoyant import waste_captured
    from clustermgr.sim.plot import PlotRun, check_target, write_plot
    from clustermgr.sim.replay import Strategy
    from clustermgr.sim.strategies import replays, strategies
    from clustermgr.sim.traces import read_trace, rejected_by_reason

    settings = load_settings(config_file) if config_file else app.settings()
    if seed is not None:
        settings = settings.model_copy(
            update={"simulate": settings.simulate.model_copy(update={"seed": seed})}
        )
    chosen = strategies(settings, list(policies), compare)
    if plot_path is not None:
        check_target(plot_path)
    trace = read_trace(trace_path, fmt, procs_per_node=procs_per_node)
    if trace.rejected and not as_json:
        first = trace.rejected[0]
        lines = "line" if len(trace.rejected) == 1 else "lines"
        echo(
            f"{trace_path}: {len(trace.rejected):,} {lines} rejected "
            f"(first: line {first.line}: {first.why}); --json lists the first {REJECTED_SHOWN}",
            err=True,
        )
    nodes = onprem_nodes
    if nodes is None:
        nodes = settings.simulate.onprem_nodes or max(job.nodes for job in trace.jobs)
    runs = []
    drawn = []

    def starting(strategy: Strategy) -> None:
        if sys.stderr.isatty() and not as_json:
            echo(f"replaying {len(trace.jobs):,} jobs: {strategy.name} ...", err=True)

    for _, outcome, took in replays(settings, trace, chosen, nodes, scale_time, starting):
        figures = outcome.figures()
        runs.append((figures, outcome.timeline, took))
        if plot_path is not None:
            drawn.append(PlotRun(figures, outcome.timeline, outcome.waits))
    facts = {
        "trace": str(trace_path),
        "format": trace.format,
        "jobs": len(trace.jobs),
        "rejected": len(trace.rejected),
        "onprem_nodes": nodes,
        "scale_time": scale_time,
        "seed": settings.simulate.seed,
    }
    captured = waste_captured({f.strategy: f.cost for f, _, _ in runs})
    if plot_path is not None:
        title = f"{trace_path.name}: {nodes} on-prem nodes, scale-time {scale_time:g}"
        write_plot(plot_path, title, drawn)
    if as_json:
        from clustermgr.cli.output import emit_json

        rejected = [{"line": r.line, "why": r.why} for r in trace.rejected[:REJECTED_SHOWN]]
        results = [
            {
                **f.as_json(),
                "waste_captured": _rounded(captured[f.strategy]),
                "replay_s": round(s, 2),
            }
            for f, _, s in runs
        ]
        by_reason = rejected_by_reason(trace.rejected)
        emit_json(
            {
                **facts,
                "rejected_by_reason": by_reason,
                "rejected_first": rejected,
                "results": results,
            }
        )
        return
    echo(
        f"{trace_path.name} ({trace.format}): {len(trace.jobs):,} jobs, "
        f"{nodes} on-prem nodes, scale-time {scale_time:g}, seed {settings.simulate.seed}"
    )
    power = settings.simulate.onprem_suspend_after_s is not None
    _table([(f, s) for f, _, s in runs], ROWS + (POWER_ROWS if power else []), captured)
    if plot_path is not None:
        echo(f"plot written to {plot_path}")


ROWS: list[tuple[str, str]] = [
    ("jobs completed", "completed"),
    ("never started", "never_started"),
    ("never run (fits no pool)", "unrunnable"),
    ("jobs run in the cloud", "cloud_jobs"),
    ("paid cloud node-hours", "paid_node_hours"),
    ("cost ($)", "cost"),
    ("used cloud node-hours", "used_node_hours"),
    ("idle paid node-hours", "idle_paid_node_hours"),
    ("paid / used", "paid_per_used"),
    ("lost to spot reclaims (node-h)", "lost_node_hours"),
    ("wait mean", "wait_mean_s"),
    ("wait median", "wait_median_s"),
    ("wait p95", "wait_p95_s"),
    ("bounded slowdown", "bounded_slowdown"),
    ("on-prem utilisation", "onprem_utilisation"),
    ("cloud utilisation", "cloud_utilisation"),
    ("launches", "launches"),
    ("spot reclaims", "reclaims"),
    ("launches without capacity", "capacity_failures"),
    ("policy errors", "policy_errors"),
]


POWER_ROWS: list[tuple[str, str]] = [
    ("on-prem node-hours powered off", "onprem_off_node_hours"),
    ("on-prem power-ons", "onprem_power_ons"),
    ("energy saved (kWh)", "energy_saved_kwh"),
]


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _table(
    runs: list[tuple[Any, float]],
    rows: list[tuple[str, str]],
    captured: dict[str, float | None],
) -> None:
    grid: list[list[str]] = []
    for label, key in rows:
        grid.append([label, *(_show(key, getattr(f, key)) for f, _ in runs)])
        if key == "cost" and any(value is not None for value in captured.values()):
            shown = (captured[f.strategy] for f, _ in runs)
            grid.append(["waste captured", *("-" if v is None else f"{v:.0%}" for v in shown)])
    grid.append(["replay time", *(f"{seconds:.1f} s" for _, seconds in runs)])
    emit_grid([f.strategy for f, _ in runs], grid)
    errors = [f for f, _ in runs if f.last_policy_error]
    for figures in errors:
        echo(f"{figures.strategy}: last policy error: {figures.last_policy_error}", err=True)


def _show(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key.startswith("wait_"):
        from clustermgr.sim.results import readable_duration

        return readable_duration(value)
    if key.endswith("utilisation"):
        return f"{value:.1%}"
    if key == "cost" or isinstance(value, float):
        return f"{value:,.0f}" if value >= 100 or value == 0 else f"{value:.2f}"
    if key in ("paid_per_used", "bounded_slowdown"):
        return f"{value:.3f}"
    return f"{value:,}"
