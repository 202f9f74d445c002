"""``python -m dtr``: Python's own REPL with dtr imported and a session running, against
two local dtr-worker daemons (stopped on exit) or running workers (--connect), as
dtr-repl does.

    $ python -m dtr
    >>> x = randn(4, 4)
    >>> with node(1): y = ones(4)
    >>> (x * 2).sum(1, keepdim=True)

Input that is not a terminal (a pipe, a file) runs as a script, as ``python -`` runs it: no
banner, and the first uncaught exception prints its traceback and ends the run with exit
status 1.
"""

import argparse
import code
import sys
import traceback

import dtr


def _above_zero(kind):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}")
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a number above 0, got {text}")
        return value
    return parse


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m dtr", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=_above_zero(int), default=2,
                        help="local dtr-worker daemons to start (default 2)")
    parser.add_argument("--connect", metavar="ENDPOINTS",
                        help="comma-separated endpoints of running workers instead")
    parser.add_argument("--connect-timeout", type=_above_zero(float), default=60.0,
                        metavar="SECONDS", help="bound on reaching the workers (default 60)")
    parser.add_argument("--log-level", default="warn", help="--log-level of local workers")
    parser.add_argument("-q", "--quiet", action="store_true", help="no banner")
    args = parser.parse_args(argv)
    try:
        if args.connect:
            dtr.init_master_worker(args.connect, connect_timeout=args.connect_timeout)
        else:
            dtr.init_master_worker(local_workers=args.workers, log_level=args.log_level,
                                   connect_timeout=args.connect_timeout)
    except dtr.Error as e:  # a bad endpoint, workers that cannot be reached: as dtr-repl
        print(f"python -m dtr: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    namespace = {"dtr": dtr, "__name__": "__console__"}
    namespace.update({k: getattr(dtr, k) for k in dtr.__all__})
    try:
        import readline
        import rlcompleter  # noqa: F401  (tab completion of names)

        readline.set_completer(rlcompleter.Completer(namespace).complete)
        readline.parse_and_bind("tab: complete")
    except ImportError:
        pass
    try:
        if not sys.stdin.isatty():
            return _run_script(sys.stdin.read(), namespace)
        where = ", ".join(dtr.local_worker_endpoints()) or args.connect
        banner = (f"dtr {dtr.__version__}: {dtr.node_count()} nodes ({where}); "
                  "dtr's names are imported (zeros, randn, node, ...). Ctrl-D quits.")
        code.interact(banner="" if args.quiet else banner, local=namespace, exitmsg="")
    finally:
        dtr.shutdown_master_worker()
    return 0


def _run_script(source, namespace):
    """Runs piped input as one script: 0 when it ends, 1 (and the traceback) at the first
    uncaught exception, as ``python -`` does; SystemExit passes through."""
    try:
        exec(compile(source, "<stdin>", "exec"), namespace)
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
