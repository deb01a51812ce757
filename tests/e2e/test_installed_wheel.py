"""The package as a site installs it: the sdist and the wheel built from this checkout, the
wheel installed with `[all]` into a fresh virtualenv outside the checkout, and every
command of the README's install path run from that virtualenv (cwd `/`, no PYTHONPATH),
against a real slurmctld and the AWS SDK over moto; then the demo's whole burst run by that
virtualenv's Python, so `clustermgr` comes from its site-packages, not from the checkout.

The demo's subnet (10.213.9.0/24) and this file's moto VPC (198.19.0.0/16) are used by no
other test file, so the file needs no SHARED_GROUPS entry.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest

import clustermgr
from tests.conftest import REPO, cannot_run
from tests.e2e.conftest import slurm_user_for_hooks
from tests.fakes.aws_fake import FakeAws
from tests.fakes.aws_harness import ACCESS_KEY, IMAGE, SECRET_KEY
from tests.labs.slurmlab import NodeGroup, Partition, SlurmLab

# Debian's interpreter, as the Makefile's: SlurmUser must be able to run the hooks
BASE_PYTHON = Path("/usr/bin/python3")
TRACE = REPO.parent / "shared" / "data" / "traces" / "KTH-SP2-1996-2.1-cln.swf.gz"
TRACE_JOBS = 200
DEMO_TIMEOUT_S = 900  # its own limits: 420 s for the jobs, 300 s for the scale-down
VERSION = clustermgr.__version__
DIST_INFO = f"clustermgr-{VERSION}.dist-info"
# repository folder -> where its files are in the wheel (setup.py's INSTALLED_AS)
SHIPPED = {
    "clustermgr": "clustermgr",
    "policies": "clustermgr/policies",
    "migrations": "clustermgr/migrations",
    "images": "clustermgr/images",
}
NOT_SOURCE = shutil.ignore_patterns(
    ".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "*.db*"
)
# what would put the checkout (or another environment) on the installed commands' path
LEAKS = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV")
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Installed:
    root: Path  # a world-traversable temp dir outside the checkout
    venv: Path
    site_packages: Path
    sdist: Path
    wheel_from_sdist: Path
    wheel_from_checkout: Path

    def program(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in LEAKS and not k.startswith("AWS_")}
        return {**env, "PATH": SYSTEM_PATH, **(extra or {})}

    def run(
        self, name: str, *args: str, env: Mapping[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.program(name), *args],
            cwd="/",
            env=self.env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def run_ok(argv: list[str], cwd: Path, timeout: float) -> str:
    done = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout


def only(directory: Path, pattern: str) -> Path:
    [found] = directory.glob(pattern)
    return found


@pytest.fixture(scope="module")
def installed() -> Iterator[Installed]:
    if not BASE_PYTHON.exists():
        cannot_run(f"{BASE_PYTHON} is missing (Debian's python3)")
    if importlib.util.find_spec("build") is None:
        pytest.fail("the `build` package is missing: pip install -e '.[test]'")
    root = Path(tempfile.mkdtemp(prefix="cm-wheel-", dir="/tmp"))
    root.chmod(0o755)  # SlurmUser runs the hooks from the virtualenv in here
    try:
        # a copy of the checkout's files, so the build writes no build/ or egg-info into the
        # checkout and nothing a previous build left there can slip into the wheel
        source = root / "source"
        shutil.copytree(REPO, source, ignore=NOT_SOURCE, symlinks=True)
        build = [sys.executable, "-m", "build", "--outdir"]
        run_ok([*build, str(root / "from-sdist"), str(source)], root, 300)  # sdist, its wheel
        run_ok([*build, str(root / "from-checkout"), "--wheel", str(source)], root, 300)
        wheel = only(root / "from-checkout", "*.whl")
        venv = root / "venv"
        run_ok([str(BASE_PYTHON), "-m", "venv", str(venv)], root, 120)
        pip = [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check"]
        run_ok([*pip, f"{wheel}[all]"], root, 600)
        purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        site_packages = run_ok([str(venv / "bin" / "python"), "-c", purelib], root, 30)
        yield Installed(
            root=root,
            venv=venv,
            site_packages=Path(site_packages.strip()),
            sdist=only(root / "from-sdist", "*.tar.gz"),
            wheel_from_sdist=only(root / "from-sdist", "*.whl"),
            wheel_from_checkout=wheel,
        )
    finally:
        if not os.environ.get("CM_KEEP_LAB"):
            shutil.rmtree(root, ignore_errors=True)


def wheel_files(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as wheel:
        return {name: wheel.read(name) for name in wheel.namelist()}


def shipped_files() -> set[str]:
    """Every file of the checkout's shipped folders, named as the wheel must hold it."""
    found: set[str] = set()
    for folder, target in SHIPPED.items():
        for path in (REPO / folder).rglob("*"):
            relative = path.relative_to(REPO / folder)
            if path.is_file() and "__pycache__" not in relative.parts:
                found.add(f"{target}/{relative.as_posix()}")
    return found


def test_the_sdist_rebuilds_the_wheel_built_from_the_checkout(installed: Installed) -> None:
    from_sdist = wheel_files(installed.wheel_from_sdist)
    from_checkout = wheel_files(installed.wheel_from_checkout)
    assert sorted(from_sdist) == sorted(from_checkout)
    differ = [name for name in from_checkout if from_sdist[name] != from_checkout[name]]
    assert differ == [], f"the sdist's wheel differs in {differ}"
    with tarfile.open(installed.sdist) as sdist:
        names = {name.split("/", 1)[-1] for name in sdist.getnames()}
    assert {"pyproject.toml", "setup.py", "README.md"} <= names


def test_the_wheel_holds_every_shipped_file_and_no_top_level_name_but_clustermgr(
    installed: Installed,
) -> None:
    files = wheel_files(installed.wheel_from_checkout)
    assert {name.split("/")[0] for name in files} == {"clustermgr", DIST_INFO}
    assert files[f"{DIST_INFO}/top_level.txt"].decode().split() == ["clustermgr"]
    package_files = {name for name in files if not name.startswith(f"{DIST_INFO}/")}
    missing = sorted(shipped_files() - package_files)
    assert missing == [], f"in the checkout, not in the wheel: {missing}"
    for needed in (
        "clustermgr/py.typed",
        "clustermgr/config/__init__.py",
        "clustermgr/migrations/script.py.mako",
        "clustermgr/migrations/versions/0001_initial_schema.py",
        "clustermgr/images/bootstrap.sh.tmpl",
        "clustermgr/images/gpu-node.cloud-init.tmpl",
        "clustermgr/images/gpu-node.toml",
        "clustermgr/policies/queue_depth.py",
    ):
        assert needed in package_files


def test_the_installed_commands_use_the_wheel_not_the_checkout(installed: Installed) -> None:
    probe = (
        "import importlib.util, clustermgr, clustermgr.policies.idle_timeout\n"
        "print(clustermgr.__file__)\n"
        "print(importlib.util.find_spec('policies'))\n"
    )
    done = installed.run("python", "-c", probe)
    assert done.returncode == 0, done.stderr
    location, top_level_policies = done.stdout.splitlines()
    assert Path(location) == installed.site_packages / "clustermgr" / "__init__.py"
    assert top_level_policies == "None"
    version = installed.run("clustermgr", "--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"clustermgr, version {VERSION}")


# --- the README's install path, against a real slurmctld and moto --------------------------


def write_config(lab_dir: Path, slurm: SlurmLab, fake: FakeAws, subnets: list[str]) -> Path:
    config = lab_dir / "clustermgr.toml"
    config.write_text(
        f"""
[cluster]
name = "wheel"
head_address = "{slurm.conf_server}"
[database]
url = "sqlite:///{lab_dir / "cm.db"}"
[[providers]]
name = "aws1"
type = "aws"
region = "{fake.region}"
retry_mode = "standard"
[[templates]]
name = "aws-a"
provider = "aws1"
partition = "gpu"
nodes = "aws-[1-2]"
instance_types = ["p4d.24xlarge"]
image = "{IMAGE}"
subnets = {json.dumps(subnets)}
cpus = 2
memory_mb = 1000
demand_mode = "slurm"
[policy]
chain = [{{ name = "queue_depth" }}, {{ name = "idle_timeout" }}]
[daemon]
state_dir = "{lab_dir / "state"}"
heartbeat_stale_s = 3600
metrics_port = 0
"""
    )
    return config


def moto_subnets(fake: FakeAws) -> list[str]:
    """Subnets of a VPC in 198.19.0.0/16, where no lab's slurmd listens (see test_aws_burst)."""
    ec2 = boto3.client(
        "ec2",
        region_name=fake.region,
        endpoint_url=fake.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )
    vpc = ec2.create_vpc(CidrBlock="198.19.0.0/16")["Vpc"]["VpcId"]
    zone = ec2.describe_availability_zones()["AvailabilityZones"][0]["ZoneName"]
    made = ec2.create_subnet(VpcId=vpc, CidrBlock="198.19.1.0/24", AvailabilityZone=zone)
    return [made["Subnet"]["SubnetId"]]


@dataclass
class InstallLab:
    installed: Installed
    slurm: SlurmLab
    fake: FakeAws
    config: Path
    spool: Path

    def run(self, name: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = {
            **self.slurm.env,
            "CLUSTERMGR_CONFIG": str(self.config),
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_ENDPOINT_URL": self.fake.url,  # the edge of the world: EC2 is moto here
        }
        return self.installed.run(name, *args, env=env)

    def ok(self, name: str, *args: str) -> str:
        done = self.run(name, *args)
        assert done.returncode == 0, f"{name} {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout + done.stderr

    def instances(self) -> list[dict[str, object]]:
        listed: list[dict[str, object]] = json.loads(
            self.ok("clustermgr", "providers", "instances", "aws1", "--json")
        )
        return listed


@pytest.fixture
def install_lab(installed: Installed, lab_dir: Path) -> Iterator[InstallLab]:
    fake = FakeAws().start()
    config = lab_dir / "clustermgr.toml"
    hooks = {}
    for kind in ("resume", "suspend", "resume-fail"):
        wrapper = lab_dir / f"hook-{kind}"
        program = installed.program(f"clustermgr-slurm-{kind}")
        wrapper.write_text(f"#!/bin/sh\nCLUSTERMGR_CONFIG='{config}' exec '{program}' \"$@\"\n")
        wrapper.chmod(0o755)
        hooks[kind] = str(wrapper)
    slurm = SlurmLab(
        lab_dir / "slurm",
        [NodeGroup("aws-[1-2]", cpus=2, memory_mb=1000, features=("aws1", fake.region, "aws-a"))],
        [Partition("gpu", "aws-[1-2]", default=True)],
        slurm_user=slurm_user_for_hooks(installed.program("python")),
        resume_program=hooks["resume"],
        suspend_program=hooks["suspend"],
        resume_fail_program=hooks["resume-fail"],
        suspend_time=3600,
        resume_timeout=3600,
        suspend_timeout=20,
    )
    try:
        slurm.start()
        write_config(lab_dir, slurm, fake, moto_subnets(fake))
        yield InstallLab(installed, slurm, fake, config, lab_dir / "state" / "spool")
    finally:
        slurm.stop()
        fake.stop()


def wait_for_request(spool: Path, kind: str, timeout_s: float = 30) -> str:
    """The user who wrote the first `kind` request into the spool."""
    deadline = time.monotonic() + timeout_s
    while not (found := list(spool.glob(f"*-{kind}.json"))):
        assert time.monotonic() < deadline, f"no {kind} request reached {spool}"
        time.sleep(0.3)
    return pwd.getpwuid(found[0].stat().st_uid).pw_name


def test_the_readme_install_path_runs_from_the_installed_wheel(install_lab: InstallLab) -> None:
    lab = install_lab
    checked = lab.ok("clustermgr", "config", "check", "--no-slurm")
    assert f"{lab.config}: OK (1 providers, 1 templates, 2 cloud node slots)" in checked
    assert "policy chain: queue_depth, idle_timeout: every policy loads" in checked
    assert "schema upgraded empty -> " in lab.ok("clustermgr", "db", "upgrade")
    assert "nodes sync: 2 added" in lab.ok("clustermgr", "nodes", "sync", "--no-slurm")
    nodes = json.loads(lab.ok("clustermgr", "nodes", "list", "--json"))
    assert {(n["name"], n["state"]) for n in nodes} == {
        ("aws-1", "POWERED_DOWN"),
        ("aws-2", "POWERED_DOWN"),
    }
    assert "launched 0, stopped 0" in lab.ok("cm-scale", "--once")  # the spool, the heartbeat

    # Slurm allocates a powered-down node and runs the installed resume hook as SlurmUser
    job = lab.slurm.run("sbatch", "--parsable", "-p", "gpu", "--wrap", "hostname").stdout
    assert wait_for_request(lab.spool, "resume") == lab.slurm.slurm_user
    assert "launched 1" in lab.ok("cm-scale", "--once")
    [instance] = lab.instances()
    assert instance["node"] == "aws-1" and lab.fake.calls().get("CreateFleet") == 1
    assert lab.slurm.node_fields("aws-1")["NodeAddr"] == instance["private_address"]

    # SuspendProgram's request (here as root, as an admin would run it): the instance ends
    lab.slurm.run("scancel", job.strip())
    assert lab.ok("clustermgr-slurm-suspend", "aws-1") == ""
    assert "stopped 1" in lab.ok("cm-scale", "--once")
    assert lab.instances() == []

    refused = lab.run("clustermgr-slurm-resume-fail", "nosuch-1")
    assert refused.returncode == 2
    assert refused.stderr == (
        "clustermgr: error: not cloud nodes of any template: nosuch-1 (nothing recorded)\n"
    )
    for program in ("clustermgr-slurm-resume", "clustermgr-slurm-suspend"):
        assert "HOSTLIST" in lab.ok(program, "--help").splitlines()[0]
    assert lab.ok("clustermgr-health-check", "--help").startswith("Usage: clustermgr health-check")


def test_cmsub_starts_from_the_installed_wheel(installed: Installed) -> None:
    done = installed.run("cmsub", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: cmsub [sbatch options] [--stage-in SRC[:DEST]]")


def test_simulate_replays_a_slice_of_a_shared_trace(installed: Installed) -> None:
    if not TRACE.exists():
        cannot_run(f"the shared traces are not beside the checkout: {TRACE}")
    jobs = []
    with gzip.open(TRACE, "rt") as trace:
        for line in trace:
            if not line.startswith(";"):
                jobs.append(line)
            if len(jobs) == TRACE_JOBS:
                break
    sliced = installed.root / "kth-slice.swf"
    sliced.write_text("".join(jobs))
    config = REPO / "etc" / "simulate" / "cpu-cluster.toml"
    args = ("--config", str(config), "--trace", str(sliced), "--onprem-nodes", "100")
    done = installed.run("clustermgr", "simulate", *args)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"kth-slice.swf (swf): {TRACE_JOBS} jobs, 100 on-prem nodes")
    completed = next(line for line in lines if "jobs completed" in line)
    assert completed.split()[-1] == str(TRACE_JOBS)


# --- the demo's burst, from the installed wheel -------------------------------------------


def test_the_demo_bursts_from_the_installed_wheel(installed: Installed, lab_dir: Path) -> None:
    """`make demo`'s whole burst, its test tooling copied beside the virtualenv."""
    shutil.copytree(REPO / "tests", lab_dir / "tests", ignore=NOT_SOURCE)
    demo = subprocess.Popen(
        [installed.program("python"), "-m", "tests.labs.demo"],
        cwd=lab_dir,
        env=installed.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output, _ = demo.communicate(timeout=DEMO_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        demo.send_signal(signal.SIGINT)  # the demo's `finally` stops its lab
        try:
            output, _ = demo.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            demo.kill()
            output, _ = demo.communicate()
        pytest.fail(f"the demo ran over {DEMO_TIMEOUT_S} s:\n{output}")
    workdir = re.search(
        r"^demo: starting slurmctld and the local cloud in (/tmp/\S+)$", output, re.M
    )
    if workdir and not os.environ.get("CM_KEEP_LAB"):
        shutil.rmtree(workdir[1], ignore_errors=True)  # the demo keeps it for its user
    first = output.splitlines()[0]
    assert first == f"demo: clustermgr {VERSION} from {installed.site_packages / 'clustermgr'}"
    assert demo.returncode == 0, output
    assert "demo: all jobs COMPLETED" in output
    assert output.rstrip().endswith("demo: PASS"), output
