"""On-prem power: nodes whose power a BMC switches, behind the same seam as the clouds.

`ipmi` (ipmitool, IPMI-over-LAN lanplus) and `redfish` (sushy) share everything but the
protocol, split like every provider package: `kind.py` (the two kinds and their options:
the nodes and their BMCs, timeouts, each protocol's keys), `shapes.py` (which node has which
BMC and where its password comes from, power states, a node as an instance: pure data),
`errors.py` (BMC failures, classified), `client.py` (the driver Protocol, reading a
password), `provider.py` (launch = power on, terminate = graceful shutdown then hard off,
list = each node's power state). `ipmi.py` and `redfish.py` are each protocol's driver
(its client and its own error table) and provider class; only `redfish.py` imports its SDK,
so the ipmi provider needs no Python package beyond ours.
"""
