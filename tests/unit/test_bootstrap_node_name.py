"""The boot script's node name (images/bootstrap.sh.tmpl) when the node tag comes late: a
Nova multi-create's servers are tagged once ACTIVE, CreateFleet's once it returns. The
rendered script's own functions run under /bin/sh; `curl` is a stand-in for the instance
metadata service that serves the tag from its third answer on, `sleep` returns at once."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from clustermgr.nodes.bootstrap import BootstrapFacts, render_bootstrap
from clustermgr.providers.base import TAG_NODE

pytestmark = pytest.mark.unit

ANSWERS = {
    "openstack": (
        json.dumps({"meta": {"clustermgr-cluster": "c"}}),
        json.dumps({"meta": {TAG_NODE: "gpu-7"}}),
    ),
    "aws": ("", "gpu-7"),  # IMDS: 404 (curl -f fails, prints nothing) until the tag is set
}


def functions(provider_type: str) -> str:
    facts = BootstrapFacts("c", "head:6817", provider_type, "/etc/munge/munge.key", "slurmd")
    script = render_bootstrap(facts)
    return script[: script.index("# The image's Slurm must not be newer")]


def metadata_service(bin_dir: Path, before: str, after: str, tag_from: int) -> None:
    """`curl` answering `before` (failing when empty) for the first calls, then `after`."""
    bin_dir.mkdir()
    count = bin_dir / "count"
    count.write_text("0")
    (bin_dir / "before").write_text(before)
    (bin_dir / "after").write_text(after)
    curl = bin_dir / "curl"
    curl.write_text(
        "#!/bin/sh\n"
        'case "$*" in *api/token*) echo token; exit 0 ;; esac\n'
        f'n=$(($(cat "{count}") + 1)); echo "$n" > "{count}"\n'
        f'if [ "$n" -ge {tag_from} ]; then cat "{bin_dir}/after"; exit 0; fi\n'
        f'[ -s "{bin_dir}/before" ] || exit 22\n'
        f'cat "{bin_dir}/before"\n'
    )
    (bin_dir / "sleep").write_text("#!/bin/sh\nexit 0\n")
    for name in ("curl", "sleep"):
        (bin_dir / name).chmod(0o755)


def node_name(provider_type: str, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    script = functions(provider_type) + "node_name\n"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(
        ["/bin/sh", "-c", script], env=env, capture_output=True, text=True, timeout=30
    )


@pytest.mark.parametrize("provider_type", sorted(ANSWERS))
def test_the_node_waits_for_its_tag(provider_type: str, tmp_path: Path) -> None:
    before, after = ANSWERS[provider_type]
    metadata_service(tmp_path / "bin", before, after, tag_from=3)
    done = node_name(provider_type, tmp_path / "bin")
    assert (done.returncode, done.stdout.strip()) == (0, "gpu-7"), done.stderr


@pytest.mark.parametrize("provider_type", sorted(ANSWERS))
def test_a_tag_that_never_comes_stops_the_boot_with_one_line(
    provider_type: str, tmp_path: Path
) -> None:
    before, after = ANSWERS[provider_type]
    metadata_service(tmp_path / "bin", before, after, tag_from=10_000)
    done = node_name(provider_type, tmp_path / "bin")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == f"clustermgr: no {TAG_NODE} in the instance metadata: not joining\n"
