"""clustermgr: burst an on-prem Slurm GPU cluster into AWS, Azure and OpenStack."""

__version__ = "0.1.0"
