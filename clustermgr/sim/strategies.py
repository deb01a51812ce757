"""What `--policy` names: a built-in baseline, the config's chain, or a chain of policies.

- `static`, `reactive`, `bound`: the baselines (see clustermgr.sim.replay); `clairvoyant`:
  reactive's schedule paid as the offline optimum would (clustermgr.sim.clairvoyant).
- `default`: the configuration's own `[policy] chain`, exactly as cm-scale runs it.
- `a+b+c`: a chain of policies by name (built in, entry point, or a `path` policy of the
  config); each takes its options from the config's chain when it is there, else from
  `[simulate] options`, else its defaults.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from clustermgr.config import PolicyRef, Settings
from clustermgr.core.errors import UsageError
from clustermgr.policy.loader import load_chain
from clustermgr.sim.clairvoyant import ClairvoyantReplay
from clustermgr.sim.replay import Replay, Strategy
from clustermgr.sim.results import Outcome
from clustermgr.sim.traces import Trace

BASELINES = ("static", "reactive", "bound", "clairvoyant")
DEFAULT = "default"


def strategies(settings: Settings, names: list[str], compare: bool) -> list[Strategy]:
    wanted = list(names) or [DEFAULT]
    if compare:
        wanted = [*BASELINES, *wanted]
    chosen = [strategy(settings, name) for name in dict.fromkeys(wanted)]
    for chosen_strategy in chosen:
        load_chain(list(chosen_strategy.chain))  # a bad name or option fails before any replay
    return chosen


def strategy(settings: Settings, name: str) -> Strategy:
    if name in BASELINES:
        return Strategy(name, name)
    if name == DEFAULT:
        if not settings.policy.chain:
            raise UsageError(
                "--policy default: the configuration has no [policy] chain "
                "(add one, or name policies: --policy queue_depth+idle_timeout)"
            )
        return Strategy(DEFAULT, "policy", tuple(settings.policy.chain))
    configured = {ref.name: ref for ref in settings.policy.chain}
    parts = [part.strip() for part in name.split("+")]
    if not all(parts):
        raise UsageError(f"--policy {name!r}: empty policy name (join names with '+')")
    extra = settings.simulate.options
    chain = tuple(
        configured.get(part) or PolicyRef(name=part, options=extra.get(part, {})) for part in parts
    )
    return Strategy(name, "policy", chain)


def replay_of(
    settings: Settings, trace: Trace, chosen: Strategy, onprem_nodes: int, scale_time: float = 1.0
) -> Replay:
    """The replay that runs `chosen` (the clairvoyant baseline re-prices reactive's)."""
    if chosen.kind == "clairvoyant":
        return ClairvoyantReplay(settings, trace, chosen, onprem_nodes, scale_time)
    return Replay(settings, trace, chosen, onprem_nodes, scale_time)


SHARED = ("reactive", "bound", "clairvoyant")  # one schedule: reactive's


def replays(
    settings: Settings,
    trace: Trace,
    chosen: list[Strategy],
    onprem_nodes: int,
    scale_time: float = 1.0,
    starting: Callable[[Strategy], None] | None = None,
) -> Iterator[tuple[Strategy, Outcome, float]]:
    """Each strategy's outcome and the seconds its replay took, in the order chosen.

    `reactive`, `bound` and `clairvoyant` run one schedule (reactive's) and differ only in
    what they pay for it; when more than one of them is chosen and no spot reclaim can
    happen (clairvoyant replays without reclaims), they come from one replay: clairvoyant's,
    which keeps reactive's bill and bound's beside its own. The first of them is given the
    replay's seconds, the others 0."""
    shared = [s for s in chosen if s.kind in SHARED]
    together = len(shared) > 1 and not reclaims_possible(settings)
    ready: dict[str, Outcome] = {}
    for chosen_strategy in chosen:
        if chosen_strategy.name in ready:
            yield chosen_strategy, ready.pop(chosen_strategy.name), 0.0
            continue
        if starting is not None:
            starting(chosen_strategy)
        started = time.monotonic()
        if together and chosen_strategy in shared:
            ready = one_schedule(settings, trace, onprem_nodes, scale_time)
            ready = {s.name: ready[s.kind] for s in shared}
            outcome = ready.pop(chosen_strategy.name)
        else:
            outcome = replay_of(settings, trace, chosen_strategy, onprem_nodes, scale_time).run()
        yield chosen_strategy, outcome, time.monotonic() - started


def reclaims_possible(settings: Settings) -> bool:
    return settings.simulate.spot_reclaim_per_hour > 0 and any(
        t.market == "spot" for t in settings.templates
    )


def one_schedule(
    settings: Settings, trace: Trace, onprem_nodes: int, scale_time: float
) -> dict[str, Outcome]:
    """reactive's, bound's and clairvoyant's outcomes from one replay (no spot reclaims)."""
    clairvoyant = strategy(settings, "clairvoyant")
    base = ClairvoyantReplay(settings, trace, clairvoyant, onprem_nodes, scale_time)
    bound = base.bound = Outcome(strategy="bound")
    paid_best = base.run()
    reactive = base.reactive
    assert reactive is not None
    bound_outcome = replace(
        reactive,
        strategy="bound",
        paid_node_s=bound.paid_node_s,
        cost=bound.cost,
        _month_cost=bound._month_cost,
        timeline=bound.timeline,
    )
    return {"reactive": reactive, "bound": bound_outcome, "clairvoyant": paid_best}
