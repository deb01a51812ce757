"""Replay workload traces through the real policies."""
