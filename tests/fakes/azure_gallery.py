"""Compute Gallery image versions for the ARM fake (tests/fakes/azure_fake.py): the regions
each is replicated to, and the replication of a region added by an update.

The shapes are those of the Azure REST API reference (Compute, api-version 2024-03-03):
- "Gallery Image Versions - Get" (GET .../galleries/{g}/images/{i}/versions/{v}, with
  `$expand=ReplicationStatus` for `properties.replicationStatus`): `{id, name, location,
  tags, properties: {provisioningState, storageProfile, publishingProfile: {targetRegions:
  [{name, regionalReplicaCount, storageAccountType}]}, replicationStatus: {aggregatedState
  (Unknown | InProgress | Completed | Failed), summary: [{region, state (Unknown |
  Replicating | Completed | Failed), details, progress}]}}}`;
- "Gallery Image Versions - Update" (PATCH, a long-running operation): the body's
  `properties.publishingProfile.targetRegions` replaces the list ("this property is
  updatable"), `tags` replace the tags; the answer is the version, `provisioningState`
  `Updating` while the new regions replicate (they show `Replicating` in the summary).
- A VM whose `imageReference.id` is a version not replicated to the VM's region is refused
  with 404 `GalleryImageNotFound`, "The gallery image ... is not available in REGION
  region. Please contact image owner to replicate to this region, or change your requested
  region." (the message Azure's VM creation returns, per its troubleshooting pages).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field

from tests.fakes.http_fake import JSON, Reply, Req

Key = tuple[str, str, str]  # (gallery, image definition, version), lower case


@dataclass
class Replica:
    state: str = "Completed"  # Replicating, Completed, Failed
    polls_left: int = 0  # GETs with the status before a Replicating one completes
    details: str = ""


@dataclass
class Version:
    source_location: str
    regions: dict[str, Replica] = field(default_factory=dict)  # by lower-case region name
    tags: dict[str, str] = field(default_factory=dict)


class Galleries:
    """The fake's gallery image versions (under the fake's resource group)."""

    def __init__(self, location: str, replication_polls: int = 1) -> None:
        self.location = location
        self.replication_polls = replication_polls  # how long a new region replicates
        self.versions: dict[Key, Version] = {}
        self.updates = 0  # PATCHes accepted (a copy asked for twice is one)

    def add(self, gallery: str, image: str, version: str, regions: list[str]) -> None:
        """A version that exists and is fully replicated to `regions` (the first is its own)."""
        made = Version(regions[0], {r.lower(): Replica() for r in regions})
        self.versions[(gallery.lower(), image.lower(), version.lower())] = made

    def fail_replication(self, key: Key, region: str, details: str) -> None:
        self.versions[key].regions[region.lower()] = Replica("Failed", 0, details)

    def replicated(self, key: Key, region: str) -> bool:
        found = self.versions.get(key)
        replica = found.regions.get(region.lower()) if found else None
        return replica is not None and replica.state == "Completed"

    def exists(self, key: Key) -> bool:
        return key in self.versions

    def route(self, req: Req) -> Reply | None:
        """GET or PATCH of a version (`req.segs`: [gallery, "images", image, "versions", v]);
        None when it names no version this fake has."""
        low = [s.lower() for s in req.segs]
        if len(low) != 5 or low[1] != "images" or low[3] != "versions":
            return None
        key = (low[0], low[2], low[4])
        found = self.versions.get(key)
        if found is None:
            return None
        if req.method == "GET":
            expand = req.query.get("$expand", "").lower() == "replicationstatus"
            return Reply(200, self._view(req, found, expand))
        if req.method == "PATCH":
            self._update(found, json.loads(req.body or b"{}"))
            return Reply(200, self._view(req, found, False))
        return None

    def _update(self, found: Version, body: JSON) -> None:
        self.updates += 1
        props = body.get("properties") or {}
        wanted = (props.get("publishingProfile") or {}).get("targetRegions")
        if wanted is not None:
            names = {str(r.get("name", "")).replace(" ", "").lower() for r in wanted}
            for name in names - set(found.regions):
                found.regions[name] = Replica("Replicating", self.replication_polls)
            for name in set(found.regions) - names - {found.source_location.lower()}:
                del found.regions[name]
        if body.get("tags") is not None:
            found.tags = dict(body["tags"])

    def _view(self, req: Req, found: Version, expand: bool) -> JSON:
        replicating = any(r.state == "Replicating" for r in found.regions.values())
        props: JSON = {
            "provisioningState": "Updating" if replicating else "Succeeded",
            "storageProfile": {"osDiskImage": {"sizeInGB": 30, "hostCaching": "ReadWrite"}},
            "publishingProfile": {
                "targetRegions": [
                    {"name": name, "regionalReplicaCount": 1, "storageAccountType": "Standard_LRS"}
                    for name in found.regions
                ],
                "replicaCount": 1,
            },
        }
        if expand:
            summary = []
            for name, replica in found.regions.items():
                summary.append(
                    {
                        "region": name,
                        "state": replica.state,
                        "details": replica.details,
                        "progress": 100 if replica.state == "Completed" else 0,
                    }
                )
                if replica.state == "Replicating":
                    replica.polls_left -= 1
                    if replica.polls_left <= 0:
                        replica.state = "Completed"
            states = {s["state"] for s in summary}
            aggregated = (
                "Failed" if "Failed" in states else "InProgress" if replicating else "Completed"
            )
            props["replicationStatus"] = {"aggregatedState": aggregated, "summary": summary}
        return {
            "id": req.path,
            "name": req.segs[4],
            "type": "Microsoft.Compute/galleries/images/versions",
            "location": found.source_location,
            "tags": copy.deepcopy(found.tags),
            "properties": props,
        }
