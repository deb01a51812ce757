"""The NICs an Azure provider made and no VM uses any more: deleted until they are gone.

A NIC whose VM failed or was deleted stays reserved for that VM for 180 s: deleting it
meanwhile answers 400 `NicReservedForAnotherVm` (so does attaching it to another VM, which
is why every attempt gets a NIC of its own: shapes.fresh_nic_name). Such a NIC is kept in
`pending` and its deletion is tried again at each listing, launch and termination until
Azure lets it go. A NIC that a crash left behind (made, never attached; or pending in a
process that died) is found by the listing's sweep: tagged with this cluster, attached to
no VM and named by none, and made more than `ORPHAN_GRACE_S` ago (so a NIC another process
has just made for its VM is left alone).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from clustermgr.providers.azure.errors import SDK_ERRORS, classify, is_not_found
from clustermgr.providers.azure.shapes import TAG_NIC_MADE
from clustermgr.providers.base import TAG_CLUSTER

log = logging.getLogger(__name__)

ORPHAN_GRACE_S = 600.0


class NicJanitor:
    def __init__(self, cluster: str, network: Callable[[], Any], resource_group: str) -> None:
        self.cluster = cluster
        self.network = network
        self.resource_group = resource_group
        self.pending: set[str] = set()
        self._lock = threading.Lock()

    def retire(self, names: Iterable[str]) -> None:
        """Delete these NICs; one Azure still holds is tried again later."""
        for name in names:
            if not self._delete(name):
                with self._lock:
                    self.pending.add(name)

    def retry(self) -> None:
        """Try again to delete the NICs Azure held last time."""
        with self._lock:
            waiting = sorted(self.pending)
        for name in waiting:
            if self._delete(name):
                with self._lock:
                    self.pending.discard(name)

    def sweep(self, nics: Iterable[Any], in_use: set[str]) -> None:
        """Retire the listed NICs of this cluster that no VM uses or will use (`in_use`: the
        lower-cased names of the NICs the listed VMs name)."""
        now = time.time()
        orphans = [str(nic.name) for nic in nics if self._orphan(nic, in_use, now)]
        if orphans:
            log.info("deleting %d NIC(s) no VM uses: %s", len(orphans), ", ".join(orphans))
            self.retire(orphans)

    def _orphan(self, nic: Any, in_use: set[str], now: float) -> bool:
        tags = getattr(nic, "tags", None) or {}
        if tags.get(TAG_CLUSTER) != self.cluster or getattr(nic, "virtual_machine", None):
            return False
        if str(nic.name).lower() in in_use:
            return False
        try:
            made = float(tags.get(TAG_NIC_MADE, ""))
        except ValueError:
            return False  # not one of ours as this provider makes them: leave it
        return now - made > ORPHAN_GRACE_S

    def _delete(self, name: str) -> bool:
        """True when the NIC is gone (deleted, or never was)."""
        try:
            self.network().network_interfaces.begin_delete(self.resource_group, name).result()
        except SDK_ERRORS as exc:
            if is_not_found(exc):
                return True
            failure = classify(exc)
            log.info("NIC %s not deleted yet (%s): %s", name, failure.code, failure.message)
            return False
        return True
