"""Services the tests start for themselves (a fresh machine runs none of them)."""
