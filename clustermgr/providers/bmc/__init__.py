"""On-prem power: nodes whose power a BMC switches, behind the same seam as the clouds.

`ipmi` (ipmitool, IPMI-over-LAN lanplus) and `redfish` (sushy) share everything but the
protocol: `nodes.py` (which node has which BMC, and where its password comes from),
`power.py` (power states, the driver Protocol, BMC failures), `provider.py` (launch = power
on, terminate = graceful shutdown then hard off, list = each node's power state). Only
`redfish.py` imports its SDK, so the ipmi provider needs no Python package beyond ours.
"""
