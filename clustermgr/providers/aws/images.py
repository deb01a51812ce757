"""Machine-image copy for image replication (clustermgr.providers.capabilities.MachineImages):
EC2 CopyImage into this provider's region, CreateTags, DescribeImages, through the
provider's own clients and error table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from clustermgr.providers.aws.client import AwsClients
from clustermgr.providers.aws.errors import SDK_ERRORS, provider_error
from clustermgr.providers.capabilities import ImageState

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import TagTypeDef


class AwsMachineImages:
    uploads = False  # the cloud copies it

    def __init__(self, clients: AwsClients) -> None:
        self.clients = clients

    def copy_image(
        self, source_image: str, source_region: str, name: str, description: str, token: str
    ) -> str:
        try:
            answer = self.clients.ec2().copy_image(
                SourceImageId=source_image,
                SourceRegion=source_region,
                Name=name,
                Description=description,
                ClientToken=token,
            )
        except SDK_ERRORS as exc:
            raise provider_error(exc, self.clients.name) from None
        return answer["ImageId"]

    def tag_image(self, image_id: str, tags: Mapping[str, str]) -> None:
        pairs: list[TagTypeDef] = [{"Key": k, "Value": v} for k, v in tags.items()]
        try:
            self.clients.ec2().create_tags(Resources=[image_id], Tags=pairs)
        except SDK_ERRORS as exc:
            raise provider_error(exc, self.clients.name) from None

    def image_state(self, image_id: str) -> ImageState:
        try:
            found = self.clients.ec2().describe_images(ImageIds=[image_id]).get("Images", [])
        except SDK_ERRORS as exc:
            raise provider_error(exc, self.clients.name) from None
        if not found:
            return ImageState("missing")
        reason = found[0].get("StateReason", {}).get("Message", "")
        return ImageState(str(found[0].get("State", "pending")), reason)
