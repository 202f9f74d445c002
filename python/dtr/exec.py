"""``python -m dtr.exec``: dtr-exec for Python programs.

    python -m dtr.exec -n 4 p2p.py              # 4 SPMD ranks of `python3 p2p.py`
    python -m dtr.exec --workers 2 master.py    # a master program against 2 local workers
    mpirun -np 3 python -m dtr.exec --launched master.py   # a master and 2 workers, one job

Takes dtr-exec's options (``python -m dtr.exec --help``); a PROGRAM ending in .py runs
with this interpreter, and --workers and --launched get the package's dtr-worker. The exit
status is dtr-exec's (the program's, or non-zero naming the rank that failed).
"""

import os
import sys

from ._paths import find_program

# dtr-exec's options that take a value (launcher/main.cpp).
_VALUE_OPTIONS = {"-n", "--nproc", "--workers", "--master-addr", "--master-port", "--grace-ms",
                  "--timeout", "--worker-bin", "--worker-log-level", "--worker-start-timeout-ms"}


def command(argv):
    """The dtr-exec command line for `argv` (this module's arguments)."""
    args = list(argv)
    program = None
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            program = i + 1 if i + 1 < len(args) else None
            break
        if a in _VALUE_OPTIONS:
            i += 2
            continue
        if a.startswith("-"):
            i += 1
            continue
        program = i
        break
    if program is not None and args[program].endswith(".py"):
        args.insert(program, sys.executable)
    # --workers starts dtr-workers, and so does --launched on every rank but 0.
    uses_workers = any(a in ("--workers", "--launched") or a.startswith("--workers=")
                       for a in args[:program])
    has_worker_bin = any(a.startswith("--worker-bin") for a in args[:program])
    if uses_workers and not has_worker_bin:
        args = ["--worker-bin", find_program("dtr-worker")] + args
    return [find_program("dtr-exec")] + args


def main(argv=None):
    cmd = command(sys.argv[1:] if argv is None else argv)
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    main()
