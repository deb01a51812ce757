"""The chain's three sbatch argv lists: the transfer jobs on the data-mover partition, the
job pinned to the staged region with its dependency on the stage-in, the stage-out after
the job in any state; the stage-in submitted held."""

from __future__ import annotations

from pathlib import Path

from clustermgr.config import StagingRegionSettings, StagingSettings
from clustermgr.staging.jobchain import build, with_dependency


def test_the_three_argv_lists() -> None:
    staging = StagingSettings(
        data_mover_partition="movers", transfer_command=Path("/opt/cm/bin/cmsub-transfer")
    )
    region = StagingRegionSettings(provider="aws-east", partition="cloud", features=["aws", "gpu"])
    args = build(
        staging,
        region,
        stage_id="abc123",
        stage_dir="/staging/alice/abc123",
        in_id=7,
        out_id=8,
        sbatch_args=["-N", "2", "--time=10"],
        script=Path("/home/alice/my job.sh"),
        script_args=["a b", "$(x)"],
    )
    assert args.stage_in == [
        "--parsable",
        "--hold",
        "--partition=movers",
        "--job-name=cmsub-in-my job.sh",
        "--comment=cmsub abc123",
        "/opt/cm/bin/cmsub-transfer",
        "--transfer=7",
    ]
    assert args.stage_out[-2:] == ["/opt/cm/bin/cmsub-transfer", "--transfer=8"]
    assert "--partition=movers" in args.stage_out
    assert "--hold" not in args.stage_out
    assert args.job == [
        "--parsable",
        "--partition=cloud",
        "--constraint=aws&gpu",
        "--export=ALL,CMSUB_STAGE_DIR=/staging/alice/abc123,CMSUB_STAGE_ID=abc123",
        "-N",
        "2",
        "--time=10",
        "/home/alice/my job.sh",
        "a b",
        "$(x)",
    ]
    job = with_dependency(args.job, "afterok", "101")
    assert job[:3] == ["--parsable", "--dependency=afterok:101", "--partition=cloud"]
    out = with_dependency(args.stage_out, "afterany", "102")
    assert out[1] == "--dependency=afterany:102"
    # options before the script: sbatch stops reading its options at the script
    assert job.index("/home/alice/my job.sh") > job.index("--dependency=afterok:101")
