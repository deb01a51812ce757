"""Trace readers on small synthetic traces (never the real ones under /work/shared)."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from clustermgr.sim.traces import (
    FORMATS,
    Rejected,
    TraceError,
    TraceJob,
    guess_format,
    read_trace,
    rejected_by_reason,
)


def swf_line(
    job: int, submit: int, run: int, alloc: int, req_procs: int = -1, req_time: int = -1, **kw: int
) -> str:
    fields = [job, submit, 0, run, alloc, -1, -1, req_procs, req_time, -1, 1]
    fields += [kw.get("user", -1), -1, -1, -1, kw.get("partition", -1), -1, -1]
    return " ".join(str(f) for f in fields)


SWF_HEADER = "; Version: 2.2\n; UnixStartTime: 1000000000\n; MaxProcs: 100\n;\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_swf_fields_origin_and_relative_submit(tmp_path: Path) -> None:
    text = SWF_HEADER + "\n".join(
        [
            swf_line(1, 100, 3600, 8, req_time=7200, user=12, partition=3),
            swf_line(2, 160, 60, -1, req_procs=2),
        ]
    )
    trace = read_trace(write(tmp_path, "t.swf", text))
    assert trace.format == "swf" and trace.source == str(tmp_path / "t.swf")
    assert trace.rejected == []
    first, second = trace.jobs
    assert first == TraceJob("1", 0.0, 8, 0, 0, 0, 7200.0, 3600.0, "3", "12")
    assert (second.submit_s, second.nodes, second.requested_s) == (60.0, 2, None)
    assert (second.partition, second.user) == ("", "")
    assert trace.origin == datetime.fromtimestamp(1_000_000_100, UTC)


def test_swf_without_header_has_no_origin(tmp_path: Path) -> None:
    trace = read_trace(write(tmp_path, "t.swf", swf_line(1, 5, 10, 1) + "\n"))
    assert trace.origin is None and len(trace.jobs) == 1


def test_swf_gzip_by_magic_not_name(tmp_path: Path) -> None:
    text = SWF_HEADER + swf_line(7, 0, 30, 4) + "\n"
    zipped = tmp_path / "trace.swf.gz"
    zipped.write_bytes(gzip.compress(text.encode()))
    assert read_trace(zipped).jobs[0].job_id == "7"
    disguised = tmp_path / "trace.data"  # gzip without the name; fmt given
    disguised.write_bytes(gzip.compress(text.encode()))
    assert read_trace(disguised, "swf").jobs[0].nodes == 4
    assert guess_format(disguised) == "swf"  # by the `;` header inside the gzip


def test_swf_procs_per_node_packs_small_jobs_and_rounds_big_ones_up(tmp_path: Path) -> None:
    text = "\n".join(swf_line(i, i, 10, procs) for i, procs in enumerate([1, 32, 33, 64, 65]))
    trace = read_trace(write(tmp_path, "t.swf", text), procs_per_node=32)
    assert [j.nodes for j in trace.jobs] == [1, 1, 2, 2, 3]
    assert [j.cpus for j in trace.jobs] == [1, 0, 0, 0, 0]  # 1 processor shares a node
    assert trace.procs_per_node == 32  # the replay's on-prem nodes get 32 CPUs
    with pytest.raises(TraceError, match="procs_per_node"):
        read_trace(tmp_path / "t.swf", procs_per_node=0)


def test_swf_rejects_with_line_numbers_and_reasons(tmp_path: Path) -> None:
    lines = [
        "; UnixStartTime: 1000",  # 1
        swf_line(1, 0, 10, 1),  # 2 good
        "",  # 3 blank: skipped silently
        "1 2 3 4 5",  # 4
        swf_line(2, 5, -1, 1),  # 5
        swf_line(3, 5, 0, 1),  # 6
        swf_line(4, 5, 10, -1, req_procs=-1),  # 7
        swf_line(5, 5, 10, 0),  # 8
        swf_line(6, 5, 10, 1).replace(" 1 ", " x ", 1),  # 9
        swf_line(7, 5, 10, 1).replace("-1", "nan", 1),  # 10
        swf_line(8, 9, 10, 1),  # 11 good
    ]
    trace = read_trace(write(tmp_path, "t.swf", "\n".join(lines)))
    assert [j.job_id for j in trace.jobs] == ["1", "8"]
    assert [r.line for r in trace.rejected] == [4, 5, 6, 7, 8, 9, 10]
    whys = [r.why for r in trace.rejected]
    assert whys[0] == "5 fields, need 18"
    assert whys[1] == "run time -1 (unknown)"
    assert whys[2] == "run time 0"
    assert "processors unknown" in whys[3]
    assert whys[4] == "0 processors"
    assert whys[5].startswith("field ") and "not a number" in whys[5]
    assert "not a number" in whys[6]
    # counted by reason, values left out: both bad fields are one reason
    assert rejected_by_reason(trace.rejected + trace.rejected[1:2]) == {
        "field N not a number: N": 2,
        "run time N (unknown)": 2,
        "N fields, need N": 1,
        "run time N": 1,
        "processors unknown (fields N and N are N)": 1,
        "N processors": 1,
    }


def test_non_utf8_line_is_rejected_not_a_crash(tmp_path: Path) -> None:
    good = swf_line(1, 0, 10, 1).encode()
    bad = swf_line(2, 1, 10, 1).replace("-1", "\xff\xfe", 1).encode("latin-1")
    path = tmp_path / "t.swf"
    path.write_bytes(good + b"\n" + bad + b"\n")
    trace = read_trace(path)
    assert len(trace.jobs) == 1
    assert trace.rejected[0].line == 2 and "not a number" in trace.rejected[0].why


def test_jobs_sorted_by_submit_stably(tmp_path: Path) -> None:
    lines = [swf_line(1, 500, 10, 1), swf_line(2, 200, 10, 1), swf_line(3, 500, 10, 1)]
    lines.append(swf_line(4, 300, 10, 1))
    trace = read_trace(write(tmp_path, "t.swf", "\n".join(lines)))
    assert [j.job_id for j in trace.jobs] == ["2", "4", "1", "3"]
    assert [j.submit_s for j in trace.jobs] == [0.0, 100.0, 300.0, 300.0]


SACCT_COLUMNS = "JobID|Submit|Start|End|Elapsed|NNodes|NCPUS|AllocTRES|ReqTRES|Timelimit"
SACCT_COLUMNS += "|Partition|User|State"


def test_sacct_pipe_reads_jobs_and_rejects_unfinished(tmp_path: Path) -> None:
    rows = [
        SACCT_COLUMNS,
        "10|2024-01-02T03:04:05|2024-01-02T03:05:00|2024-01-02T05:05:00|02:00:00|2|16|"
        "billing=16,cpu=16,gres/gpu=4,gres/gpu:a100=4,mem=64G,node=2|cpu=16|1-00:00:00|gpu|alice|"
        "COMPLETED",
        "10.batch|2024-01-02T03:04:05|||01:00:00|1|8|||||alice|COMPLETED",  # step: skipped
        "11|2024-01-02T03:05:05|Unknown|Unknown|00:00:00|1|1||cpu=1|30:00|cpu|bob|PENDING",
        "12|2024-01-02T03:06:05|2024-01-02T03:07:00|Unknown|00:10:00|1|4|cpu=4|cpu=4|UNLIMITED|"
        "cpu|bob|RUNNING",
        "13|2024-01-02T03:06:05|None|2024-01-02T03:07:00|00:00:00|1|4||cpu=4|UNLIMITED|cpu|bob|"
        "CANCELLED by 1000",
        "14|2024-01-02T03:14:05|2024-01-02T03:15:00|2024-01-02T03:16:00|01:00|1|3|cpu=3,mem=100M|"
        "cpu=3|Partition_Limit|cpu|carol|FAILED",
        "15|2024-01-02T03:15:05|x|y|01:00|1|3|cpu=3|cpu=3|5:00",  # too few fields
    ]
    trace = read_trace(write(tmp_path, "acct.txt", "\n".join(rows) + "\n"))
    assert trace.format == "sacct"
    first, second = trace.jobs
    assert first == TraceJob("10", 0.0, 2, 8, 2, 32768, 86400.0, 7200.0, "gpu", "alice")
    assert (second.job_id, second.submit_s, second.run_s) == ("14", 600.0, 60.0)
    assert (second.requested_s, second.cpus, second.memory_mb) == (None, 3, 100)
    assert trace.origin == datetime(2024, 1, 2, 3, 4, 5).astimezone(UTC)
    assert [r.line for r in trace.rejected] == [4, 5, 6, 8]
    whys = [r.why for r in trace.rejected]
    assert whys[0] == "state PENDING (never ran)"
    assert "RUNNING" in whys[1] and "still running" in whys[1]
    assert whys[2] == "Elapsed 0 (never ran)"
    assert whys[3] == "10 fields, need 13"


def test_sacct_pipe_columns_in_any_order_with_extras(tmp_path: Path) -> None:
    text = (
        "State|User|Account|NCPUS|NNodes|Elapsed|JobID|Submit|ReqTRES|Timelimit\n"
        "COMPLETED|dave|physics|4|1|1-01:00:00|77_3|2024-05-01T00:00:00|cpu=4,gres/gpu:h100=2|"
        "02:00:00\n"
    )
    (job,) = read_trace(write(tmp_path, "acct.txt", text), "sacct").jobs
    assert (job.job_id, job.user, job.run_s, job.requested_s) == ("77_3", "dave", 90000.0, 7200.0)
    assert (job.cpus, job.gpus, job.partition) == (4, 2, "")


def test_sacct_pipe_missing_required_column_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, "acct.txt", "JobID|Submit|Elapsed|State\n1|2024-01-01T00:00:00|1:00|X\n")
    with pytest.raises(TraceError, match=r"acct\.txt: .*NNodes, NCPUS"):
        read_trace(path, "sacct")


def sacct_json_job(job_id: int, submit: int, **over: Any) -> dict[str, Any]:
    """A job in the Slurm 23.02+ shape."""
    job: dict[str, Any] = {
        "job_id": job_id,
        "partition": "gpu",
        "user": "erin",
        "allocation_nodes": 2,
        "required": {"CPUs": 8},
        "state": {"current": ["COMPLETED"], "reason": "None"},
        "time": {
            "submission": submit,
            "start": submit + 10,
            "end": submit + 130,
            "elapsed": 120,
            "limit": {"set": True, "infinite": False, "number": 60},
        },
        "tres": {
            "allocated": [
                {"type": "cpu", "name": "", "id": 1, "count": 16},
                {"type": "mem", "name": "", "id": 2, "count": 4096},
                {"type": "gres", "name": "gpu", "id": 1001, "count": 4},
                {"type": "gres", "name": "gpu:a100", "id": 1002, "count": 4},
            ],
            "requested": [],
        },
    }
    job.update(over)
    return job


def test_sacct_json_new_shape(tmp_path: Path) -> None:
    running = sacct_json_job(3, 1_700_000_000, state={"current": ["RUNNING"]})
    running["time"] = {**running["time"], "end": 0}
    jobs = [
        sacct_json_job(2, 1_700_000_300),
        sacct_json_job(1, 1_700_000_000),
        running,
        sacct_json_job(4, 1_700_000_000, state={"current": ["PENDING"]}),
        "garbage",
        {"job_id": 5, "time": {"submission": 1_700_000_000, "end": 1_700_000_100, "elapsed": 0}},
    ]
    path = write(tmp_path, "jobs.json", json.dumps({"meta": {}, "jobs": jobs}))
    trace = read_trace(path)
    assert trace.format == "sacct-json"
    assert [j.job_id for j in trace.jobs] == ["1", "2"]
    assert trace.jobs[1] == TraceJob("2", 300.0, 2, 8, 2, 2048, 3600.0, 120.0, "gpu", "erin")
    assert trace.origin == datetime.fromtimestamp(1_700_000_000, UTC)
    assert [r.line for r in trace.rejected] == [3, 4, 5, 6]
    assert "still running" in trace.rejected[0].why
    assert trace.rejected[1].why == "state PENDING (never ran)"
    assert trace.rejected[2].why == "no job_id"
    assert trace.rejected[3].why == "elapsed 0 (never ran)"


def test_sacct_json_older_shape(tmp_path: Path) -> None:
    old = sacct_json_job(9, 1_600_000_000, state={"current": "COMPLETED", "reason": "None"})
    old["time"] = {**old["time"], "limit": 30}  # 21.08: plain minutes
    old["tres"] = {"allocated": [], "requested": [{"type": "cpu", "name": None, "count": 4}]}
    del old["allocation_nodes"]
    old["node_count"] = 1
    unlimited = sacct_json_job(10, 1_600_000_060, state="COMPLETED")
    unlimited["time"] = {**unlimited["time"], "limit": {"set": True, "infinite": True}}
    path = write(tmp_path, "old.json", json.dumps({"jobs": [old, unlimited]}))
    first, second = read_trace(path, "sacct").jobs
    assert (first.job_id, first.nodes, first.cpus, first.gpus) == ("9", 1, 4, 0)
    assert first.requested_s == 1800.0
    assert (second.submit_s, second.requested_s) == (60.0, None)


def test_sacct_json_not_jobs_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no 'jobs' list"):
        read_trace(write(tmp_path, "x.json", '{"nodes": []}'))
    with pytest.raises(TraceError, match="not valid JSON"):
        read_trace(write(tmp_path, "y.json", '{"jobs": ['))


ALIBABA_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)


def test_alibaba_pods(tmp_path: Path) -> None:
    text = ALIBABA_HEADER + (
        "pod-a,88000,327680,8,1000,,Burstable,Succeeded,9437497,10769854,9437497\n"
        "pod-b,4000,15258,1,220,,BE,Running,9000000,9300000,9000010\n"
        "pod-c,2500,1024,0,0,,LS,Running,9100000,9100100,9100000\n"
        "pod-d,1000,1024,1,1000,,LS,Pending,9200000,9200100,\n"
        "pod-e,1000,1024,1,1000,V100M16|V100M32,LS,Failed,9200000,9200000,9200000\n"
        "pod-f,1000,1024\n"
    )
    trace = read_trace(write(tmp_path, "pods.csv", text))
    assert trace.format == "alibaba" and trace.origin is None
    assert [j.job_id for j in trace.jobs] == ["pod-b", "pod-c", "pod-a"]
    shared, cpu_only, big = trace.jobs
    assert shared == TraceJob("pod-b", 0.0, 1, 4, 1, 15258, None, 299990.0, "", "")
    assert (cpu_only.gpus, cpu_only.cpus, cpu_only.submit_s) == (0, 3, 100000.0)
    assert (big.gpus, big.cpus, big.run_s) == (8, 88, 1332357.0)
    assert [r.line for r in trace.rejected] == [5, 6, 7]
    assert [r.why for r in trace.rejected][:2] == [
        "no scheduled_time (never scheduled)",
        "run time 0",
    ]
    assert trace.rejected[2].why == "3 fields, need 11"


def test_guess_format(tmp_path: Path) -> None:
    swf = swf_line(1, 0, 10, 1) + "\n"
    assert guess_format(write(tmp_path, "a.swf", "")) == "swf"
    assert guess_format(write(tmp_path, "noname", swf)) == "swf"
    assert guess_format(write(tmp_path, "b.json", "")) == "sacct"
    assert guess_format(write(tmp_path, "b.out", '\n  {"jobs": []}')) == "sacct"
    assert guess_format(write(tmp_path, "acct.txt", SACCT_COLUMNS + "\n")) == "sacct"
    assert guess_format(write(tmp_path, "pods.csv", ALIBABA_HEADER)) == "alibaba"
    assert set(FORMATS) == {"swf", "sacct", "alibaba"}
    with pytest.raises(TraceError, match="cannot tell the trace format"):
        guess_format(write(tmp_path, "other.csv", "a,b,c\n1,2,3\n"))


def test_unknown_format_error_text(tmp_path: Path) -> None:
    with pytest.raises(TraceError) as info:
        read_trace(write(tmp_path, "t.swf", ""), "x")
    assert str(info.value) == "unknown trace format 'x' (use one of: swf, sacct, alibaba)"
    assert info.value.exit_code == 2


def test_no_usable_jobs_and_unreadable_files(tmp_path: Path) -> None:
    path = write(tmp_path, "t.swf", swf_line(1, 0, -1, 1) + "\n" + swf_line(2, 0, 0, 1) + "\n")
    with pytest.raises(TraceError) as info:
        read_trace(path)
    assert str(info.value) == (
        f"{path}: no usable jobs (2 lines rejected; first: line 1: run time -1 (unknown))"
    )
    with pytest.raises(TraceError, match=r"no usable jobs \(0 lines rejected\)"):
        read_trace(write(tmp_path, "empty.swf", "; UnixStartTime: 5\n\n"))
    missing = tmp_path / "nope.swf"
    with pytest.raises(TraceError, match=r"nope\.swf: No such file or directory"):
        read_trace(missing)
    with pytest.raises(TraceError, match="No such file"):
        guess_format(missing)
    broken = tmp_path / "broken.swf.gz"
    broken.write_bytes(gzip.compress(b"1 2 3\n" * 100)[:30])
    with pytest.raises(TraceError, match=r"broken\.swf\.gz"):
        read_trace(broken)


def test_rejected_is_plain_data() -> None:
    assert Rejected(3, "run time 0") == Rejected(line=3, why="run time 0")
