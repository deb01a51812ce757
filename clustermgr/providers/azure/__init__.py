"""Azure: single VMs, each with its own NIC, in one resource group; see provider.py."""

from clustermgr.providers.azure.provider import AzureProvider

__all__ = ["AzureProvider"]
