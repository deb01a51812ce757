"""A cloud-config carried out on a local instance, the way cloud-init would on a VM.

The local provider boots an image's user-data (images/*.cloud-init.tmpl, rendered) by
carrying out its `write_files`, then its `mounts`, then its `runcmd`, in that order (as
cloud-init's modules run), in the instance's own mount and UTS namespaces, before anything
else runs there (cloudinit_run.py does it). The boot script the user-data writes starts
slurmd, as it does on a cloud VM. Any other key of a cloud-config is INVALID: a lab that
silently skipped a step would prove nothing.

The instance's file system is this machine's, with private copies where a boot writes:
/etc, /usr/local and /opt are copy-on-write (overlayfs over a tmpfs), /run is a fresh tmpfs
(as a booted VM's is). `write_files` may write only there (INVALID otherwise).

Lab-only stand-ins (there is no NFS server, and no systemd, in a namespace):

  * NFS mounts. This machine is the head and the directors: an NFS `mounts` entry becomes a
    bind mount (read-only when its options say `ro`) of the host path its server exports
    here. The head's (or a site filer's) exports are named by the provider setting
    `nfs_stand_in = { "SERVER:/EXPORT" = "/host/path" }` (an export below a named one maps
    below its path). An export of one of this provider's own lab directors, under the
    image's director_path (node.env's CLUSTERMGR_IMAGE_PATH), is that director's copy of
    the image (`<director workdir>/image/<image>/...`, director.py), which no setting could
    name (a director's address and files change with each instance). An NFS mount that is
    neither is INVALID, one line naming the mount and the setting.
  * systemd. `systemctl start|restart munge|nslcd` starts that daemon as its unit would,
    and `systemd-run --unit=NAME CMD...` runs CMD in the foreground (cloudinit_run.py):
    the runcmd that calls it is the boot's last step, and CMD (the rendered boot script)
    starts slurmd.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath
from typing import Any

from clustermgr.providers.base import LaunchSpec, invalid

CLOUD_CONFIG = "#cloud-config"
SUPPORTED_KEYS = ("write_files", "mounts", "runcmd")
NFS_TYPES = ("nfs", "nfs4")
# where a boot may write: copy-on-write overlays (and /run, a tmpfs) in the instance's
# mount namespace, so nothing of this machine's own files changes
PRIVATE_TREES = ("/etc", "/usr/local", "/opt", "/run")
NODE_ENV_PATH = "/etc/clustermgr/node.env"  # what an image's user-data writes (images/)


@dataclass(frozen=True)
class FileToWrite:
    path: str
    content: str = field(repr=False)
    mode: int = 0o644


@dataclass(frozen=True)
class NfsEntry:
    """A `mounts` entry of type nfs: SERVER:/EXPORT on PATH."""

    server: str
    export: str
    path: str
    read_only: bool


@dataclass(frozen=True)
class BindMount:
    """What the instance mounts in place of an NFS entry: a host path, bound."""

    source: str
    target: str
    read_only: bool


@dataclass(frozen=True)
class CloudConfig:
    files: tuple[FileToWrite, ...]
    mounts: tuple[NfsEntry, ...]
    runcmd: tuple[tuple[str, ...], ...]

    def node_env(self) -> dict[str, str]:
        """The image's node.env (KEY=VALUE lines), {} when the user-data writes none."""
        text = next((f.content for f in self.files if f.path == NODE_ENV_PATH), "")
        env = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                env[key.strip()] = value.strip()
        return env

    def scripts(self) -> list[str]:
        return [f.content for f in self.files]


@dataclass(frozen=True)
class BootPlan:
    """What the instance's boot carries out (cloudinit_run.py), in this order."""

    scratch: str  # where the private trees' upper layers go (a tmpfs in the namespace)
    files: tuple[FileToWrite, ...]
    binds: tuple[BindMount, ...]
    runcmd: tuple[tuple[str, ...], ...]

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> BootPlan:
        data = json.loads(text)
        return cls(
            str(data["scratch"]),
            tuple(FileToWrite(**entry) for entry in data["files"]),
            tuple(BindMount(**entry) for entry in data["binds"]),
            tuple(tuple(str(arg) for arg in command) for command in data["runcmd"]),
        )


@dataclass(frozen=True)
class LabDirector:
    """One of this provider's running lab directors: its address and its image copies."""

    address: str
    image_root: str


def parse(spec: LaunchSpec) -> CloudConfig:
    """The cloud-config of `spec.user_data`; INVALID (one line) when the local provider
    cannot carry it out as written."""
    try:
        import yaml  # type: ignore[import-untyped]  # PyYAML: a lab booting a cloud-config
    except ImportError:
        why = "a #cloud-config user-data needs PyYAML on this machine (pip install pyyaml)"
        raise invalid("local", spec.template, "user_data", CLOUD_CONFIG, why) from None
    try:
        data = yaml.safe_load(spec.user_data)
    except yaml.YAMLError as exc:
        why = f"is not YAML: {str(exc).splitlines()[0]}"
        raise invalid("local", spec.template, "user_data", CLOUD_CONFIG, why) from None
    if not isinstance(data, dict):
        raise _bad(spec, "user_data", "is not a cloud-config mapping")
    unknown = sorted(str(key) for key in data if key not in SUPPORTED_KEYS)
    if unknown:
        why = (
            f"the local provider carries out only {', '.join(SUPPORTED_KEYS)}; remove "
            f"{', '.join(unknown)} or boot this image on a cloud"
        )
        raise _bad(spec, "user_data", why)
    return CloudConfig(
        files=tuple(_file(spec, entry) for entry in _list(spec, data, "write_files")),
        mounts=tuple(_mount(spec, entry) for entry in _list(spec, data, "mounts")),
        runcmd=tuple(_command(spec, entry) for entry in _list(spec, data, "runcmd")),
    )


def _bad(spec: LaunchSpec, where: str, why: str) -> Exception:
    return invalid("local", spec.template, where, CLOUD_CONFIG, why)


def _list(spec: LaunchSpec, data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key) or []
    if not isinstance(value, list):
        raise _bad(spec, f"user_data {key}", "must be a list")
    return value


def _file(spec: LaunchSpec, entry: Any) -> FileToWrite:
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        raise _bad(spec, "user_data write_files", f"an entry without a path: {str(entry)[:60]}")
    path = entry["path"]
    where = f"user_data write_files {path}"
    if not _under(path, PRIVATE_TREES):
        why = f"a local instance writes only under {', '.join(PRIVATE_TREES)} (its own copies)"
        raise _bad(spec, where, why)
    unsupported = sorted(set(entry) - {"path", "content", "encoding", "permissions", "owner"})
    if unsupported or entry.get("owner", "root:root") not in ("root", "root:root"):
        raise _bad(spec, where, f"unsupported here: {', '.join(unsupported) or 'owner'}")
    content = str(entry.get("content") or "")
    if entry.get("encoding") in ("b64", "base64"):
        try:
            content = base64.b64decode(content, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise _bad(spec, where, f"content is not base64 of text: {exc}") from None
    elif entry.get("encoding") not in (None, "text/plain"):
        raise _bad(spec, where, f"encoding {entry.get('encoding')!r} is not supported here")
    try:
        mode = int(str(entry.get("permissions", "0644")), 8)
    except ValueError:
        raise _bad(spec, where, f"permissions {entry.get('permissions')!r} is not octal") from None
    if not 0 <= mode <= 0o7777:
        raise _bad(spec, where, f"permissions {entry.get('permissions')!r} out of range")
    return FileToWrite(path, content, mode)


def _mount(spec: LaunchSpec, entry: Any) -> NfsEntry:
    if not isinstance(entry, list) or len(entry) < 2 or not all(isinstance(v, str) for v in entry):
        raise _bad(spec, "user_data mounts", f"not a list of fstab fields: {str(entry)[:60]}")
    what, path = entry[0], entry[1]
    fstype = entry[2] if len(entry) > 2 else "auto"
    options = entry[3].split(",") if len(entry) > 3 else []
    server, colon, export = what.partition(":")
    if fstype not in NFS_TYPES or not colon or not export.startswith("/"):
        why = "a local instance mounts only NFS (SERVER:/EXPORT) through its stand-ins"
        raise _bad(spec, f"user_data mounts {what}", why)
    if not path.startswith("/") or ".." in PurePosixPath(path).parts:
        raise _bad(spec, f"user_data mounts {what}", f"mount point {path!r} is not absolute")
    return NfsEntry(server, export, path, "ro" in options)


def _command(spec: LaunchSpec, entry: Any) -> tuple[str, ...]:
    if isinstance(entry, str):
        return ("sh", "-c", entry)  # as cloud-init runs a string entry
    if isinstance(entry, list) and entry and all(isinstance(v, str) for v in entry):
        return tuple(entry)
    raise _bad(spec, "user_data runcmd", f"not a command: {str(entry)[:60]}")


def _under(path: str, trees: tuple[str, ...]) -> bool:
    parts = PurePosixPath(path).parts
    if not path.startswith("/") or ".." in parts:
        return False
    return any(parts[: len(PurePosixPath(t).parts)] == PurePosixPath(t).parts for t in trees)


def _below(path: str, top: str) -> str | None:
    """`path` relative to `top` ("" for top itself), None when it is not below it."""
    inner, outer = PurePosixPath(path), PurePosixPath(top)
    if inner == outer:
        return ""
    if ".." in inner.parts or not inner.is_relative_to(outer):
        return None
    return str(inner.relative_to(outer))


def stand_ins(
    spec: LaunchSpec,
    config: CloudConfig,
    nfs_stand_in: Mapping[str, str],
    directors: list[LabDirector],
) -> tuple[BindMount, ...]:
    """The bind mount in place of each NFS entry (see the module's docstring); INVALID
    (one line) for an entry that has none."""
    env = config.node_env()
    image, image_path = env.get("CLUSTERMGR_IMAGE", ""), env.get("CLUSTERMGR_IMAGE_PATH", "")
    binds = []
    for entry in config.mounts:
        source = _named(entry, nfs_stand_in)
        director = next((d for d in directors if d.address == entry.server), None)
        if source is None and director is not None and image and image_path:
            rest = _below(entry.export, image_path)
            if rest is not None and "/" not in image:
                source = str(PurePosixPath(director.image_root, image, rest))
        if source is not None and not (
            os.path.isdir(entry.path) or _under(entry.path, PRIVATE_TREES)
        ):
            trees = ", ".join(PRIVATE_TREES)
            why = f"mount point {entry.path} is missing (a local instance makes one under {trees})"
            raise _bad(spec, f"user_data mounts {entry.server}:{entry.export}", why)
        if source is None:
            why = (
                f"no stand-in for this NFS export on a local instance: name it in the "
                f'provider\'s nfs_stand_in ("{entry.server}:{entry.export}" = "/host/path")'
            )
            raise _bad(spec, f"user_data mounts {entry.server}:{entry.export}", why)
        binds.append(BindMount(source, entry.path, entry.read_only))
    return tuple(binds)


def _named(entry: NfsEntry, nfs_stand_in: Mapping[str, str]) -> str | None:
    for key, host_path in nfs_stand_in.items():
        server, _, export = key.partition(":")
        rest = _below(entry.export, export) if server == entry.server else None
        if rest is not None:
            return str(PurePosixPath(host_path, rest)) if rest else host_path
    return None
