"""Cloud directors: one per (provider, region) with burst nodes. A director serves the
software image (replicated from the head node) and an LDAP replica to its region's burst
nodes. states.py is the director state machine and its records, lifecycle.py launches,
checks, replaces and stops directors; what they serve is replicated by clustermgr.imaging
and clustermgr.ldap, which build on these states."""
