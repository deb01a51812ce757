"""The local provider: each "instance" is a real slurmd on this machine, in its own network
namespace with its own address on `settings.subnet`. It plays the cloud in tests, the demo
and benchmarks (the fake driver shipped in the package, libcloud-style), and needs root.

The network: a Linux bridge on the host holds the subnet's first address (the controller's
end: `ensure_bridge(settings)` returns it, give it to slurmctld as SlurmctldHost's address);
each instance gets a namespace `cm-<id>`, a veth pair (host end on the bridge, `eth0`
inside) and the next free address of the subnet.

The instance: `unshare --time --boottime -<uptime-5> --fork --kill-child nsenter
--net=/var/run/netns/cm-<id> /usr/sbin/slurmd -D -N NODE --conf-server HOST:PORT`, started
in a new session and detached (a later process lists and terminates it by pid). The time
namespace makes slurmd report a fresh boot, which slurmctld wants before it ends
POWERING_UP. Output goes to `<state_dir>/logs/<id>.log`.

Contract with the engine (where NODE and HOST:PORT come from):
  * NODE is `spec.node_names[i]`: the local provider needs a name per instance (INVALID
    otherwise), and passes it to slurmd (and as CLUSTERMGR_NODE in its environment).
  * HOST:PORT is read from `spec.user_data`, which the engine renders from
    images/bootstrap.sh.tmpl and which contains `--conf-server 'HOST:PORT'`. The script
    itself is NOT run (it would rename this host); only that argument is taken. No
    `--conf-server` in the user-data is INVALID (set cluster.head_address or
    slurm.conf_server, with the port when it is not 6817).
  * An image's cloud-config (`#cloud-config`, images/*.cloud-init.tmpl rendered) is carried
    out as written instead (cloudinit.py: write_files, mounts, runcmd in the instance's own
    mount and UTS namespaces, NFS and systemd stood in for): its boot script starts slurmd.

Instance types are a fixed catalog (CATALOG). GPU counts there are informational: the
fake GPU devices a node has are the ones the controller's gres.conf names (SlurmLab makes
character devices for them), fetched configless by slurmd.

State: `<state_dir>/instances.json` (default /var/lib/clustermgr/local/<provider name>), see
state.py, which also documents faults.json (injected CAPACITY/QUOTA/THROTTLED
failures, a capacity limit, stalls). `settings.max_instances` caps live instances; past it the
rest of a launch is a CAPACITY error (a partial launch), as is running out of addresses.

Crashes: an instance's record is saved ("starting") before its namespace is made, and says
"running" once slurmd is started. launch() and terminate() first `sweep` under the state's
exclusive lock, which no launch in progress could let them take: a "starting" record is
then a launch that died, and its slurmd (or the boot script on its way into the namespace),
namespace and veth are removed with the record; so is a `cm-lc-*` namespace no record names
whose veth hangs on this provider's bridge (made by a version that recorded after the fact).
list_instances() shows a dead start as ERROR, so the engine re-issues its launch or treats
it as an orphan, either of which sweeps it.

Directors: a launch spec tagged clustermgr-role=director (directors/lifecycle.py) starts the
lab director instead of slurmd (director.py: slapd and an rsync daemon in the namespace,
its facts from the user data); its files live in `<state_dir>/directors/<id>`, removed
with the instance. The same record, namespace, sweep and terminate apply.

AUTH (the local provider's "credentials"): managing network namespaces needs root or
CAP_NET_ADMIN, and the state dir must be creatable, owned by the current user and
writable. Otherwise every call raises ProviderError(AUTH) naming what is wrong.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.base import (
    TAG_NODE,
    CheckResult,
    CloudInstance,
    InstanceState,
    InstanceType,
    LaunchError,
    LaunchResult,
    LaunchSpec,
    invalid,
    ours,
)
from clustermgr.providers.local import net
from clustermgr.providers.local.client import (
    authorize,
    can_manage_namespaces,
    local_options,
    slurmd_path,
    state_dir_of,
)
from clustermgr.providers.local.cloudinit import BindMount, BootPlan, LabDirector, stand_ins
from clustermgr.providers.local.director import (
    ROLE_DIRECTOR,
    TAG_ROLE,
    DirectorBoot,
    is_director_spec,
    parse_boot,
    spawn_director,
)
from clustermgr.providers.local.shapes import (
    CATALOG,
    CATALOG_BY_NAME,
    SlurmdBoot,
    slurmd_boot_from,
)
from clustermgr.providers.local.state import InstanceRecord, State, check_state_dir, locked

if TYPE_CHECKING:
    from clustermgr.config import ProviderSettings

log = logging.getLogger(__name__)


class LocalProvider:
    kind: ClassVar[str] = "local"

    def __init__(self, settings: ProviderSettings, cluster: str) -> None:
        self.settings = settings
        self.name = settings.name
        self.cluster = cluster
        self.state_dir = state_dir_of(settings)
        self.subnet = net.Subnet.parse(local_options(settings).subnet)
        self.slurmd = slurmd_path()

    # --- reading ----------------------------------------------------------------------

    def _authorize(self) -> None:
        authorize(self.state_dir)

    def _instance(self, rec: InstanceRecord) -> CloudInstance:
        if rec.status == "stopping":
            state = InstanceState.STOPPING
        elif rec.status == "starting":
            state = InstanceState.ERROR  # its launch died half way: the next sweep removes it
        elif rec.pid is not None and net.alive(rec.pid, rec.pid_start):
            state = InstanceState.RUNNING
        else:
            state = InstanceState.ERROR  # slurmd died without terminate(): a crashed "VM"
        return CloudInstance(
            instance_id=rec.instance_id,
            node_name=rec.node,
            state=state,
            private_address=rec.address,
            instance_type=rec.instance_type,
            zone=self.settings.region,
            lifecycle="on-demand",
            launch_time=datetime.fromisoformat(rec.launched_at),
            tags=dict(rec.tags),
        )

    def list_instances(self) -> dict[str, CloudInstance]:
        self._authorize()
        with locked(self.state_dir, exclusive=False) as state:
            return {
                iid: self._instance(rec)
                for iid, rec in state.instances.items()
                if rec.cluster == self.cluster
            }

    def catalog(self) -> Sequence[InstanceType]:
        return CATALOG

    # --- launching --------------------------------------------------------------------

    def _validate(
        self, spec: LaunchSpec, count: int
    ) -> tuple[InstanceType, SlurmdBoot | DirectorBoot]:
        """The instance type, and what the instances start with: slurmd's conf server,
        or a director's facts."""
        if not spec.instance_types:
            raise invalid(self.name, spec.template, "instance_types", "", "is empty")
        for name in spec.instance_types:
            if name not in CATALOG_BY_NAME:
                known = ", ".join(CATALOG_BY_NAME)
                raise invalid(
                    self.name, spec.template, "instance_types", name, f"unknown (known: {known})"
                )
        if spec.market != "on-demand":
            raise invalid(self.name, spec.template, "market", spec.market, "local has no spot")
        if spec.root_volume_gb is not None:
            size = str(spec.root_volume_gb)
            why = "a local instance has no root volume to size (remove it)"
            raise invalid(self.name, spec.template, "volume_size_gb", size, why)
        if count < 0 or len(spec.node_names) < count:
            raise invalid(
                self.name,
                spec.template,
                "node_names",
                ",".join(spec.node_names),
                f"the local provider needs a node name per instance ({count} asked)",
            )
        itype = CATALOG_BY_NAME[spec.instance_types[0]]
        return itype, parse_boot(spec) if is_director_spec(spec) else slurmd_boot_from(spec)

    def launch(self, spec: LaunchSpec, count: int, request_id: str) -> LaunchResult:
        itype, boot = self._validate(spec, count)
        self._authorize()
        net.ensure_bridge_for(self.subnet)
        result = LaunchResult(request_id=request_id, requested=count)
        names = list(spec.node_names[:count])
        with locked(self.state_dir) as state:
            self.sweep(state)
            try:
                self._launch_locked(state, spec, itype, boot, names, result)
            finally:
                state.save()
        return result

    def sweep(self, state: State) -> list[str]:
        """Remove what launches that died left behind; `state` must be held exclusively
        (so no launch is in progress). Returns the instance ids removed."""
        dead = [rec for rec in state.instances.values() if rec.status == "starting"]
        stray = [
            iid
            for iid in net.namespaced_instances()
            if iid not in state.instances and net.on_bridge(iid, self.subnet)
        ]
        if not dead and not stray:
            return []
        leaders = {rec.instance_id: (rec.pid or 0, rec.pid_start) for rec in dead}
        leaders.update({iid: (0, None) for iid in stray})
        net.stop_instances(leaders)
        removed = []
        for instance_id in sorted(leaders):
            try:
                net.delete_network(instance_id)
            except ProviderError as exc:
                log.warning("local: could not remove %s: %s", instance_id, exc.args[0])
                continue
            state.instances.pop(instance_id, None)
            self._remove_workdir(instance_id)
            removed.append(instance_id)
        state.save()
        if removed:
            log.warning("local: removed %s, left by a launch that died", ", ".join(removed))
        return removed

    def _launch_locked(
        self,
        state: State,
        spec: LaunchSpec,
        itype: InstanceType,
        boot: SlurmdBoot | DirectorBoot,
        names: list[str],
        result: LaunchResult,
    ) -> None:
        existing = {
            rec.node: rec
            for rec in state.instances.values()
            if rec.request_id == result.request_id
            and rec.cluster == self.cluster
            and rec.status != "starting"
        }
        result.instances += [self._instance(existing[n]) for n in names if n in existing]
        to_start = [n for n in names if n not in existing]
        if not to_start:
            return
        fault = state.take_launch_fault()
        if fault is not None:
            result.errors.append(
                LaunchError(fault.kind, fault.code, fault.message, itype.name, count=len(to_start))
            )
            return
        for index, node in enumerate(to_start):
            why = self._no_room(state)
            if why is None and not state.take_capacity():
                why = "InsufficientCapacity", "no more local capacity (faults.json)"
            if why is not None:
                left = len(to_start) - index
                result.errors.append(
                    LaunchError(ErrorKind.CAPACITY, why[0], why[1], itype.name, count=left)
                )
                return
            try:
                rec = self._start_one(state, spec, itype, boot, node, result.request_id)
            except ProviderError as exc:
                result.errors.append(
                    LaunchError(exc.kind, exc.code or "LaunchFailed", str(exc.args[0]), itype.name)
                )
                continue
            result.instances.append(self._instance(rec))

    def _no_room(self, state: State) -> tuple[str, str] | None:
        limit = self.settings.max_instances
        if limit is not None and len(state.instances) >= limit:
            return "InstanceLimitReached", f"max_instances = {limit} reached"
        if self._free_address(state) is None:
            return "SubnetFull", f"no free address left in {self.subnet.network}"
        return None

    def _free_address(self, state: State) -> str | None:
        taken = {rec.address for rec in state.instances.values()}
        return next((a for a in self.subnet.instance_addresses() if a not in taken), None)

    def _start_one(
        self,
        state: State,
        spec: LaunchSpec,
        itype: InstanceType,
        boot: SlurmdBoot | DirectorBoot,
        node: str,
        request_id: str,
    ) -> InstanceRecord:
        instance_id = f"lc-{secrets.token_hex(4)}"
        address = self._free_address(state)
        assert address is not None  # _no_room checked
        tags = {**ours(self.cluster, spec.template, request_id, spec.tags), TAG_NODE: node}
        log_path = self.state_dir / "logs" / f"{instance_id}.log"
        rec = InstanceRecord(
            instance_id=instance_id,
            cluster=self.cluster,
            node=node,
            request_id=request_id,
            template=spec.template,
            instance_type=itype.name,
            address=address,
            launched_at=datetime.now(UTC).isoformat(),
            status="starting",
            log=str(log_path),
            tags=tags,
        )
        binds: tuple[BindMount, ...] = ()
        if isinstance(boot, SlurmdBoot) and boot.cloud_config is not None:
            stand_in = {k: str(v) for k, v in local_options(self.settings).nfs_stand_in.items()}
            binds = stand_ins(spec, boot.cloud_config, stand_in, self._lab_directors(state))
        state.instances[instance_id] = rec
        state.save()  # before the namespace exists: a crash from here on is swept
        try:
            net.create_network(instance_id, self.subnet, address)
            try:
                pid, started = self._spawn(instance_id, node, boot, log_path, binds)
            except ProviderError:
                net.delete_network(instance_id)
                self._remove_workdir(instance_id)
                raise
        except ProviderError:
            del state.instances[instance_id]
            state.save()
            raise
        self._stall(state, "launch")
        rec.pid, rec.pid_start, rec.status = pid, started, "running"
        state.save()
        log.info("local: started %s as %s at %s (pid %d)", node, instance_id, address, pid)
        return rec

    def _lab_directors(self, state: State) -> list[LabDirector]:
        """This provider's running lab directors (an image's NFS stand-in, cloudinit.py)."""
        return [
            LabDirector(rec.address, str(self._workdir(rec.instance_id) / "image"))
            for rec in state.instances.values()
            if rec.tags.get(TAG_ROLE) == ROLE_DIRECTOR
            and rec.status == "running"
            and rec.pid is not None
            and net.alive(rec.pid, rec.pid_start)
        ]

    def _spawn(
        self,
        instance_id: str,
        node: str,
        boot: SlurmdBoot | DirectorBoot,
        log_path: Path,
        binds: tuple[BindMount, ...] = (),
    ) -> tuple[int, int | None]:
        if isinstance(boot, DirectorBoot):
            return spawn_director(instance_id, boot, self._workdir(instance_id), log_path)
        key = None
        write_secret(self.user_data_file(instance_id), boot.user_data)
        if boot.cloud_config is not None:
            config = boot.cloud_config
            scratch = self._node_dir(instance_id)
            scratch.mkdir(mode=0o700, parents=True, exist_ok=True)
            plan = BootPlan(str(scratch), config.files, binds, config.runcmd)
            plan_file = self._token_file(instance_id).with_suffix(".plan")
            write_secret(plan_file, plan.to_json())  # its files hold the munge-key token
            return net.spawn_cloud_config(instance_id, node, sys.executable, plan_file, log_path)
        if boot.key is not None:
            key = net.KeyBoot(boot.key.url, boot.key.pin, self._token_file(instance_id))
            write_secret(key.token_file, boot.key.token)
        return net.spawn_slurmd(instance_id, node, boot.conf_server, self.slurmd, log_path, key)

    def _workdir(self, instance_id: str) -> Path:
        """A director's files (slapd, rsyncd.conf, its image copy); slurmd has none."""
        return self.state_dir / "directors" / instance_id

    def _node_dir(self, instance_id: str) -> Path:
        """A cloud-config node's mount point for its private trees' tmpfs (cloudinit_run)."""
        return self.state_dir / "nodes" / instance_id

    def _token_file(self, instance_id: str) -> Path:
        """The launch's munge-key token for the instance's boot (root-only; the boot
        removes it once it has redeemed it)."""
        return self.state_dir / "boot" / f"{instance_id}.token"

    def user_data_file(self, instance_id: str) -> Path:
        """The instance's user-data as launched (root-only): what a cloud keeps and its
        metadata service shows to anyone on the instance."""
        return self.state_dir / "boot" / f"{instance_id}.user-data"

    def _remove_workdir(self, instance_id: str) -> None:
        shutil.rmtree(self._workdir(instance_id), ignore_errors=True)
        shutil.rmtree(self._node_dir(instance_id), ignore_errors=True)
        self._token_file(instance_id).unlink(missing_ok=True)
        self._token_file(instance_id).with_suffix(".plan").unlink(missing_ok=True)
        self.user_data_file(instance_id).unlink(missing_ok=True)

    def _stall(self, state: State, at: str) -> None:
        """faults.json's `stall` (tests): wait at `at`, the fault's use saved first."""
        seconds = state.take_stall(at)
        if seconds:
            state.save()
            log.info("local: stalled %.0f s at %s (faults.json)", seconds, at)
            time.sleep(seconds)

    # --- terminating ------------------------------------------------------------------

    def terminate(self, instance_ids: Sequence[str], request_id: str) -> None:
        self._authorize()
        with locked(self.state_dir) as state:
            self.sweep(state)
            doomed = [
                state.instances[iid]
                for iid in instance_ids
                if iid in state.instances and state.instances[iid].cluster == self.cluster
            ]
            if not doomed:
                return
            for rec in doomed:
                rec.status = "stopping"
            state.save()
            self._stall(state, "terminate")
            net.stop_instances({rec.instance_id: (rec.pid or 0, rec.pid_start) for rec in doomed})
            failures = []
            for rec in doomed:
                try:
                    net.delete_network(rec.instance_id)
                except ProviderError as exc:
                    failures.append(f"{rec.instance_id}: {exc.args[0]}")
                    continue
                del state.instances[rec.instance_id]
                self._remove_workdir(rec.instance_id)
            state.save()
        if failures:
            raise ProviderError(
                ErrorKind.TRANSIENT,
                "could not remove " + "; ".join(failures),
                provider=self.name,
                code="TerminateIncomplete",
            )

    # --- checks -----------------------------------------------------------------------

    def check(self) -> list[CheckResult]:
        results = [
            CheckResult(
                "privileges",
                can_manage_namespaces(),
                "root or CAP_NET_ADMIN"
                if can_manage_namespaces()
                else "cannot manage network namespaces: not root (needs CAP_NET_ADMIN)",
            )
        ]
        for name in ("ip", "unshare", "nsenter", "curl"):  # curl: the nodes fetch the munge key
            found = net.tool(name)
            results.append(CheckResult(name, found is not None, found or f"{name} not found"))
        slurmd_ok = os.access(self.slurmd, os.X_OK)
        results.append(
            CheckResult("slurmd", slurmd_ok, self.slurmd if slurmd_ok else "slurmd not found")
        )
        try:
            check_state_dir(self.state_dir)
            results.append(CheckResult("state dir", True, f"{self.state_dir} is ours, writable"))
        except ProviderError as exc:
            results.append(CheckResult("state dir", False, str(exc.args[0])))
        try:
            usable, detail = net.bridge_state(self.subnet)
        except ProviderError as exc:
            usable, detail = False, str(exc.args[0])
        results.append(CheckResult("bridge", usable, detail))
        return results


def write_secret(path: Path, text: str) -> None:
    """`text` into a new 0600 file (its directory 0700), never through a link."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
