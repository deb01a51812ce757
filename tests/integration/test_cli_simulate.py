"""`clustermgr simulate` as an admin runs it: the real command in a child process, on a
small SWF trace and the shipped example simulation config."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from tests.conftest import REPO, run_cli

CPU_CONFIG = str(REPO / "etc" / "simulate" / "cpu-cluster.toml")


def swf(path: Path, lines: list[str]) -> Path:
    header = "; UnixStartTime: 1000000000\n"
    body = "".join(line + "\n" for line in lines)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress((header + body).encode()))
    else:
        path.write_text(header + body)
    return path


def busy_trace(path: Path) -> Path:
    """Four 1-node jobs at once for 2 on-prem nodes, and one line that is not a job."""
    fields = "{n} {t} -1 3600 1 -1 -1 1 3600 -1 1 1 1 -1 1 -1 -1 -1"
    lines = [fields.format(n=n, t=n) for n in range(1, 5)]
    lines.append("5 10 -1 -1 1 -1 -1 1 3600 -1 1 1 1 -1 1 -1 -1 -1")  # run time unknown
    return swf(path, lines)


def test_compare_prints_every_strategy_and_writes_the_plot(tmp_path: Path) -> None:
    trace = busy_trace(tmp_path / "busy.swf.gz")
    plot = tmp_path / "out.png"
    done = run_cli(
        "simulate", "--config", CPU_CONFIG, "--trace", str(trace), "--onprem-nodes", "2",
        "--compare", "--plot", str(plot),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    header = done.stdout.splitlines()[0]
    assert header == "busy.swf.gz (swf): 4 jobs, 2 on-prem nodes, scale-time 1, seed 1"
    for column in ("static", "reactive", "bound", "clairvoyant", "default"):
        assert column in done.stdout
    assert "paid cloud node-hours" in done.stdout and "wait p95" in done.stdout
    # two jobs burst for an hour each; reactive idles 10 minutes after each, the floor not
    (row,) = [line for line in done.stdout.splitlines() if "waste captured" in line]
    captured = [cell.strip() for cell in row.split("│")[1:]]
    assert captured[:4] == ["-", "0%", "200%", "100%"]  # static, reactive, bound, clairvoyant
    assert "1 line rejected (first: line 6: run time -1 (unknown))" in done.stderr
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_json_holds_the_figures_and_the_rejected_lines(tmp_path: Path) -> None:
    trace = busy_trace(tmp_path / "busy.swf")
    done = run_cli(
        "simulate", "--config", CPU_CONFIG, "--trace", str(trace), "--onprem-nodes", "2",
        "--policy", "reactive", "--policy", "clairvoyant", "--policy", "queue_depth+idle_timeout",
        "--json",
        "--plot", str(tmp_path / "out.html"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["jobs"] == 4 and report["onprem_nodes"] == 2
    assert report["rejected_first"] == [{"line": 6, "why": "run time -1 (unknown)"}]
    assert report["rejected_by_reason"] == {"run time N (unknown)": 1}
    by_name = {r["strategy"]: r for r in report["results"]}
    assert set(by_name) == {"reactive", "clairvoyant", "queue_depth+idle_timeout"}
    # the floor pays each node's boot and hour, no idle tail: 2 * 4200 s
    assert by_name["clairvoyant"]["paid_node_hours"] == round(2 * 4200 / 3600, 4)
    assert by_name["clairvoyant"]["waste_captured"] == 1.0
    assert by_name["reactive"]["waste_captured"] == 0.0
    reactive = by_name["reactive"]
    # two jobs burst: each pays its 600 s boot, its hour and 600 idle seconds
    assert reactive["cloud_jobs"] == 2
    assert reactive["paid_node_hours"] == round(2 * 4800 / 3600, 4)
    assert reactive["wait_p95_s"] == 600
    page = (tmp_path / "out.html").read_text()
    assert "<svg" in page and "queue_depth+idle_timeout" in page


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    cases = {
        "missing": (["--trace", str(tmp_path / "nope.swf")], "nope.swf"),
        "empty": (["--trace", str(swf(tmp_path / "empty.swf", ["1 2 3"]))], "no usable jobs"),
        "policy": (
            ["--trace", str(busy_trace(tmp_path / "t.swf")), "--policy", "queue_depht"],
            "policy 'queue_depht': not built in",
        ),
        "plot": (
            ["--trace", str(busy_trace(tmp_path / "u.swf")), "--plot", str(tmp_path / "x.gif")],
            "use a .png, .svg, .pdf or .html file name",
        ),
    }
    for name, (args, expected) in cases.items():
        done = run_cli("simulate", "--config", CPU_CONFIG, *args)
        assert done.returncode == 2, (name, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], (name, done.stderr)
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "x.gif").exists()
