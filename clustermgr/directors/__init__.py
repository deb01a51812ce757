"""Cloud directors: one per (provider, region) with burst nodes. A director serves the
software image (replicated from the head node) and an LDAP replica to its region's burst
nodes. state.py is the director state machine and its records; the lifecycle, image and
LDAP replication modules build on it."""
