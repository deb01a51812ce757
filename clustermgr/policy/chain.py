"""Run the policy chain: each policy in a worker thread under a wall-clock limit.

A policy that raises, runs past its limit or returns something that is not a valid
ScaleDecision makes the whole chain's decision void for this cycle (no scaling action
at all: a broken budget policy must never let launches through); the failure is
reported naming the policy, and the next cycle tries again.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from clustermgr.policy.base import Policy
from clustermgr.policy.decision import Launch, ScaleDecision, Stop
from clustermgr.policy.view import ClusterView


@dataclass
class ChainResult:
    decision: ScaleDecision
    error: str | None = None  # "policy NAME: what went wrong"
    steps: list[tuple[str, ScaleDecision]] = field(default_factory=list)


class PolicyRunner:
    def __init__(self, policies: list[Policy], timeout_s: float | None):
        """`timeout_s` None calls each policy in the caller's thread (the simulator, which
        runs a cycle per event and has no daemon to keep alive)."""
        self.policies = policies
        self.timeout_s = timeout_s
        self._hung: dict[str, threading.Thread] = {}

    def run(self, view: ClusterView) -> ChainResult:
        result = ChainResult(decision=view.proposed)
        for policy in self.policies:
            name = getattr(policy, "name", type(policy).__name__)
            try:
                decision = self._call(name, policy, view.with_proposed(result.decision))
                validate(decision, view)
            except PolicyFailed as failure:
                return ChainResult(ScaleDecision(), f"policy {name}: {failure}", result.steps)
            result.decision = decision
            result.steps.append((name, decision))
        return result

    def _call(self, name: str, policy: Policy, view: ClusterView) -> ScaleDecision:
        if self.timeout_s is None:
            try:
                value = policy.decide(view)
            except Exception as exc:  # a policy is foreign code: report anything
                raise PolicyFailed(f"raised {type(exc).__name__}: {exc}") from None
        else:
            value = self._in_worker(name, policy, view, self.timeout_s)
        if not isinstance(value, ScaleDecision):
            raise PolicyFailed(f"returned {type(value).__name__}, not a ScaleDecision")
        return value

    def _in_worker(self, name: str, policy: Policy, view: ClusterView, timeout_s: float) -> Any:
        previous = self._hung.get(name)
        if previous is not None and previous.is_alive():
            raise PolicyFailed("still running from an earlier cycle (hung); skipped")
        outcome: dict[str, Any] = {}

        def work() -> None:
            try:
                outcome["value"] = policy.decide(view)
            except BaseException as exc:  # a policy is foreign code: report anything
                outcome["error"] = exc

        worker = threading.Thread(target=work, name=f"policy-{name}", daemon=True)
        worker.start()
        worker.join(timeout_s)
        if worker.is_alive():
            self._hung[name] = worker
            raise PolicyFailed(f"did not decide within {timeout_s:g} s")
        if "error" in outcome:
            exc = outcome["error"]
            raise PolicyFailed(f"raised {type(exc).__name__}: {exc}")
        return outcome.get("value")


class PolicyFailed(Exception):
    pass


def validate(decision: ScaleDecision, view: ClusterView) -> None:
    for launch in decision.launches:
        if not isinstance(launch, Launch):
            raise PolicyFailed(f"launches holds a {type(launch).__name__}, not a Launch")
        if launch.template not in view.templates:
            raise PolicyFailed(f"launch names unknown template {launch.template!r}")
        if not isinstance(launch.count, int) or launch.count < 0:
            raise PolicyFailed(f"launch count {launch.count!r} for {launch.template} is invalid")
        if launch.market not in (None, "spot", "on-demand"):
            raise PolicyFailed(f"launch market {launch.market!r} is not spot or on-demand")
        for node in launch.nodes:
            if view.nodes.get(node) is None or view.nodes[node].template != launch.template:
                raise PolicyFailed(f"launch names node {node!r}, not a slot of {launch.template}")
    for stop in decision.stops:
        if not isinstance(stop, Stop) or stop.node not in view.nodes:
            raise PolicyFailed(f"stop names unknown node {getattr(stop, 'node', stop)!r}")
        if not view.nodes[stop.node].is_burst:
            raise PolicyFailed(f"stop names on-prem node {stop.node!r}")
