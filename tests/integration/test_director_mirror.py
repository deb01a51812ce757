"""A burst node's packages come from the mirror its region's director serves (issue 23,
"air-gapped regions"): a real signed Debian repository in the image tree, the user-data
`clustermgr images render` prints, and the real apt-get running its packages step. apt is
pointed at a scratch state (APT_CONFIG: download-only, its own lists and cache), so the
test installs nothing on this machine; everything else is the node's own script."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path

import pytest
import yaml

from tests.conftest import cannot_run, run_cli

TOOLS = ("apt-get", "dpkg-deb", "dpkg-scanpackages", "gpg", "gpgconf")
PROBE = "cm-mirror-probe"


@dataclass
class Mirror:
    site: Path  # what the node sees at /opt/site: the director's mount
    root: Path  # the repository
    keyring: Path


def run(argv: list[str], **kwargs: object) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=True, **kwargs)  # type: ignore[call-overload]
    return str(done.stdout)


@contextlib.contextmanager
def signing_key() -> Iterator[dict[str, str]]:
    """A throwaway GnuPG home with one signing key (a short path: the agent's socket)."""
    home = tempfile.mkdtemp(prefix="cmgpg")
    env = {**os.environ, "GNUPGHOME": home}
    try:
        run(
            ["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "",
             "--quick-gen-key", "clustermgr mirror test <mirror@example.invalid>",
             "ed25519", "sign", "never"],
            env=env,
        )  # fmt: skip
        yield env
    finally:
        subprocess.run(["gpgconf", "--kill", "all"], env=env, check=False, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def build_mirror(site: Path, gpg_env: dict[str, str]) -> Mirror:
    """dists/bookworm/main/binary-amd64 holding one package, InRelease signed."""
    root = site / "mirror" / "debian"
    package = site.parent / "build" / PROBE
    (package / "DEBIAN").mkdir(parents=True)
    (package / "DEBIAN" / "control").write_text(
        f"Package: {PROBE}\nVersion: 1.0\nArchitecture: all\n"
        "Maintainer: clustermgr tests <mirror@example.invalid>\n"
        "Description: proves a node installs from its director's mirror\n"
    )
    (package / "usr" / "share" / PROBE).mkdir(parents=True)
    (package / "usr" / "share" / PROBE / "ok").write_text("from the director\n")
    pool = root / "pool" / "main"
    pool.mkdir(parents=True)
    run(
        [
            "dpkg-deb",
            "--build",
            "--root-owner-group",
            str(package),
            str(pool / f"{PROBE}_1.0_all.deb"),
        ]
    )
    index = run(["dpkg-scanpackages", "--multiversion", "pool", "/dev/null"], cwd=root)
    binary = root / "dists" / "bookworm" / "main" / "binary-amd64"
    binary.mkdir(parents=True)
    (binary / "Packages").write_text(index)
    digest = hashlib.sha256(index.encode()).hexdigest()
    release = root / "dists" / "bookworm" / "Release"
    release.write_text(
        "Origin: clustermgr-test\nSuite: bookworm\nCodename: bookworm\n"
        f"Date: {formatdate(usegmt=True)}\nArchitectures: amd64\nComponents: main\n"
        f"SHA256:\n {digest} {len(index.encode())} main/binary-amd64/Packages\n"
    )
    inrelease = release.with_name("InRelease")
    run(["gpg", "--batch", "--yes", "--clearsign", "-o", str(inrelease), str(release)], env=gpg_env)
    keyring = root / "archive-keyring.gpg"
    keyring.write_bytes(
        subprocess.run(["gpg", "--export"], env=gpg_env, capture_output=True, check=True).stdout
    )
    return Mirror(site, root, keyring)


def definition(directory: Path, mirror: Mirror, *, keyring: Path | None = None) -> Path:
    """The shipped gpu-node template with a [packages] on the director's mount."""
    directory.mkdir(exist_ok=True)
    shipped = Path(__file__).resolve().parents[2] / "images" / "gpu-node.cloud-init.tmpl"
    (directory / "node.cloud-init.tmpl").write_text(shipped.read_text())
    (directory / "node.toml").write_text(
        'name = "node"\ntree = "/srv/node"\nuser_data = "node.cloud-init.tmpl"\n'
        '[base.local]\nimage = "local.gpu"\n'
        '[[nfs_mounts]]\nserver = "director"\nexport = "/srv/node/opt/site"\n'
        f'path = "{mirror.site}"\n'
        f'[packages]\nmirror = "{mirror.root}"\nsuite = "bookworm"\n'
        f'keyring = "{keyring or mirror.keyring}"\ninstall = ["{PROBE}"]\nmount_wait_s = 0\n'
    )
    return directory


def packages_step(defs: Path, into: Path) -> Path:
    """`clustermgr images render`'s user-data, and the packages script it writes."""
    done = run_cli(
        "images", "render", "node", "--provider", "local", "--director-address", "10.9.0.7",
        env={"CLUSTERMGR_IMAGES_DIR": str(defs)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    cloud_config = yaml.safe_load(done.stdout)
    [entry] = [f for f in cloud_config["write_files"] if f["path"].endswith("clustermgr-packages")]
    [step] = cloud_config["runcmd"]
    assert step[-1].startswith("/usr/local/sbin/clustermgr-packages && "), step  # before slurmd
    script = into / "clustermgr-packages"
    script.write_bytes(base64.b64decode(entry["content"]))
    return script


def scratch_apt(where: Path) -> dict[str, str]:
    """apt with its own state and cache, downloading only, reading no host source."""
    for sub in ("state/lists/partial", "cache/archives/partial", "parts", "trusted.d", "log"):
        (where / sub).mkdir(parents=True)
    (where / "state" / "status").write_text("")
    conf = where / "apt.conf"
    conf.write_text(
        f'Dir::State "{where}/state";\nDir::State::status "{where}/state/status";\n'
        f'Dir::Cache "{where}/cache";\nDir::Log "{where}/log";\n'
        f'Dir::Etc::Parts "{where}/parts";\nDir::Etc::Trusted "{where}/none.gpg";\n'
        f'Dir::Etc::TrustedParts "{where}/trusted.d";\n'
        'APT::Get::Download-Only "true";\nDebug::NoLocking "true";\nAPT::Sandbox::User "root";\n'
    )
    return {"PATH": os.environ["PATH"], "APT_CONFIG": str(conf)}


def fetched(output: str) -> bool:
    """Did apt take the package from the mirror? (A file: source is read in place: apt
    copies nothing into its cache, it names what it got.)"""
    return f"amd64 {PROBE} all 1.0" in output and "Download complete" in output


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[Mirror]:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        cannot_run(f"not installed: {', '.join(missing)}")
    with signing_key() as gpg_env:
        yield build_mirror(tmp_path / "site", gpg_env)


def test_the_node_installs_its_packages_from_the_directors_signed_mirror(
    tmp_path: Path, mirror: Mirror
) -> None:
    script = packages_step(definition(tmp_path / "defs", mirror), tmp_path)
    apt = tmp_path / "apt"
    done = subprocess.run(["sh", str(script)], env=scratch_apt(apt), capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"file:{mirror.root} bookworm InRelease" in done.stdout  # the mirror, nothing else
    assert "http" not in done.stdout
    assert fetched(done.stdout), done.stdout


def test_a_tampered_index_stops_the_boot_before_slurmd(tmp_path: Path, mirror: Mirror) -> None:
    script = packages_step(definition(tmp_path / "defs", mirror), tmp_path)
    index = mirror.root / "dists" / "bookworm" / "main" / "binary-amd64" / "Packages"
    index.write_text(index.read_text().replace("Version: 1.0", "Version: 1.1"))
    apt = tmp_path / "apt"
    done = subprocess.run(["sh", str(script)], env=scratch_apt(apt), capture_output=True, text=True)
    assert done.returncode != 0
    assert "did not install from the director's mirror" in done.stderr
    assert "Hash Sum mismatch" in done.stdout + done.stderr
    assert not fetched(done.stdout)


def test_a_mirror_signed_by_another_key_is_refused(tmp_path: Path, mirror: Mirror) -> None:
    with signing_key() as stranger:
        other = mirror.site / "other-keyring.gpg"
        other.write_bytes(run_bytes(["gpg", "--export"], stranger))
    script = packages_step(definition(tmp_path / "defs", mirror, keyring=other), tmp_path)
    apt = tmp_path / "apt"
    done = subprocess.run(["sh", str(script)], env=scratch_apt(apt), capture_output=True, text=True)
    assert done.returncode != 0
    assert "NO_PUBKEY" in done.stdout + done.stderr or "not signed" in done.stdout + done.stderr
    assert not fetched(done.stdout)


def test_no_mount_no_join(tmp_path: Path, mirror: Mirror) -> None:
    script = packages_step(definition(tmp_path / "defs", mirror), tmp_path)
    shutil.rmtree(mirror.root / "dists")  # the director's mount is not there
    done = subprocess.run(
        ["sh", str(script)], env=scratch_apt(tmp_path / "apt"), capture_output=True, text=True
    )
    assert done.returncode == 1
    assert f"no mirror at {mirror.root}" in done.stderr and "not joining" in done.stderr


def run_bytes(argv: list[str], env: dict[str, str]) -> bytes:
    return subprocess.run(argv, env=env, capture_output=True, check=True).stdout
