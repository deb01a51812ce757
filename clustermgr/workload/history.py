"""Run times of finished jobs, as the site's own history tells them.

Slurm plans with time limits, and users ask for far more than their jobs run (on the
Parallel Workloads Archive traces most jobs end well before half their limit), so a start
estimate built from limits is late. `RunHistory` keeps, per user and job shape and per
shape alone, the ratio of run time to time limit of the most recent finished jobs and
answers with a high quantile of them: robust to the odd job that ran its whole limit or
failed at once, and bounded (RECENT_RUNS per key, MAX_KEYS keys, the least recently fed
forgotten first). Fallback chain: user and shape -> shape -> the time limit.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass

RECENT_RUNS = 32  # ratios kept per key: the most recent finished jobs
MAX_KEYS = 4096  # (user, shape) keys, and shape keys, each
MIN_RUNS = 3  # fewer past jobs than this under a key: the next estimate in the chain
QUANTILE = 0.9  # a late estimate costs a boot's worth of money, an early one a user's wait

USER_SHAPE = "user+shape"
SHAPE = "shape"
TIME_LIMIT = "time limit"
OUTLIVED = "outlived"  # the time limit: the job has run longer than its history says
UNKNOWN = "unknown"  # the time limit: the job's start, limit or shape is not known


@dataclass(frozen=True)
class RunEstimate:
    """How long a job is expected to run, and what says so."""

    seconds: float
    source: str  # USER_SHAPE, SHAPE or TIME_LIMIT
    runs: int = 0  # past jobs it rests on (0: the time limit)
    quantile: float = QUANTILE

    def describe(self) -> str:
        """For a person: which estimate, from how many past jobs."""
        share = f"p{round(self.quantile * 100)}"
        if self.source == USER_SHAPE:
            # not the user's name: the reason lands in the comment of another user's job
            return f"the {share} of its user's last {self.runs} runs of its shape"
        if self.source == SHAPE:
            return f"the {share} of the last {self.runs} runs of its shape (any user)"
        if self.source == OUTLIVED:
            return f"its time limit: it has run longer than the {share} of {self.runs} past runs"
        if self.source == UNKNOWN:
            return "its time limit (its start, limit or shape unknown)"
        return f"its time limit (fewer than {MIN_RUNS} past runs of its shape)"

    def outlived(self, limit_s: float | None = None) -> RunEstimate:
        """The estimate for a job that has run past this one: its time limit."""
        return RunEstimate(limit_s or 0.0, OUTLIVED, self.runs, self.quantile)


class _Runs:
    """One key's recent run/limit ratios, with its quantiles worked out once per change."""

    __slots__ = ("quantiles", "ratios")

    def __init__(self, recent: int) -> None:
        self.ratios: deque[float] = deque(maxlen=recent)
        self.quantiles: dict[float, float] = {}

    def add(self, ratio: float) -> None:
        self.ratios.append(ratio)
        self.quantiles.clear()

    def quantile(self, q: float) -> float:
        """Nearest rank: the smallest ratio at least `q` of the runs did not exceed."""
        found = self.quantiles.get(q)
        if found is None:
            ordered = sorted(self.ratios)
            rank = min(len(ordered), max(1, math.ceil(q * len(ordered))))
            found = self.quantiles[q] = ordered[rank - 1]
        return found


class RunHistory:
    """Recent run times of finished jobs by (user, shape) and by shape, as run/limit ratios.

    `shape` is any hashable (policy.fit.job_shape's tuple); a job without a time limit
    teaches nothing here and is asked about with none (it has no ratio to scale)."""

    def __init__(
        self, recent: int = RECENT_RUNS, max_keys: int = MAX_KEYS, min_runs: int = MIN_RUNS
    ) -> None:
        self.recent, self.max_keys, self.min_runs = recent, max_keys, min_runs
        self._by_user: OrderedDict[tuple[str, Hashable], _Runs] = OrderedDict()
        self._by_shape: OrderedDict[Hashable, _Runs] = OrderedDict()
        self.recorded = 0  # finished jobs fed in all

    def record(self, user: str, shape: Hashable, limit_s: float, run_s: float) -> bool:
        """Feed one finished job; False (and nothing kept) when its figures make no sense
        (no positive time limit, a negative or non-finite run time)."""
        if not (math.isfinite(limit_s) and limit_s > 0 and math.isfinite(run_s) and run_s >= 0):
            return False
        ratio = min(run_s / limit_s, 1.0)  # a job ends at its limit at the latest
        self._add(self._by_user, (user, shape), ratio)
        self._add(self._by_shape, shape, ratio)
        self.recorded += 1
        return True

    def _add(self, table: OrderedDict, key: Hashable, ratio: float) -> None:  # type: ignore[type-arg]
        runs = table.get(key)
        if runs is None:
            runs = table[key] = _Runs(self.recent)
            if len(table) > self.max_keys:
                table.popitem(last=False)
        else:
            table.move_to_end(key)
        runs.add(ratio)

    def estimate(
        self, user: str, shape: Hashable, limit_s: float, quantile: float = QUANTILE
    ) -> RunEstimate:
        """The run time of a job of `user` and `shape` with a limit of `limit_s` seconds:
        the `quantile` of its user's and shape's recent ratios times its limit, else of its
        shape's, else the limit itself."""
        runs = self._by_user.get((user, shape))
        if runs is not None and len(runs.ratios) >= self.min_runs:
            ratio = runs.quantile(quantile)
            return RunEstimate(ratio * limit_s, USER_SHAPE, len(runs.ratios), quantile)
        runs = self._by_shape.get(shape)
        if runs is not None and len(runs.ratios) >= self.min_runs:
            ratio = runs.quantile(quantile)
            return RunEstimate(ratio * limit_s, SHAPE, len(runs.ratios), quantile)
        return RunEstimate(limit_s, TIME_LIMIT, 0, quantile)

    def __len__(self) -> int:
        """Keys (user and shape) remembered."""
        return len(self._by_user)
