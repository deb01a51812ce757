"""Azure: single VMs, each with its own NIC, in one resource group; see provider.py.

`kind.py` declares the type (the `clustermgr.providers` entry point) without importing the
SDK; the provider class is in provider.py, imported only when a provider is made.
"""
