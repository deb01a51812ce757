"""Labs that start real services on this machine as root (slurmctld, munged, network
namespaces) for the tests, the benchmarks and `make demo`. They live in the repository,
not in the installed package: run them from a checkout (`python -m tests.labs.demo`)."""
