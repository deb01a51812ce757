"""AWS: EC2 instant fleets (RunInstances where CreateFleet is not offered); see provider.py."""

from clustermgr.providers.aws.provider import AwsProvider

__all__ = ["AwsProvider"]
