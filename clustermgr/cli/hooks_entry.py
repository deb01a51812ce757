"""Entry points Slurm runs as ResumeProgram/SuspendProgram/ResumeFailProgram.

Slurm calls a program with the hostlist as its only argument, so each hook is its own
small executable. Slurm runs one per power-save event and waits for it (budget: 2x a bare
`python -c pass`), so that call goes straight to `workload.hooks.record` without click,
logging or the CLI. Anything else (no argument, options, --help) is handed to
`clustermgr slurm <kind>`, which records the same request and answers the same way.
"""

from __future__ import annotations

import os
import sys


def _hook(kind: str) -> None:
    args = sys.argv[1:]
    if len(args) != 1 or args[0].startswith("-"):
        from clustermgr.cli.main import main

        main(["slurm", kind, *args])
        return
    from clustermgr.cli.paths import config_path
    from clustermgr.core.errors import ClusterMgrError
    from clustermgr.workload.hooks import record

    try:
        record(kind, args[0], config_path(None), os.environ.get("SLURM_RESUME_FILE"))
    except ClusterMgrError as exc:
        from clustermgr.core.logsafe import say

        say(f"clustermgr: error: {exc}", err=True)  # as `clustermgr` prints it
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        from clustermgr.core.logsafe import say

        say("interrupted", err=True)
        sys.exit(130)
    sys.exit(0)


def resume() -> None:
    _hook("resume")


def suspend() -> None:
    _hook("suspend")


def resume_fail() -> None:
    _hook("resume-fail")


def health_check() -> None:
    from clustermgr.cli.main import main

    main(["health-check", *sys.argv[1:]])
