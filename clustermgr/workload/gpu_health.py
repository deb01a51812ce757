"""`clustermgr health-check`: Slurm's HealthCheckProgram for burst nodes (GPU clouds hand
out bad GPUs).

On a node Slurm does not hold as CLOUD it exits 0 and does nothing. On a burst node it
compares what the node has with what Slurm (and so the template) says it must have: GPU
count and model, uncorrected ECC errors, pending or failed row remapping
(`nvidia-smi --query-gpu=...`), NVIDIA XID errors in the kernel log and, where DCGM is
installed, `dcgmi health`.

- First check after slurmd started (boot): the node is set POWER_DOWN_FORCE with reason
  `(Code:HEALTH) boot: detail` at once, so its job is requeued before it can start on bad
  hardware; cm-scale then terminates the instance and demand brings a replacement.
- Later (periodic) checks: the node is drained with `(Code:HEALTH) detail` so running jobs
  finish; cm-scale replaces it once it is idle.

Every check of a burst node also reports what it runs (core/node_report.py): the image and
revision of `/etc/clustermgr/node.env` and the running kernel, in the node's Slurm `Extra`
field (set only when it changed). cm-scale drains a node whose revision its director no
longer serves (`(Code:IMAGE)`).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from clustermgr.core.node_report import NodeReport, parse_extra
from clustermgr.core.reasons import HEALTH, Reason
from clustermgr.workload.base import parse_gpu_gres, reason_arg

QUERY = "name,ecc.errors.uncorrected.volatile.total,remapped_rows.pending,remapped_rows.failure"
MARKER_DIR = Path("/run/clustermgr/health")
NODE_ENV = Path("/etc/clustermgr/node.env")  # written by the image's user-data at boot
EXTRA_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"


@dataclass(frozen=True)
class SlurmNodeFacts:
    name: str
    cloud: bool
    gpus: int
    gpu_model: str | None
    slurmd_start: str
    extra: str = ""  # Slurm's Extra field as `scontrol show node -o` prints it


@dataclass(frozen=True)
class GpuReading:
    name: str
    ecc_uncorrected: int
    remap_pending: bool
    remap_failure: bool


def run(argv: list[str], env: dict[str, str] | None = None, timeout: float = 30) -> str:
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, check=False, env=env
    )
    if done.returncode != 0:
        raise RuntimeError(f"{Path(argv[0]).name} failed: {done.stderr.strip()[:200]}")
    return done.stdout


def slurm_facts(node: str, scontrol: str) -> SlurmNodeFacts | None:
    try:
        text = run([scontrol, "show", "node", node, "-o"])
    except (RuntimeError, OSError, subprocess.TimeoutExpired):
        return None
    fields = dict(re.findall(r"(\w+)=(\S*)", text))
    model, gpus = parse_gpu_gres(fields.get("Gres", ""))
    state = fields.get("State", "")
    return SlurmNodeFacts(
        name=node,
        cloud="CLOUD" in state,
        gpus=gpus,
        gpu_model=model,
        slurmd_start=fields.get("SlurmdStartTime", ""),
        extra="" if fields.get("Extra") in (None, "(null)") else fields["Extra"],
    )


def node_env(path: Path) -> dict[str, str]:
    """`KEY=VALUE` lines of the node's node.env; {} when there is none (a node of a
    template that names no image definition)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {key.strip(): value.strip().strip("'\"") for key, value in pairs}


def own_report(path: Path) -> NodeReport:
    env = node_env(path)
    return NodeReport(
        image=env.get("CLUSTERMGR_IMAGE", ""),
        revision=env.get("CLUSTERMGR_IMAGE_REVISION", ""),
        kernel=os.uname().release,
    )


def report(facts: SlurmNodeFacts, scontrol: str, path: Path) -> str:
    """Set the node's report (image, revision, kernel) as its Slurm Extra field when it
    changed; what was done, in one line ("" when nothing changed)."""
    mine = own_report(path)
    extra = mine.as_extra(facts.extra)
    checked, problem = parse_extra(extra)
    if problem or checked is None:
        return f"not reported: {problem} (in {path})"
    if facts.extra and extra == facts.extra:
        return ""
    if facts.extra and not facts.extra.startswith("{"):
        return "not reported: Slurm's Extra field holds someone else's text"
    run([scontrol, "update", f"nodename={facts.name}", f"extra={extra}"])
    return (
        f"reported image {mine.image or '-'} revision {mine.revision or '-'} kernel {mine.kernel}"
    )


def read_gpus(nvidia_smi: str, node: str) -> list[GpuReading]:
    env = {**os.environ, "SLURMD_NODENAME": node}
    text = run([nvidia_smi, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"], env=env)
    readings = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4:
            continue
        readings.append(
            GpuReading(
                name=parts[0],
                ecc_uncorrected=int(parts[1]) if parts[1].isdigit() else 0,
                remap_pending=parts[2].lower() in ("yes", "1"),
                remap_failure=parts[3].lower() in ("yes", "1"),
            )
        )
    return readings


def gpu_problems(facts: SlurmNodeFacts, readings: list[GpuReading]) -> list[str]:
    problems = []
    if len(readings) < facts.gpus:
        problems.append(f"{len(readings)} of {facts.gpus} GPUs visible")
    if facts.gpu_model:
        wrong = [r.name for r in readings if facts.gpu_model.lower() not in r.name.lower()]
        if wrong:
            problems.append(f"GPU model {wrong[0]!r} is not {facts.gpu_model}")
    for index, reading in enumerate(readings):
        if reading.ecc_uncorrected:
            problems.append(f"GPU {index}: {reading.ecc_uncorrected} uncorrected ECC errors")
        if reading.remap_pending or reading.remap_failure:
            problems.append(f"GPU {index}: row remapping pending or failed")
    return problems


def xid_problems() -> list[str]:
    dmesg = shutil.which("dmesg", path=EXTRA_PATH)
    if dmesg is None:
        return []
    try:
        text = run([dmesg, "--notime"], timeout=10)
    except (RuntimeError, OSError, subprocess.TimeoutExpired):
        return []  # not readable here: not a health failure in itself
    xids = re.findall(r"NVRM: Xid \([^)]*\): (\d+)", text)
    return [f"NVIDIA XID {xids[-1]} in the kernel log ({len(xids)} in all)"] if xids else []


def dcgm_problems() -> list[str]:
    dcgmi = shutil.which("dcgmi", path=EXTRA_PATH)
    if dcgmi is None:
        return []
    try:
        text = run([dcgmi, "health", "-c"], timeout=60)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return [f"dcgmi health: {exc}"]
    return [f"dcgmi health: {line.strip()}" for line in text.splitlines() if "Failure" in line][:1]


def slurmd_start_id(facts: SlurmNodeFacts) -> str:
    """Which slurmd start this check belongs to. Run by slurmd: that slurmd's pid and start
    time, known locally at once (slurmd runs the first check before slurmctld has its
    registration, when Slurm still shows the previous SlurmdStartTime or none). Run by
    hand: Slurm's SlurmdStartTime."""
    parent = os.getppid()
    try:
        comm = Path(f"/proc/{parent}/comm").read_text().strip()
        started = Path(f"/proc/{parent}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return facts.slurmd_start
    return f"slurmd {parent} start {started}" if comm == "slurmd" else facts.slurmd_start


def first_check_since_boot(node: str, started: str, marker_dir: Path = MARKER_DIR) -> bool:
    """True once per slurmd start (a marker keyed by node name holding `slurmd_start_id`)."""
    try:
        return (marker_dir / node).read_text() != started
    except OSError:
        return True


def remember_checked(node: str, started: str, marker_dir: Path = MARKER_DIR) -> None:
    marker_dir.mkdir(parents=True, exist_ok=True)
    (marker_dir / node).write_text(started)


def node_name(explicit: str | None, slurm_bin: Path = Path("/usr/bin")) -> str:
    """--node, else $SLURMD_NODENAME, else the Slurm node whose NodeAddr is one of this
    host's addresses (cloud host names rarely match), else the short host name."""
    if explicit:
        return explicit
    if os.environ.get("SLURMD_NODENAME"):
        return os.environ["SLURMD_NODENAME"]
    return node_by_address(str(slurm_bin / "scontrol")) or socket.gethostname().split(".")[0]


def node_by_address(scontrol: str) -> str | None:
    try:
        mine = set(run(["hostname", "-I"], timeout=10).split())
        text = run([scontrol, "show", "node", "-o"])
    except (RuntimeError, OSError, subprocess.TimeoutExpired):
        return None
    for line in text.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        address = fields.get("NodeAddr", "")
        if address in mine and not address.startswith("127."):
            return fields.get("NodeName")
    return None


@dataclass(frozen=True)
class HealthResult:
    node: str
    checked: bool
    problems: tuple[str, ...]
    boot: bool
    action: str  # "none", "power-down", "drain"
    reported: str = ""  # the image report set in Slurm, or why not ("": unchanged)


def health_check(
    node: str, slurm_bin: Path, marker_dir: Path = MARKER_DIR, env_file: Path = NODE_ENV
) -> HealthResult:
    scontrol = str(slurm_bin / "scontrol")
    facts = slurm_facts(node, scontrol)
    if facts is None or not facts.cloud:
        return HealthResult(node, False, (), False, "none")
    try:
        reported = report(facts, scontrol, env_file)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        reported = f"not reported: {exc}"
    problems: list[str] = []
    if facts.gpus:
        nvidia_smi = shutil.which("nvidia-smi", path=f"{os.environ.get('PATH', '')}:{EXTRA_PATH}")
        if nvidia_smi is None:
            problems.append(f"nvidia-smi not found, {facts.gpus} GPUs expected")
        else:
            try:
                problems += gpu_problems(facts, read_gpus(nvidia_smi, node))
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                problems.append(str(exc))
        problems += xid_problems() + dcgm_problems()
    started = slurmd_start_id(facts)
    boot = first_check_since_boot(facts.name, started, marker_dir)
    remember_checked(facts.name, started, marker_dir)
    if not problems:
        return HealthResult(node, True, (), boot, "none", reported)
    detail = "; ".join(problems)[:200]
    if boot:
        reason, state, action = (
            str(Reason(HEALTH, f"boot: {detail}")),
            "POWER_DOWN_FORCE",
            "power-down",
        )
    else:
        reason, state, action = str(Reason(HEALTH, detail)), "DRAIN", "drain"
    run([scontrol, "update", f"nodename={node}", f"state={state}", reason_arg(reason)])
    return HealthResult(node, True, tuple(problems), boot, action, reported)
