"""The one face for policy authors: everything a policy reads or returns is importable here.

    from clustermgr.policy import ClusterView, Launch, NodeState, ScaleDecision, Stop

`ClusterView` (pure data: nodes, templates, pending and running jobs, prices, recent
failures) goes in; a `ScaleDecision` (launches, stops, refusals, unfit and held jobs, notes)
comes out. The fit helpers answer "does this job fit that template?" the same way for
every policy and for `clustermgr policy dry-run`.
"""

from clustermgr.core.pricing import BillingRule, Price
from clustermgr.nodes.states import NodeState
from clustermgr.policy.base import Policy
from clustermgr.policy.decision import Launch, MarketChoice, Refusal, ScaleDecision, Stop
from clustermgr.policy.fit import (
    JobShape,
    ReasonMemo,
    copies_per_node,
    job_shape,
    lacks_resources,
    nodes_for,
    nodes_on,
    required_features,
    serving_templates,
    shape_key,
    why_not,
)
from clustermgr.policy.queue import (
    all_lack_resources,
    all_submitted_by,
    job_ids,
    no_arrays,
    shape_keys,
    sum_in_order,
)
from clustermgr.policy.view import ClusterView, LaunchFailure, NodeView, TemplateView
from clustermgr.workload.base import PendingJob, RunningJob, WorkloadNode
from clustermgr.workload.history import RunEstimate, RunHistory

__all__ = [
    "BillingRule",
    "ClusterView",
    "JobShape",
    "Launch",
    "LaunchFailure",
    "MarketChoice",
    "NodeState",
    "NodeView",
    "PendingJob",
    "Policy",
    "Price",
    "ReasonMemo",
    "Refusal",
    "RunEstimate",
    "RunHistory",
    "RunningJob",
    "ScaleDecision",
    "Stop",
    "TemplateView",
    "WorkloadNode",
    "all_lack_resources",
    "all_submitted_by",
    "copies_per_node",
    "job_ids",
    "job_shape",
    "lacks_resources",
    "no_arrays",
    "nodes_for",
    "nodes_on",
    "required_features",
    "serving_templates",
    "shape_key",
    "shape_keys",
    "sum_in_order",
    "why_not",
]
