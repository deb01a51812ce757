"""OpenStack: Nova servers in one region of one clouds.yaml cloud; see provider.py."""

from clustermgr.providers.openstack.provider import OpenStackProvider

__all__ = ["OpenStackProvider"]
