from __future__ import annotations

import os
import pwd
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from clustermgr.config import load_settings
from clustermgr.core.install import scripts_dir
from clustermgr.workload.base import WorkloadNode
from clustermgr.workload.slurmconf import (
    InstanceFacts,
    check_against_slurm,
    render_slurm_conf,
    resume_timeout_s,
)
from tests.conftest import EXAMPLE_CONFIG


def _account(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def test_conf_lines_cover_power_saving_nodes_partitions_and_gres() -> None:
    settings = load_settings(EXAMPLE_CONFIG)
    facts = {"p4d.24xlarge": InstanceFacts("p4d.24xlarge", 96, 1_179_648, 8)}
    lines = render_slurm_conf(settings, facts)
    text = "\n".join(lines)
    assert "PrivateData=cloud" in lines
    assert "SlurmctldParameters=enable_configless,idle_on_node_suspend" in lines
    assert f"ResumeProgram={scripts_dir() / 'clustermgr-slurm-resume'}" in lines
    assert "SuspendExcParts=batch" in lines
    assert (
        "NodeName=aws-a100-[001-016] CPUs=96 RealMemory=1100000 Gres=gpu:a100:8 "
        "Features=a100,nvlink,aws-east,us-east-1,aws-a100 Weight=100 State=CLOUD"
    ) in lines
    assert (
        "PartitionName=gpu-cloud Nodes=aws-a100-[001-016],az-a100-[001-008],os-v100-[01-04] "
        "State=UP" in lines
    )
    assert "NodeName=aws-a100-[001-016] Name=gpu Type=a100 File=/dev/nvidia[0-7]" in lines
    assert f"ResumeTimeout={resume_timeout_s(settings)}" in text
    assert resume_timeout_s(settings) >= 600 + 2 * 30


def test_the_programs_slurm_is_told_to_run_are_this_installs_own() -> None:
    """With no hook_path in the config (the example has none), every program `slurm conf`
    names is an executable of the install that printed it (a site's venv under /opt, not
    /usr/local/bin, where nothing was installed), and so is the transfer command."""
    settings = load_settings(EXAMPLE_CONFIG)
    programs = [
        Path(line.split("=", 1)[1])
        for line in render_slurm_conf(settings)
        if line.split("=", 1)[0] in ("ResumeProgram", "SuspendProgram", "ResumeFailProgram")
        or line.startswith("HealthCheckProgram=")
    ]
    assert len(programs) == 4
    for program in [*programs, settings.staging.transfer_command]:
        assert program.parent == scripts_dir()
        assert program.is_file() and os.access(program, os.X_OK), program


def test_real_memory_is_below_the_smallest_instance_type() -> None:
    settings = load_settings(EXAMPLE_CONFIG)
    facts = {"p4d.24xlarge": InstanceFacts("p4d.24xlarge", 96, 1_000_000, 8)}
    line = next(x for x in render_slurm_conf(settings, facts) if x.startswith("NodeName=aws"))
    assert "RealMemory=950000" in line


def test_check_reports_one_line_per_mismatch() -> None:
    settings = load_settings(EXAMPLE_CONFIG)
    nodes = {
        f"cloud{i}": WorkloadNode(
            f"cloud{i}",
            "IDLE",
            frozenset({"CLOUD", "POWERED_DOWN"}),
            cpus=2,
            memory_mb=900,
            gpus=2,
            gpu_model="fake",
            partitions=("cloud",),
        )
        for i in range(1, 5)
    }
    nodes["cloud2"] = WorkloadNode(
        "cloud2", "IDLE", frozenset(), cpus=2, memory_mb=900, gpus=2, partitions=("cloud",)
    )
    small = {"p4de.24xlarge": InstanceFacts("p4de.24xlarge", 48, 2_000_000, 8)}
    problems = check_against_slurm(
        settings, {"PrivateData": "none", "SlurmctldParameters": ""}, nodes, small
    )
    assert problems[0].startswith("slurm: PrivateData lacks 'cloud'")
    assert any(
        p.startswith("template aws-a100: nodes aws-a100-[001-016] are not in slurm.conf")
        for p in problems
    )
    assert "template local-gpu: node cloud2: is not State=CLOUD in slurm.conf" in problems
    assert (
        "template aws-a100: instance type p4de.24xlarge is smaller than the Slurm node "
        "definition (48 vCPUs < 96)" in problems
    )


def test_check_finds_a_slurm_not_set_up_for_bursting(tmp_path: Path) -> None:
    """What an admin tried: hooks that are /bin/true, untyped `Gres=gpu:2`, no RealMemory
    and a ResumeTimeout shorter than a boot: `config check` must not say it matches."""
    settings = load_settings(EXAMPLE_CONFIG)
    local = next(t for t in settings.templates if t.provider == "local")
    assert local.gpus and local.gpu_model
    wrapper = tmp_path / "resume-wrapper"
    wrapper.write_text('#!/bin/sh\nexec /usr/local/bin/clustermgr-slurm-resume-fail "$@"\n')
    wrapper.chmod(0o755)
    config = {
        "SlurmUser": "root(0)",  # runs what tmp_path holds
        "PrivateData": "cloud",
        "SlurmctldParameters": "enable_configless",
        "ResumeProgram": "/bin/true",
        "SuspendProgram": "/bin/true",
        "ResumeFailProgram": str(wrapper),  # a wrapper that runs ours is ours
        "ResumeTimeout": "60 sec",
    }
    untyped = {
        name: WorkloadNode(
            name,
            "IDLE",
            frozenset({"CLOUD", "POWERED_DOWN"}),
            cpus=local.cpus,
            memory_mb=local.memory_mb,
            gpus=local.gpus,
            partitions=(local.partition,),
        )
        for name in local.node_names
    }
    problems = check_against_slurm(settings, config, untyped)
    assert (
        "slurm: ResumeProgram is /bin/true, not clustermgr's clustermgr-slurm-resume"
        in (problems[0])
    )
    assert problems[1].startswith("slurm: SuspendProgram is /bin/true, not clustermgr's")
    assert problems[2].startswith("slurm: ResumeTimeout is 60 s, shorter than the worst boot")
    assert f"set ResumeTimeout={resume_timeout_s(settings)}" in problems[2]
    assert not any("ResumeFailProgram" in p for p in problems)
    gres = f"template {local.name}: node {local.node_names[0]}: Slurm has Gres=gpu:{local.gpus}"
    assert any(p.startswith(gres) for p in problems), problems
    no_memory = {
        n: replace(node, gpu_model=local.gpu_model, memory_mb=1) for n, node in untyped.items()
    }
    problems = check_against_slurm(settings, config, no_memory)
    assert any("Slurm has no RealMemory" in p for p in problems), problems


@pytest.mark.skipif(not _account("slurm"), reason="needs the slurm account (slurm-wlm)")
def test_check_finds_hooks_slurm_user_cannot_run() -> None:
    """A README install whose slurm.conf names /usr/local/bin (nothing there), a hook only
    root may run, and a hook in a directory SlurmUser cannot enter: slurmctld would disable
    power saving, so `config check` names each, with the fix."""
    with tempfile.TemporaryDirectory(dir="/tmp") as top:  # pytest's tmp_path is root's alone
        os.chmod(top, 0o755)  # noqa: S103 - SlurmUser must enter it, as a site's /opt
        _check_hooks_in(Path(top))


def _check_hooks_in(tmp_path: Path) -> None:
    settings = load_settings(EXAMPLE_CONFIG)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    hidden = private / "clustermgr-slurm-suspend"
    hidden.write_text("#!/bin/sh\n")
    hidden.chmod(0o755)
    root_only = tmp_path / "clustermgr-slurm-resume-fail"
    root_only.write_text("#!/bin/sh\n")
    root_only.chmod(0o700)
    config = {
        "SlurmUser": "slurm(64030)",
        "PrivateData": "cloud",
        "SlurmctldParameters": "enable_configless",
        "ResumeProgram": "/usr/local/bin/clustermgr-slurm-resume",
        "SuspendProgram": str(hidden),
        "ResumeFailProgram": str(root_only),
        "HealthCheckProgram": "/usr/local/bin/clustermgr-health-check",
    }
    hooks = [p for p in check_against_slurm(settings, config, {}) if p.startswith("slurm: ")]
    fix = "set [slurm] hook_path to this install's clustermgr"
    assert hooks[0] == (
        "slurm: ResumeProgram: /usr/local/bin/clustermgr-slurm-resume does not exist: Slurm "
        f"disables power saving; {fix}, paste `clustermgr slurm conf` and restart slurmctld"
    )
    assert hooks[1].startswith(f"slurm: SuspendProgram: slurm cannot enter {private} (drwx------)")
    assert hooks[2].startswith(
        f"slurm: ResumeFailProgram: slurm may not execute {root_only} (-rwx------ root:root)"
    )
    assert hooks[3] == (
        "slurm: HealthCheckProgram /usr/local/bin/clustermgr-health-check does not exist on "
        f"this host: {fix} and paste `clustermgr slurm conf`"
    )
