"""A burst node's report of its image revision and kernel, taken in and judged.

The node sets the report (core/node_report.py) and cm-scale reads it with Slurm's nodes;
its form is checked there. Here, with the cycle's read of the images (`RegionImage`), the
rest: the image must be the one the node's template names, and the revision one the head
recorded for it; anything else is skipped with a warning (the kernel alone is kept).

The verdict (`stale_reason`): a node whose template names an image definition, whose
region's director serves (verified) a revision, and that reports another one runs a stale
image: cm-scale drains it with `(Code:IMAGE) runs revision A of IMAGE, director NAME serves
B`, its jobs finish, and it is stopped once idle; demand launches its replacement on the
current revision. A node that reports no revision (booted before its director served one)
or whose template names no definition is never refused.
"""

from __future__ import annotations

import logging

from clustermgr.core.node_report import NodeReport
from clustermgr.core.reasons import IMAGE, Reason
from clustermgr.imaging.launch_images import RegionImage

log = logging.getLogger(__name__)


def checked_report(
    node: str, found: RegionImage | None, report: NodeReport | None
) -> NodeReport | None:
    """The node's report as cm-scale takes it (`found`: its template's image this cycle,
    None when the template names no definition)."""
    if report is None:
        return None
    problem = None
    if found is None and (report.image or report.revision):
        problem = f"it reports image {report.image!r}, and its template names no image definition"
    elif found is not None and report.image != found.image.name:
        problem = f"it reports image {report.image!r}, its template's is {found.image.name!r}"
    elif found is not None and report.revision and report.revision not in found.known:
        problem = f"revision {report.revision!r} is not one of image {found.image.name}'s"
    if problem is None:
        return report
    log.warning("node %s: its image report skipped (kernel kept): %s", node, problem)
    return NodeReport(kernel=report.kernel)


def stale_reason(found: RegionImage | None, report: NodeReport | None) -> str | None:
    """`(Code:IMAGE) runs revision A of IMAGE, director NAME serves B` when the (checked)
    report names a revision other than the one the region's serving director has verified
    as newest; None otherwise, or when either side is unknown."""
    if found is None or report is None or not report.revision:
        return None
    if not found.director or not found.revision or report.revision == found.revision:
        return None
    return str(
        Reason(
            IMAGE,
            f"runs revision {report.revision} of {found.image.name}, "
            f"director {found.director} serves {found.revision}",
        )
    )
