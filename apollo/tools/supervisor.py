"""Keeps a local cluster's processes running: `python -m apollo.tools.supervisor --cluster DIR`.

`apollo cluster up` starts it, detached, once every process listens; it writes itself into
DIR/cluster.json ("supervisor": pid, start) and from then on checks every process 10 times a
second. One that died (killed, crashed, out of memory) is started again at its address after a
backoff (``Backoff``), its new pid, start time and restart count written into cluster.json (in
one step: readers never see half a file); `apollo cluster status` shows them. Work survives:
a restarted RM re-admits its stored jobs, a job whose JM host died moves to another host whose
JM adopts its attempts, and a restarted PN process heartbeats again (docs/control-plane.md).

`apollo cluster restart NAME` asks it by a file, DIR/restart-NAME: it stops that process and
starts it at once (so the two never race). `apollo cluster down` stops it (SIGTERM) first.
Its log: DIR/supervisor.log, one line per death and per restart (with the time to ready).
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from pathlib import Path

from apollo.tools.livecluster import (ClusterError, _start_ticks, alive, process_name, read_info, spawn,
                                      started, write_info)

CHECK_EVERY_S = 0.1
START_TIMEOUT_S = 30.0      # a restarted process not listening by then is killed and tried again later
STOP_GRACE_S = 5.0          # a hand restart: SIGTERM, then SIGKILL after this

log = logging.getLogger("apollo.supervisor")


class Backoff:
    """How long to wait before starting a process that died again: ``first_s``, doubling with each
    death that comes less than ``stable_s`` after its start, up to ``max_s``; a process that
    stayed up ``stable_s`` starts over at ``first_s``. (A crash loop costs little; a rare crash
    is repaired fast.)"""

    def __init__(self, first_s: float = 0.5, max_s: float = 30.0, stable_s: float = 10.0) -> None:
        self.first_s, self.max_s, self.stable_s = first_s, max_s, stable_s
        self._next = first_s

    def after_death(self, up_for_s: float) -> float:
        if up_for_s >= self.stable_s:
            self._next = self.first_s
        delay = self._next
        self._next = min(self.max_s, self._next * 2)
        return delay


class Watched:
    """One process under watch: ``state`` "up" (running), "waiting" (dead, to start at ``due``)
    or "starting" (started, not listening yet; given up on at ``due``)."""

    def __init__(self, entry: dict, since: float) -> None:
        self.entry = entry              # its entry in cluster.json (pid, ticks, started_at, restarts)
        self.name = process_name(entry["role"], entry["index"])
        self.backoff = Backoff()
        self.state = "up"
        self.since = since              # when it was last started (monotonic)
        self.due = 0.0
        self.asked_at = 0.0             # a restart asked for by hand (0: none)


class Supervisor:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.info = read_info(folder)
        now, wall = time.monotonic(), time.time()
        self.watched = [Watched(p, now - max(0.0, wall - p.get("started_at", wall))) for p in self.info["processes"]]
        self.children: set[int] = set()     # pids this process started (reaped here)
        self.stopping = False

    # ---- the loop --------------------------------------------------------------------------
    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._stop)
        self.info["supervisor"] = {"pid": os.getpid(), "ticks": _start_ticks(os.getpid()), "started_at": time.time()}
        write_info(self.folder, self.info)
        log.info("watching %s", ", ".join(w.name for w in self.watched))
        while not self.stopping:
            if not (self.folder / "cluster.json").exists():
                log.info("%s/cluster.json is gone: nothing left to watch", self.folder)
                break
            self.step(time.monotonic())
            time.sleep(CHECK_EVERY_S)
        log.info("stopped (the processes keep running)")
        return 0

    def _stop(self, signum, frame) -> None:
        self.stopping = True

    def step(self, now: float) -> None:
        self._reap()
        for w in self.watched:
            if (self.folder / f"restart-{w.name}").exists():
                (self.folder / f"restart-{w.name}").unlink(missing_ok=True)
                self._restart_by_hand(w, now)
            elif w.state == "up" and not self._running(w):
                delay = w.backoff.after_death(now - w.since)
                log.info("%s (pid %s) died after %.1f s up; starting it again in %.1f s",
                         w.name, w.entry.get("pid"), now - w.since, delay)
                w.state, w.due = "waiting", now + delay
            elif w.state == "waiting" and now >= w.due:
                self._start(w, now)
            elif w.state == "starting":
                self._check_start(w, now)

    # ---- one process -----------------------------------------------------------------------
    def _running(self, w: Watched) -> bool:
        return alive(w.entry)           # (a child of ours that exited is reaped on the way)

    def _start(self, w: Watched, now: float) -> None:
        child = spawn(self.folder, w.entry["role"], w.entry["index"])
        child.returncode = 0            # reaped by _reap / _alive, not by the Popen object
        self.children.add(child.pid)
        started(w.entry, child.pid)
        w.entry["restarts"] = w.entry.get("restarts", 0) + 1
        write_info(self.folder, self.info)
        w.state, w.since, w.due = "starting", now, now + START_TIMEOUT_S

    def _check_start(self, w: Watched, now: float) -> None:
        if (self.folder / f"ready-{w.entry['role']}{w.entry['index']}").exists():
            w.state = "up"
            log.info("%s restarted: pid %d, listening %.2f s after its start%s", w.name, w.entry["pid"], now - w.since,
                     f" ({now - w.asked_at:.2f} s after the request)" if w.asked_at else "")
            w.asked_at = 0.0
        elif not self._running(w) or now > w.due:
            self._kill(w)
            delay = w.backoff.after_death(now - w.since)
            log.warning("%s (pid %s) %s; trying again in %.1f s (see %s/%s.log)", w.name, w.entry["pid"],
                        "exited while starting" if now <= w.due else f"not listening {START_TIMEOUT_S:.0f} s after "
                        "its start", delay, self.folder, w.name)
            w.state, w.due = "waiting", now + delay

    def _restart_by_hand(self, w: Watched, now: float) -> None:
        log.info("%s: restart asked for by hand", w.name)
        self._kill(w, STOP_GRACE_S)
        w.asked_at = now
        self._start(w, time.monotonic())

    def _kill(self, w: Watched, grace_s: float = 0.0) -> None:
        """Stop w's process and wait until it is gone: SIGTERM first if ``grace_s`` (a restart by
        hand: it closes cleanly), SIGKILL once that has passed."""
        signals = ([(signal.SIGTERM, grace_s)] if grace_s > 0 else []) + [(signal.SIGKILL, 5.0)]
        for sig, wait_s in signals:
            if not self._running(w):
                return
            try:
                os.killpg(w.entry["pid"], sig)
            except ProcessLookupError:
                return
            end = time.monotonic() + wait_s
            while self._running(w) and time.monotonic() < end:
                time.sleep(0.02)

    def _reap(self) -> None:
        """Collect every child of ours that exited (no zombies), whichever process it was."""
        for pid in list(self.children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                self.children.discard(pid)
                continue
            if done:
                self.children.discard(pid)
                code = os.waitstatus_to_exitcode(status)
                log.info("pid %d exited %s", pid, f"with code {code}" if code >= 0 else
                         f"on {signal.Signals(-code).name}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="apollo.tools.supervisor")
    p.add_argument("--cluster", required=True)
    a = p.parse_args(argv)
    folder = Path(a.cluster)
    logging.basicConfig(filename=str(folder / "supervisor.log"), level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
    try:
        return Supervisor(folder).run()
    except ClusterError as e:
        log.error("%s", e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
