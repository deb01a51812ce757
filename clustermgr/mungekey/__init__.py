"""The munge key to root on a booting node of this cluster, and to no one else.

cm-scale (root, on the head, which every burst node reaches for slurmctld) serves the key on
a TLS listener (`[slurm] munge_key_port`). Each launch request gets a one-time token
derived from the munge key and the request id (grants.py: never stored), rendered into
that request's user-data with the server's URL and the SHA-256 pin of its public key
(identity.py, facts.py). The node's boot script (root, before slurmd starts, so before any
job can run) redeems the token once from its own address (server.py): the key is handed out
only to an address that is the private address of a burst node of that request, that has
not redeemed yet (the database's `munge_key_redemptions`, shared by both heads), within its
boot window. docs/security.md, "The munge key".
"""

from clustermgr.mungekey.facts import launch_key_fetch, server_url
from clustermgr.mungekey.grants import redeem
from clustermgr.mungekey.identity import IdentityError, ensure_identity

__all__ = [
    "IdentityError",
    "ensure_identity",
    "launch_key_fetch",
    "redeem",
    "server_url",
]
