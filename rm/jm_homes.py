"""Where each job's JM lives: the JM hosts alive, the job -> host homes, and failover.

A JM host reports every host_report_s (HostReport, rm/host_reports.py); one silent for
host_dead_after_s is dead, and each of its admitted jobs moves to the live host with the
fewest jobs, as a new generation whose JM adopts what the PNs still run of it. Only a host
heard from can be declared dead (a restarted RM has heard of all of them: they ran its jobs
before).
"""
from __future__ import annotations

from apollo.core.effects import Log, Persist

from .jobs import JobEntry
from .token_messages import TokenMessages


class JmHomes:
    def __init__(self, jm_hosts: tuple[str, ...], host_dead_after_s: float, jobs: dict[int, JobEntry],
                 messages: TokenMessages) -> None:
        self.jm_hosts = jm_hosts
        self.host_dead_after_s = host_dead_after_s
        self.jobs = jobs
        self.messages = messages
        # when each host last reported (all presumed alive at start), and which are alive
        self.host_seen: dict[str, float] = {h: 0.0 for h in jm_hosts}
        self.heard: set[str] = set()
        self.hosts_alive: list[str] = list(jm_hosts)
        self._host_jobs: dict[str, int] = {}   # JM host -> live jobs homed there (home() keeps it)
        self._last_pick = ""                    # the host pick_host named last

    def restarted(self, now: float, boots: int) -> None:
        """The RM (re)started at ``now``, its ``boots``-th start (0: a store never used): every
        host is given host_dead_after_s from now to report."""
        self.host_seen = {h: now for h in self.host_seen}
        if boots:
            self.heard = set(self.host_seen)

    def heard_from(self, h: str, now: float) -> list:
        """Host ``h`` reported: it is alive (back, if it was dead)."""
        self.host_seen[h] = now
        self.heard.add(h)
        if h in self.hosts_alive:
            return []
        self.hosts_alive.append(h)
        self.hosts_alive.sort()
        return [Log("host_up", (h, now))]

    def pick_host(self) -> str:
        """The live JM host with the fewest jobs (the first listed, of equals), unless the host
        picked last has at most one job more: load goes where there is least (a round-robin
        piles long jobs up by chance), and a quiet cluster keeps using one host, whose process
        is the one running and warm (on a 2-core machine, alternating two hosts cost a 1-task
        job's round trip ~0.1-0.3 ms). The slack of one job is for the race a quiet cluster runs
        on every job: a submitter told its job is done submits the next, and that SubmitJob
        may reach the RM before the host's JobDone does, while the host still counts one job."""
        hosts = self.hosts_alive or list(self.jm_hosts)
        load = self._host_jobs
        pick = min(hosts, key=lambda h: load.get(h, 0))
        last = self._last_pick
        if last != pick and last in hosts and load.get(last, 0) <= load.get(pick, 0) + 1:
            return last
        self._last_pick = pick
        return pick

    def homed_at(self, host: str) -> int:
        """Live jobs homed at ``host``."""
        return self._host_jobs.get(host, 0)

    def home(self, e: JobEntry, host: str) -> None:
        """``e`` is (now) homed at ``host`` ("": nowhere, as it ends)."""
        load = self._host_jobs
        if e.host:
            load[e.host] -= 1
        e.host = host
        if host:
            load[host] = load.get(host, 0) + 1

    def offer(self, e: JobEntry, now: float, out: list) -> list:
        """An admitted job's StartJob to its host (a live one: picked if it has none), then
        ``out``."""
        if not e.host or e.host not in self.hosts_alive:
            self.home(e, self.pick_host())
            # stored (after the StartJob: not on its path), even with one host: a job stored
            # with no host is one not admitted yet, as `apollo jobs` tells (rm/store.py)
            out.append(Persist("home", (e.job_id, e.host, e.generation)))
        return [self.messages.offer(e, now)] + out

    def new_generation(self, e: JobEntry, now: float) -> list:
        """Offered again to its host as a new home (whose JM adopts what the PNs hold)."""
        e.generation += 1
        return [Persist("home", (e.job_id, e.host, e.generation)), self.messages.offer(e, now)]

    def check(self, now: float, started_at: float) -> list:
        """Hosts silent for host_dead_after_s are dead; their jobs move to live ones."""
        out: list = []
        limit = self.host_dead_after_s
        for h in list(self.hosts_alive):
            if h in self.heard and now - self.host_seen.get(h, 0.0) > limit and now - started_at > limit:
                self.hosts_alive.remove(h)
                out.append(Log("host_dead", (h, now)))
        alive = self.hosts_alive
        # (only when some job is homed at a host not alive: an admitted job always has a home)
        if alive and any(n and h not in alive for h, n in self._host_jobs.items()):
            for e in self.jobs.values():
                if e.admitted and e.state == "running" and e.host not in self.hosts_alive:
                    out += self._rehome(e, now)
        return out

    def _rehome(self, e: JobEntry, now: float) -> list:
        old = e.host
        self.home(e, self.pick_host())
        e.generation += 1
        return [Persist("home", (e.job_id, e.host, e.generation)), self.messages.offer(e, now),
                Log("rehomed", (e.job_id, now, old, e.host))]

    def validate(self) -> None:
        homed: dict[str, int] = {}
        for e in self.jobs.values():
            if e.host:
                homed[e.host] = homed.get(e.host, 0) + 1
            assert e.host or not e.admitted, "an admitted job with no JM host"
        assert homed == {h: n for h, n in self._host_jobs.items() if n}, "jobs per JM host out of sync"
