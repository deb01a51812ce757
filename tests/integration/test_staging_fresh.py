"""The staging service's `begin` says whether a transfer is fresh (it never began, in an area
of its own), so its first run reads no earlier manifest: true for a new chain's first run,
false for a re-run of the same transfer (a requeue) and for a stage-in that took over a
failed chain's area. The real service on its socket (cmsub's lab in test_cmsub.py); the
test calls it as root, the owner of the rows cmsub made as root."""

from __future__ import annotations

from clustermgr.config import load_settings
from clustermgr.staging import client
from tests.integration.test_cmsub import Lab, lab, submit

__all__ = ["lab"]  # the fixture


def call(lab: Lab, op: str, argv: list[str], **args: object) -> dict[str, object]:
    """`op` on the transfer a stand-in sbatch was given (`... --transfer=ID`)."""
    number = int(argv[-1].removeprefix("--transfer="))
    staging = load_settings(lab.root / "clustermgr.toml").staging
    return client.call(staging, op, transfer=number, **args)


def test_begin_says_fresh_only_for_a_first_run_in_an_area_of_its_own(lab: Lab) -> None:
    chain = submit(lab)
    stage_in = lab.calls()[0]
    assert call(lab, "begin", stage_in)["fresh"] is True
    assert call(lab, "begin", stage_in)["fresh"] is False  # re-run by Slurm: it began before

    call(lab, "finish", stage_in, error="rsync exited 23")
    again = submit(lab)
    assert again["resumes"] == chain["job"] and again["stage_dir"] == chain["stage_dir"]
    taken_over = next(c for c in lab.calls()[-4:] if "--hold" in c)
    assert call(lab, "begin", taken_over)["fresh"] is False  # the failed chain's area
    assert call(lab, "begin", lab.calls()[-2])["fresh"] is False  # its stage-out's too
