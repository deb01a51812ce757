"""A template's fabric keys against its provider: `efa` (aws), `infiniband` (azure),
`vnic_type = "direct"` (openstack). Each is one cloud's, and each needs what its fabric
needs to carry traffic between the nodes of a job (docs/architecture.md, "Placement blocks
and fabric")."""

from __future__ import annotations

from clustermgr.config.providers import ProviderSettings, TemplateSettings

# key -> (the provider type it is for, what it needs beside it, why)
NEEDS = {
    "efa": ("aws", "placement_group", "EFA traffic needs a cluster placement group"),
    "infiniband": (
        "azure",
        "placement_group",
        "InfiniBand VMs must share a proximity placement group",
    ),
    "vnic_type": ("openstack", "network", "the SR-IOV port is made on the template's network"),
}


def check_fabric(template: TemplateSettings, provider: ProviderSettings) -> None:
    """ValueError (one line) for a fabric key its provider cannot give or lacking its need."""
    where = f"template {template.name!r}"
    chosen = [
        key
        for key, on in (
            ("efa", template.efa),
            ("infiniband", template.infiniband),
            ("vnic_type", template.vnic_type == "direct"),
        )
        if on
    ]
    for key in chosen:
        kind, need, why = NEEDS[key]
        if provider.type != kind:
            raise ValueError(
                f"{where}: {key} is for {kind} providers; {provider.name!r} is a "
                f"{provider.type} provider: remove it"
            )
        if need == "placement_group" and template.placement == "per-launch":
            continue  # each launch gets a group of its own
        if not getattr(template, need):
            raise ValueError(
                f"{where}: {key} needs {need} ({why}): set {need}"
                + (" or placement = 'per-launch'" if need == "placement_group" else "")
            )
