"""Entry points Slurm runs as ResumeProgram/SuspendProgram/ResumeFailProgram.

Slurm calls a program with the hostlist as its only argument, so each hook is its own
small executable that runs `clustermgr slurm <kind> HOSTLIST`.
"""

from __future__ import annotations

import sys

from clustermgr.cli.main import main


def resume() -> None:
    main(["slurm", "resume", *sys.argv[1:]])


def suspend() -> None:
    main(["slurm", "suspend", *sys.argv[1:]])


def resume_fail() -> None:
    main(["slurm", "resume-fail", *sys.argv[1:]])


def health_check() -> None:
    main(["health-check", *sys.argv[1:]])
