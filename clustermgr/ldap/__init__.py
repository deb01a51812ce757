"""LDAP replication to the directors: the connection, the pull from
the head's directory, the sync and the syncrepl consumer's configuration."""
