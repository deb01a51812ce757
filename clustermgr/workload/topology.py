"""topology.conf (Slurm's topology/tree plugin) for the templates: one leaf switch per
placement block, a top switch joining them, on-prem nodes under a switch of their own.

A placement block is a set of nodes that can be in one compact placement: the templates of
one provider that name the same `placement_group` (an AWS cluster placement group, an Azure
proximity placement group, an OpenStack server group) form one block, switch
`cm-pg-PROVIDER-GROUP`; a template with no placement group is a block of its own,
`cm-t-TEMPLATE` (its nodes are one region's and one launch shape's; which zone each slot
lands in is not known before launch). Slurm packs a job into one leaf switch when it fits,
so a multi-node job lands in one block.

On-prem nodes (the inventory's, from `clustermgr nodes sync`, and the ipmi/redfish
templates' slots) go under `cm-onprem`. A site that already describes its on-prem fabric
gives its own topology.conf as the site file: its switch lines are kept as they are, the
on-prem nodes it lists are not repeated, and `cm-top` joins its top switches (those no
other switch lists) with the cloud blocks, so one tree spans both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from clustermgr.config import Settings, TemplateSettings, is_onprem
from clustermgr.core.errors import ConfigError
from clustermgr.core.hostlists import HostlistError, compress, expand
from clustermgr.core.inputs import has_control, slurm_word_problem
from clustermgr.core.secret import write_atomic

TOP = "cm-top"
ONPREM = "cm-onprem"
PREFIX = "cm-"
PLUGIN_LINE = "TopologyPlugin=topology/tree"
SITE_KEYS = frozenset({"SwitchName", "Switches", "Nodes", "LinkSpeed"})
FILE_MODE = 0o644  # slurmctld reads it as SlurmUser and serves it to configless slurmd


@dataclass(frozen=True)
class Switch:
    """One `SwitchName=` line: leaf switches have nodes, the others switches."""

    name: str
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()
    extra: str = ""  # a site line's other words (LinkSpeed=), kept as they were

    def line(self) -> str:
        words = [f"SwitchName={self.name}"]
        if self.switches:
            words.append(f"Switches={','.join(self.switches)}")
        if self.nodes:
            words.append(f"Nodes={compress(self.nodes)}")
        if self.extra:
            words.append(self.extra)
        return " ".join(words)


@dataclass(frozen=True)
class Block:
    switch: str
    templates: tuple[str, ...]
    nodes: tuple[str, ...]


def _word(text: str) -> str:
    """A placement group id (an Azure resource id, say) as a switch-name word."""
    leaf = text.rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9_.-]", "-", leaf) or "group"


def cloud_blocks(settings: Settings) -> list[Block]:
    """The cloud templates' placement blocks, in configuration order."""
    blocks: dict[str, tuple[list[str], list[str]]] = {}
    for template in settings.templates:
        if is_onprem(settings.provider(template.provider)):
            continue
        switch = block_switch(template)
        names, nodes = blocks.setdefault(switch, ([], []))
        names.append(template.name)
        nodes.extend(template.node_names)
    return [Block(s, tuple(t), tuple(n)) for s, (t, n) in blocks.items()]


def block_switch(template: TemplateSettings) -> str:
    if template.placement_group:
        return f"{PREFIX}pg-{template.provider}-{_word(template.placement_group)}"
    return f"{PREFIX}t-{template.name}"


def onprem_template_nodes(settings: Settings) -> list[str]:
    return [
        name
        for template in settings.templates
        if is_onprem(settings.provider(template.provider))
        for name in template.node_names
    ]


def parse_site(text: str, where: str) -> list[Switch]:
    """A site's topology.conf: `SwitchName=` lines only (comments and blank lines skipped);
    ConfigError naming the line for anything else."""
    switches: list[Switch] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        at = f"{where} line {number}"
        if has_control(line):
            raise ConfigError(f"{at}: holds a control character")
        fields: dict[str, str] = {}
        for word in line.split():
            key, sep, value = word.partition("=")
            if not sep or key not in SITE_KEYS or not value or key in fields:
                raise ConfigError(
                    f"{at}: {word!r} is not one of SwitchName=, Switches=, Nodes=, "
                    "LinkSpeed= (once each): give the on-prem part of a topology/tree file"
                )
            fields[key] = value
        name = fields.get("SwitchName")
        if name is None or slurm_word_problem(name):
            raise ConfigError(f"{at}: needs SwitchName=NAME, a plain Slurm name")
        if name.startswith(PREFIX):
            raise ConfigError(f"{at}: switch {name!r}: names starting {PREFIX!r} are clustermgr's")
        try:
            nodes = tuple(expand(fields.get("Nodes", "")))
            children = tuple(expand(fields.get("Switches", "")))
        except HostlistError as exc:
            raise ConfigError(f"{at}: not a valid hostlist: {exc}") from None
        speed = fields.get("LinkSpeed")
        switches.append(Switch(name, nodes, children, f"LinkSpeed={speed}" if speed else ""))
    return switches


def top_switches(switches: Sequence[Switch]) -> list[str]:
    """The switches no other switch lists."""
    children = {child for switch in switches for child in switch.switches}
    return [s.name for s in switches if s.name not in children]


def render_topology(
    settings: Settings, onprem_nodes: Iterable[str], site: Sequence[Switch] = ()
) -> list[str]:
    """The lines of topology.conf. ConfigError when the site file names a template's node
    (a node under two switches) or a switch twice."""
    blocks = cloud_blocks(settings)
    cloud = {node: b.switch for b in blocks for node in b.nodes}
    site_nodes = {node for switch in site for node in switch.nodes}
    clash = sorted(site_nodes & cloud.keys())
    if clash:
        raise ConfigError(
            f"site topology lists cloud node(s) {compress(clash)}: clustermgr places a "
            "template's nodes itself; remove them from the site file"
        )
    names = [s.name for s in site]
    if len(set(names)) != len(names):
        raise ConfigError("site topology names a switch twice")
    onprem = sorted({*onprem_nodes, *onprem_template_nodes(settings)} - site_nodes - cloud.keys())
    lines = [
        "# ---- topology.conf: generated by `clustermgr slurm conf --topology` ----",
        "# One leaf switch per placement block (templates sharing a placement group, or a",
        "# template of its own); Slurm packs a job into one leaf switch when it fits.",
    ]
    if site:
        lines.append("# The site's own switches, as its file has them:")
        lines.extend(s.line() for s in site)
    leaves: list[str] = []
    for block in blocks:
        lines.append(f"# templates {', '.join(block.templates)}")
        lines.append(Switch(block.switch, block.nodes).line())
        leaves.append(block.switch)
    if onprem:
        lines.append("# on-prem nodes (the node inventory and the ipmi/redfish templates)")
        lines.append(Switch(ONPREM, tuple(onprem)).line())
        leaves.append(ONPREM)
    children = [*top_switches(site), *leaves]
    if children:
        lines.append(Switch(TOP, switches=tuple(children)).line())
    return lines


def write_conf(path: Path, lines: Sequence[str]) -> None:
    """Replace `path` atomically, root:root when run as root, mode 0644 as slurm.conf is.
    ConfigError (one line) when its directory is missing or writable by others."""
    try:
        write_atomic(path, ("\n".join(lines) + "\n").encode(), FILE_MODE)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
