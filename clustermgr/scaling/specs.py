"""What a launch asks a cloud for: the template's settings, the user-data with slurmctld's
version (from the cycle's snapshot) and a one-time munge-key token for the request.

A template whose `image` names an image definition boots that image's machine image in its
region with the image's user-data rendered for the region (`images`: the snapshot's, read by
`clustermgr.imaging.launch_images.region_images`); any other template boots its `image` as
a raw machine-image id with the plain boot script.

Built by the engine from the configuration and handed to the actor, so act reads nothing
but the view and the plan (the token is a secret: it lives only in the user-data).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Literal

from clustermgr.config import Settings
from clustermgr.db.ownership import LaunchIdentity
from clustermgr.imaging.launch_images import RegionImage, launch_image, launch_user_data
from clustermgr.mungekey import launch_key_fetch
from clustermgr.nodes.bootstrap import KeyFetch, render_user_data
from clustermgr.providers.base import LaunchSpec
from clustermgr.providers.reservations import reservation_target
from clustermgr.scaling.clamp import LaunchOrder


class LaunchSpecs:
    def __init__(
        self,
        settings: Settings,
        clock: Callable[[], datetime],
        controller_version: str = "",
        images: Mapping[str, RegionImage] | None = None,
    ):
        self.settings = settings
        self.clock = clock
        self.controller_version = controller_version
        self.images = images or {}

    def __call__(self, order: LaunchOrder) -> LaunchSpec:
        """ImageUnavailable when the template's image is not in its region yet."""
        template = self.settings.template(order.template)
        found = self.images.get(template.name)
        image = template.image if found is None else launch_image(found)
        key = self.key_fetch(order)
        if found is None:
            user_data = render_user_data(self.settings, template, self.controller_version, key)
        else:
            provider_type = self.settings.provider(template.provider).type
            user_data = launch_user_data(
                self.settings, found, provider_type, self.controller_version, key
            )
        identity = order.stored or self.identity(order)
        return LaunchSpec(
            template=template.name,
            instance_types=tuple(template.instance_types),
            image=image,
            node_names=order.nodes,
            zones=tuple(template.zones),
            subnets=tuple(template.subnets),
            security_groups=tuple(template.security_groups),
            market="spot" if order.market == "spot" else "on-demand",
            max_spot_price=template.max_spot_price,
            user_data=user_data,
            tags={},
            instance_profile=template.instance_profile,
            placement_group=identity.placement_group,
            key_name=template.key_name,
            network=template.network,
            root_volume_gb=template.volume_size_gb,
            reservation=reservation_target(template),
            fabric=template.fabric,
            launch_group=_placement_policy(identity.launch_group),
            all_or_nothing=order.all_or_nothing,
            client_token=identity.client_token,
            resume=order.resume,
        )

    def identity(self, order: LaunchOrder) -> LaunchIdentity:
        """What the database stores with the order's request id before the launch call
        (the template's placement as configured now), for a relaunch to replay."""
        template = self.settings.template(order.template)
        per_launch = template.placement == "per-launch"
        return LaunchIdentity(
            nodes=order.nodes,
            jobs=order.jobs,
            market=order.market,
            all_or_nothing=order.all_or_nothing,
            placement_group=template.placement_group,
            launch_group=(template.placement_policy or "affinity") if per_launch else None,
            client_token=order.request_id,
        )

    def key_fetch(self, order: LaunchOrder) -> KeyFetch:
        """A one-time munge-key token for this request, redeemable by each of its instances
        within the template's boot window (clustermgr.mungekey)."""
        template = self.settings.template(order.template)
        return launch_key_fetch(
            self.settings, order.request_id, len(order.nodes), template.boot_timeout_s, self.clock()
        )


def _placement_policy(stored: str | None) -> Literal["affinity", "soft-affinity"] | None:
    """A stored per-launch policy, checked (a database row is input like any other)."""
    if stored == "affinity":
        return "affinity"
    if stored == "soft-affinity":
        return "soft-affinity"
    return None
