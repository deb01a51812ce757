"""What `--policy` names: a built-in baseline, the config's chain, or a chain of policies.

- `static`, `reactive`, `bound`: the baselines (see clustermgr.sim.replay); `clairvoyant`:
  reactive's schedule paid as the offline optimum would (clustermgr.sim.clairvoyant).
- `default`: the configuration's own `[policy] chain`, exactly as cm-scale runs it.
- `a+b+c`: a chain of policies by name (built in, entry point, or a `path` policy of the
  config); each takes its options from the config's chain when it is there, else from
  `[simulate] options`, else its defaults.
"""

from __future__ import annotations

from clustermgr.config import PolicyRef, Settings
from clustermgr.core.errors import UsageError
from clustermgr.policy.loader import load_chain
from clustermgr.sim.clairvoyant import ClairvoyantReplay
from clustermgr.sim.replay import Replay, Strategy
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
