"""S3 staging without the site's cloud keys in the user's job: the staging service (root,
holding the provider's credentials in its own environment) mints temporary credentials
scoped to the user's prefix for each transfer; the user's transfer job, run as a real
unprivileged account with no AWS credentials anywhere it can read, moves and verifies the
data with those alone. S3 is moto's server on loopback."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from tests.fakes.aws_harness import ACCESS_KEY, SECRET_KEY
from tests.security.conftest import Accounts
from tests.security.test_staging import (
    StageLab,
    make_tree,
    prepare,
    serving,
    sha256_tree,
    submit,
)

BIN = Path(sys.executable).parent
BUCKET = "cmsub-staging"


@pytest.fixture
def s3_lab(accounts: Accounts, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[StageLab, Any]]:
    # the provider's keys: in the service's (this process's) environment only
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    root = Path(tempfile.mkdtemp(prefix="cmsec-s3-"))
    root.chmod(0o755)
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        site = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )
        site.create_bucket(Bucket=BUCKET)
        bin_dir = prepare(root)
        config = root / "clustermgr.toml"
        config.write_text(
            f'[database]\nurl = "sqlite:///{root}/state/cm.db"\n'
            f'[slurm]\nbin_dir = "{bin_dir}"\n'
            '[[providers]]\nname = "aws-east"\ntype = "aws"\nregion = "us-east-1"\n'
            f'endpoint_url = "{endpoint}"\n'
            '[staging]\ndata_mover_partition = "movers"\ndefault_transport = "s3"\n'
            f'transfer_command = "{BIN / "cmsub-transfer"}"\nsocket = "{root}/run/cmsub.sock"\n'
            '[[staging.regions]]\nprovider = "aws-east"\npartition = "cloud"\n'
            f's3_bucket = "{BUCKET}"\ns3_prefix = "jobs"\n'
        )
        config.chmod(0o644)
        assert ACCESS_KEY not in config.read_text() and SECRET_KEY not in config.read_text()
        with serving(root, config, root) as lab:
            yield lab, site
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_s3_staging_runs_on_minted_credentials_scoped_to_the_user(
    s3_lab: tuple[StageLab, Any], accounts: Accounts
) -> None:
    lab, site = s3_lab
    alice, mallory = accounts.victim, accounts.attacker
    where = Path(tempfile.mkdtemp(prefix="cmsec-", dir=alice.home))
    os.chown(where, alice.uid, alice.gid)
    try:
        sums = make_tree(alice, where)
        chain = submit(lab, alice, where)
        prefix = f"jobs/{alice.name}/{chain['stage_id']}/"
        assert chain["stage_dir"] == f"s3://{BUCKET}/{prefix}"
        batches = [c for c in lab.calls() if c[1] == "sbatch"]
        stage_in, stage_out = str(batches[0][-1]), str(batches[-1][-1])
        number = int(stage_in.removeprefix("--transfer="))

        stolen = lab.raw(mallory, {"op": "begin", "args": {"transfer": number}})
        assert not stolen["ok"] and "is not yours" in str(stolen["error"])  # no keys for her

        moved = lab.run(alice, "cmsub-transfer", stage_in)  # no AWS variables, no ~/.aws
        assert moved.returncode == 0, moved.stderr
        assert "all verified" in moved.stdout
        listed = site.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
        keys = {o["Key"].removeprefix(prefix) for o in listed["Contents"]}
        assert {f"input/{rel}" for rel in sums} <= keys

        # the job writes its results into the area (here the site's client stands in for it)
        for rel in sums:
            body = site.get_object(Bucket=BUCKET, Key=f"{prefix}input/{rel}")["Body"].read()
            site.put_object(Bucket=BUCKET, Key=f"{prefix}results/{rel}", Body=body)
        back = lab.run(alice, "cmsub-transfer", stage_out)
        assert back.returncode == 0, back.stderr
        assert sha256_tree(where / "results" / str(chain["job"])) == sums
        left = site.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
        assert left.get("KeyCount", 0) == 0  # the area removed with the minted credentials

        # what a transfer is handed: temporary credentials, never the site's keys
        again = lab.run(
            alice, "cmsub", "--stage-in", f"{where / 'data'}:x", "--json", str(where / "job.sh")
        )
        assert again.returncode == 0, again.stderr
        batches = [c for c in lab.calls() if c[1] == "sbatch"]
        fresh = int(str(batches[-3][-1]).removeprefix("--transfer="))
        plan = lab.raw(alice, {"op": "begin", "args": {"transfer": fresh}})
        assert plan["ok"], plan
        result: Any = plan["result"]
        access = result["s3"]
        assert access["access_key_id"] != ACCESS_KEY and access["secret_access_key"] != SECRET_KEY
        assert access["session_token"]
    finally:
        shutil.rmtree(where, ignore_errors=True)
