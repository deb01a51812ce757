"""Glance (Image API v2) for the OpenStack fake (tests/fakes/openstack_fake.py): one `Glance`
per region, each an image store with data.

The shapes follow the Image API v2 reference (https://docs.openstack.org/api-ref/image/v2/):
- Images: "Create image" (POST /v2/images, 201; the new image is `queued`, its `size`,
  `checksum`, `os_hash_algo` and `os_hash_value` null; keys that are not image attributes
  are the image's own properties, shown as top-level keys), "Show image", "List images"
  (`name` and `status` filters; {"images": [...], "first", "schema"}), "Update image"
  (PATCH, `application/openstack-images-v2.1-json-patch`, add/replace/remove ops, 200),
  "Delete image" (204; 404 when unknown);
- Image data: "Upload binary image data" (PUT /v2/images/{id}/file with
  `application/octet-stream`, 204, the image `active` after it; 409 unless it is queued; 413
  over the storage quota), "Download binary image data" (GET /v2/images/{id}/file, 200 with
  `Content-MD5`, 204 when the image has no data);
- the statuses queued -> saving -> active (killed, deactivated, deleted: not made here).
Seen in Debian 12's glance 25 (Zed): api/v2/image_data.py (`_restore` sets a failed upload's
image back to `queued`; the 413 "Image exceeds the storage quota: The size of the data N will
exceed the limit. M bytes remaining."), common/config.py (`hashing_algorithm` sha512 gives
`os_hash_algo`/`os_hash_value`; `checksum` is the MD5), and webob's JSON error body
{"code": "413 Request Entity Too Large", "title": ..., "message": ...}.
"""

from __future__ import annotations

import copy
import hashlib
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.fakes.http_fake import JSON, Reply, Req

HASH_ALGO = "sha512"  # glance's default hashing_algorithm
ATTRIBUTES = ("name", "disk_format", "container_format", "visibility", "min_disk", "min_ram")
READ_ONLY = ("id", "status", "size", "checksum", "os_hash_algo", "os_hash_value", "file", "self")
TITLES = {404: "Not Found", 409: "Conflict", 413: "Request Entity Too Large", 400: "Bad Request"}
QUOTA_MESSAGE = (
    "Image exceeds the storage quota: The size of the data {size} will exceed the limit. "
    "{remaining} bytes remaining."
)


class GlanceError(Exception):
    """An answer with webob's JSON error body, as glance-api sends it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def reply(self) -> Reply:
        title = TITLES.get(self.status, "Error")
        body = {"code": f"{self.status} {title}", "title": title, "message": self.message}
        return Reply(self.status, body)


@dataclass
class Glance:
    """One region's images. `quota_bytes`: the project's storage quota (None: none);
    `corrupt_uploads`: the next N uploads are stored with one byte changed (a store that
    damages data), so the stored image's hashes are not the bytes sent."""

    project_id: str
    images: dict[str, JSON] = field(default_factory=dict)  # by id, with the data in "_data"
    quota_bytes: int | None = None
    corrupt_uploads: int = 0

    def seed(self, name: str, data: bytes, image_id: str | None = None) -> str:
        """An active image holding `data` (as an admin's upload leaves it)."""
        image = self._new({"name": name, "disk_format": "qcow2", "container_format": "bare"})
        if image_id is not None:
            image["id"] = image_id
        self._store(image, data)
        image["visibility"] = "public"
        self.images[image["id"]] = image
        return str(image["id"])

    def active(self) -> dict[str, str]:
        """name -> id of every active image (what Nova can boot)."""
        return {i["name"]: i["id"] for i in self.images.values() if i["status"] == "active"}

    def named(self, name: str) -> list[JSON]:
        return [self.view(i) for i in self.images.values() if i["name"] == name]

    def data(self, image_id: str) -> bytes | None:
        data: bytes | None = self.images[image_id]["_data"]
        return data

    # ----------------------------------------------------------------- requests

    def route(self, req: Req) -> Reply:
        """A request under the endpoint's /v2."""
        try:
            return self._route(req, req.segs[2:])
        except GlanceError as err:
            return err.reply()

    def _route(self, req: Req, rest: list[str]) -> Reply:
        if not rest or rest[0] != "images":
            raise GlanceError(404, f"no image route {req.path}")
        if len(rest) == 1:
            if req.method == "POST":
                return self._create(req)
            if req.method == "GET":
                return self._list(req)
        image = self._find(rest[1]) if len(rest) > 1 else None
        if image is None:
            raise GlanceError(404, f"No image found with ID {rest[1] if len(rest) > 1 else ''}")
        if len(rest) == 2:
            if req.method == "GET":
                return Reply(200, self.view(image))
            if req.method == "PATCH":
                return self._patch(req, image)
            if req.method == "DELETE":
                del self.images[image["id"]]
                return Reply(204, None)
        if rest[2:] == ["file"] and req.method == "PUT":
            return self._upload(req, image)
        if rest[2:] == ["file"] and req.method == "GET":
            if image["_data"] is None:
                return Reply(204, None)
            return Reply(200, image["_data"], {"Content-MD5": image["checksum"]})
        raise GlanceError(404, f"no image route {req.method} {req.path}")

    def _find(self, image_id: str) -> JSON | None:
        return self.images.get(image_id)

    def _new(self, body: JSON) -> JSON:
        now = _now()
        image: JSON = {
            "id": str(body.get("id") or uuid.uuid4()),
            "name": body.get("name"),
            "status": "queued",
            "visibility": body.get("visibility") or "shared",
            "disk_format": body.get("disk_format"),
            "container_format": body.get("container_format"),
            "min_disk": int(body.get("min_disk") or 0),
            "min_ram": int(body.get("min_ram") or 0),
            "protected": bool(body.get("protected", False)),
            "tags": list(body.get("tags") or []),
            "size": None,
            "checksum": None,
            "os_hash_algo": None,
            "os_hash_value": None,
            "created_at": now,
            "updated_at": now,
            "_data": None,
            "_properties": {},
        }
        known = {*ATTRIBUTES, "id", "protected", "tags"}
        image["_properties"] = {k: str(v) for k, v in body.items() if k not in known}
        return image

    def _create(self, req: Req) -> Reply:
        body = _json(req.body)
        if not isinstance(body, dict):
            raise GlanceError(400, "Malformed request body")
        image = self._new(body)
        if image["id"] in self.images:
            raise GlanceError(409, f"Image with identifier {image['id']} already exists!")
        self.images[image["id"]] = image
        return Reply(201, self.view(image))

    def _list(self, req: Req) -> Reply:
        found = [self.view(i) for i in self.images.values()]
        for key in ("name", "status", "id"):
            if key in req.query:
                found = [i for i in found if i[key] == req.query[key]]
        return Reply(200, {"images": found, "first": "/v2/images", "schema": "/v2/schemas/images"})

    def _patch(self, req: Req, image: JSON) -> Reply:
        ops = _json(req.body)
        if not isinstance(ops, list):
            raise GlanceError(400, "Malformed JSON-patch body")
        for op in ops:
            key = str(op.get("path", "")).lstrip("/")
            if key in READ_ONLY:
                raise GlanceError(403, f"Attribute '{key}' is read-only.")
            target = image if key in (*ATTRIBUTES, "tags", "protected") else image["_properties"]
            if op.get("op") in ("add", "replace"):
                target[key] = op.get("value") if target is image else str(op.get("value"))
            elif op.get("op") == "remove":
                target.pop(key, None)
        image["updated_at"] = _now()
        return Reply(200, self.view(image))

    def _upload(self, req: Req, image: JSON) -> Reply:
        if image["status"] != "queued":
            raise GlanceError(
                409, f"Image status transition from {image['status']} to saving is not allowed"
            )
        if self.quota_bytes is not None:
            used = sum(i["size"] or 0 for i in self.images.values())
            if used + len(req.body) > self.quota_bytes:
                # the image is put back to queued (image_data.py `_restore`)
                remaining = max(0, self.quota_bytes - used)
                raise GlanceError(
                    413, QUOTA_MESSAGE.format(size=len(req.body), remaining=remaining)
                )
        data = req.body
        if self.corrupt_uploads > 0 and data:
            self.corrupt_uploads -= 1
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        self._store(image, data)
        return Reply(204, None)

    def _store(self, image: JSON, data: bytes) -> None:
        image["_data"] = data
        image["size"] = len(data)
        image["checksum"] = hashlib.md5(data, usedforsecurity=False).hexdigest()
        image["os_hash_algo"] = HASH_ALGO
        image["os_hash_value"] = hashlib.new(HASH_ALGO, data).hexdigest()
        image["status"] = "active"
        image["updated_at"] = _now()

    def view(self, image: JSON) -> JSON:
        shown = {k: copy.deepcopy(v) for k, v in image.items() if not k.startswith("_")}
        shown.update(image["_properties"])
        shown.update(
            {
                "virtual_size": None,
                "os_hidden": False,
                "owner": self.project_id,
                "self": f"/v2/images/{image['id']}",
                "file": f"/v2/images/{image['id']}/file",
                "schema": "/v2/schemas/image",
            }
        )
        return shown


def _json(body: bytes) -> Any:
    try:
        return json.loads(body or b"{}")
    except ValueError:
        raise GlanceError(400, "Malformed request body") from None


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
