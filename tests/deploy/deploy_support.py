"""Helpers of the deployment tests (tests/deploy/*_test.py): failing with a message, free
ports on 127.0.0.1."""

import os
import socket
import sys


def fail(msg):
    """Prints `<test>: msg` to stderr and exits 1."""
    name = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    print(f"{name}: {msg}", file=sys.stderr)
    sys.exit(1)


def free_port():
    """A TCP port of 127.0.0.1 free at the moment."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
