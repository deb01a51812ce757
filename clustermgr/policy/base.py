"""What a policy is: `decide(view) -> ScaleDecision`, pure (the same view, the same decision)."""

from __future__ import annotations

from typing import ClassVar, Protocol, runtime_checkable

from clustermgr.policy.decision import ScaleDecision
from clustermgr.policy.view import ClusterView


@runtime_checkable
class Policy(Protocol):
    name: ClassVar[str]

    def decide(self, view: ClusterView) -> ScaleDecision: ...
