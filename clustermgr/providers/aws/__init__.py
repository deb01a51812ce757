"""AWS: EC2 instant fleets (RunInstances where CreateFleet is not offered); see provider.py.

`kind.py` declares the type (the `clustermgr.providers` entry point) without importing the
SDK; the provider class is in provider.py, imported only when a provider is made.
"""
