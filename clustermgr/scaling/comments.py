"""What users see of the plan: each pending job of a policy-mode template's partition
carries cm-scale's verdict in its Slurm comment (`squeue -o %k`, `scontrol show job`), as
other Slurm plugins do: `clustermgr: waiting for aws-gpu2 nodes aws-gpu2-[1-2], launched
for it`, `clustermgr: unfit: needs 20 nodes, aws-gpu2 allows at most 6`, `clustermgr:
(Code:PROTECTED) ...`. Slurm-mode templates' jobs are left to Slurm's own reason.

slurmctld is not flooded: a job is written only when the text it should carry differs from
the comment the snapshot read (so a steady queue costs no call), jobs with the same text go
in one call (a hundred a call), and at most MAX_JOBS_PER_CYCLE jobs a cycle (the rest the
next cycle). A comment the user set (one not starting with `clustermgr: `) is never
touched; ours is cleared once cm-scale has nothing to add to Slurm's own reason (held or
waiting as Slurm says, a partition no template serves). A write clears the job's Slurm
reason until Slurm judges it again; `fit.lacks_resources` reads such a job (reason None,
our comment) as still waiting for nodes, so neither the policies nor the verdict flip.
"""

from __future__ import annotations

from collections.abc import Iterable

from clustermgr.core.reasons import HOLD_PREFIX, Reason
from clustermgr.policy.view import ClusterView
from clustermgr.scaling.accounting import SLURM_SAYS
from clustermgr.scaling.clamp import JobFate
from clustermgr.workload.base import comment_text

PREFIX = HOLD_PREFIX  # "clustermgr: ", as on the nodes cm-scale holds
MAX_JOBS_PER_CYCLE = 1000


def verdict_text(fate: JobFate) -> str:
    """The comment the jobs of a fate carry, as Slurm stores it; "" for none (Slurm's own
    pending reason says it already, or no template serves the partition)."""
    if fate.status == "other" or fate.reason.startswith(SLURM_SAYS):
        return ""
    if fate.status == "served" or (fate.status == "refused" and Reason.parse(fate.reason)):
        text = fate.reason  # `(Code:PROTECTED) ... until 14:05 UTC or ...` as it is
    else:
        text = f"{fate.status}: {fate.reason}"
    return comment_text(PREFIX + text)


def comment_updates(view: ClusterView, fates: Iterable[JobFate]) -> dict[str, list[str]]:
    """text -> the pending jobs whose comment becomes it ("" clears ours): only jobs whose
    comment differs and is ours or empty, at most MAX_JOBS_PER_CYCLE of them."""
    wanted: dict[str, str] = {}
    for fate in fates:
        text = verdict_text(fate)
        if text:
            wanted.update(dict.fromkeys(fate.jobs, text))
    policy = {t.partition for t in view.templates.values() if t.demand_mode == "policy"}
    updates: dict[str, list[str]] = {}
    count = 0
    for job in view.pending:
        if job.comment and not job.comment.startswith(PREFIX):
            continue  # the user's own
        text = wanted.get(job.job_id, "")
        if text and policy.isdisjoint(job.partition.split(",")):
            text = ""  # a slurm-mode template's job: Slurm speaks for it
        if text == job.comment:
            continue
        updates.setdefault(text, []).append(job.job_id)
        count += 1
        if count >= MAX_JOBS_PER_CYCLE:
            break
    return updates
