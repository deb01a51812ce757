"""The cm-scale daemon's runtime: the scheduler of its jobs, leader
election, systemd notify and watchdog, the state directory, metrics, director syncs."""
