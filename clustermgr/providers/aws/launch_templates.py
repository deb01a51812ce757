"""The EC2 launch template a template's fleets launch from: one version per content."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from clustermgr.providers.aws.errors import SDK_ERRORS, classify
from clustermgr.providers.aws.shapes import tag_list
from clustermgr.providers.base import TAG_CLUSTER, TAG_TEMPLATE, LaunchSpec

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client


def template_version(
    ec2: EC2Client, cluster: str, spec: LaunchSpec, name: str, data: dict[str, Any], digest: str
) -> int:
    """The version holding `data`: the latest if it does, else a new one."""
    try:
        latest = ec2.describe_launch_template_versions(
            LaunchTemplateName=name, Versions=["$Latest"]
        ).get("LaunchTemplateVersions", [])
    except SDK_ERRORS as exc:
        if not classify(exc).code.startswith("InvalidLaunchTemplateName.NotFound"):
            raise
        tags = {TAG_CLUSTER: cluster, TAG_TEMPLATE: spec.template}
        request: dict[str, Any] = {
            "LaunchTemplateName": name,
            "VersionDescription": digest,
            "LaunchTemplateData": data,
            "TagSpecifications": [{"ResourceType": "launch-template", "Tags": tag_list(tags)}],
        }
        created = ec2.create_launch_template(**request)
        return int(created["LaunchTemplate"].get("LatestVersionNumber", 1))
    if latest and latest[0].get("VersionDescription") == digest:
        return int(latest[0]["VersionNumber"])
    version: dict[str, Any] = {
        "LaunchTemplateName": name,
        "VersionDescription": digest,
        "LaunchTemplateData": data,
    }
    made = ec2.create_launch_template_version(**version)
    return int(made["LaunchTemplateVersion"]["VersionNumber"])
