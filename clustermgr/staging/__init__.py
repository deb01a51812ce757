"""cmsub: job data staged in and out of burst regions by the user's own Slurm jobs
(docs/staging.md): spec parsing and checks, the staging area, transports (rsync, s3),
manifests, the records and the three-job chain."""
