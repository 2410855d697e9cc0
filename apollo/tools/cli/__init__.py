"""The `apollo` command line: one parser per command, registered by the module that runs it.

- cli.offline: simulate, chaos, bench, demo (this machine alone);
- cli.cluster: cluster up|status|down, node join, dashboard;
- cli.jobs: submit, jobs, cancel, queues, replay (a live cluster's jobs);
- cli.tasks: job and logs (one job's tasks: outcomes, where their output is, that output).

Every error a user can act on ends in one line on stderr and a non-zero exit: 2 for a bad
invocation (a value out of range, a file that does not parse), 1 for a cluster that cannot
do what was asked (down, unreachable, no such job).
"""
from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from pathlib import Path

from apollo.core.spec import SpecError
from rm.queues import QueueError

from . import cluster, jobs, offline, tasks
from .options import Parser

COMMAND_MODULES = (offline, cluster, jobs, tasks)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="apollo", description="Apollo-style decentralized cluster scheduler")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND", parser_class=Parser)
    for module in COMMAND_MODULES:
        module.register(sub)
    return p


def _cluster_or_error(args: argparse.Namespace) -> None:
    """A command on a live cluster: a clear ClusterError if its folder holds none, or the cluster
    there is not running; the client's connection warnings are left out (the client says what
    went wrong itself)."""
    import logging

    from apollo.tools.livecluster import ClusterError, read_info, running
    folder = Path(args.cluster).expanduser()
    try:
        info = read_info(folder)
    except ValueError as e:
        raise ClusterError(f"{folder / 'cluster.json'} is not a cluster description ({e})") from None
    if not isinstance(info, dict) or "rm" not in info or "processes" not in info:
        raise ClusterError(f"{folder / 'cluster.json'} is not a cluster description (no RM address)")
    up, why = running(folder, info)
    if not up:
        raise ClusterDown(f"the cluster in {folder} is not running ({why}); "
                          f"start it with `apollo cluster up --cluster {folder}`")
    logging.getLogger("apollo.transport").setLevel(logging.ERROR)


class ClusterDown(RuntimeError):
    pass


def _quiet_closed_pipe() -> int:
    """stdout's reader went away (`apollo jobs | head -1`): end quietly, as `cat` would.
    Later writes, and the interpreter's own flush at exit, go to /dev/null."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(list(sys.argv[1:] if argv is None else argv), embedded=argv is not None)
    except BrokenPipeError:
        return _quiet_closed_pipe()
    except KeyboardInterrupt:
        print("apollo: interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str], embedded: bool = False) -> int:
    parser = build_parser()
    if argv[:1] == ["bench"] and len(argv) > 1 and not argv[1].startswith("-"):
        # `apollo bench NAME ...`: the benchmark's own parser takes the rest (its --help included)
        args = argparse.Namespace(cmd="bench", name=argv[1])
        return offline._bench(args, argv[2:])
    args = parser.parse_args(argv)
    args.argv = argv               # (a command that runs again compiled: apollo.tools.native.relaunch)
    args.embedded = embedded       # (called with an argv by a program, which exec must not replace)
    if args.cmd == "bench":        # `apollo bench` with no name
        parser.parse_args(["bench", "--help"])
    try:
        if getattr(args, "on_cluster", False):
            try:
                _cluster_or_error(args)
            except ClusterDown as e:
                if args.cmd != "jobs":
                    raise
                # the stored jobs can still be listed; say the cluster is down, and exit non-zero
                code = args.run(args)
                print(f"apollo jobs: {e}", file=sys.stderr)
                return code or 1
        return args.run(args)
    except (SpecError, QueueError) as e:
        print(f"apollo {args.cmd}: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"apollo {args.cmd}: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:      # ClusterError and friends: a clear one-line reason
        print(f"apollo {args.cmd}: {e}", file=sys.stderr)
        return 1
    except sqlite3.Error as e:     # the RM's store, read while the RM rewrites it, or damaged
        print(f"apollo {args.cmd}: cannot read {Path(args.cluster).expanduser() / 'jobs.db'}: {e}", file=sys.stderr)
        return 1
