"""Joining a running cluster from another machine: `apollo node join --rm HOST:PORT ...`.

The RM's process carries a Registrar actor (address "registrar"). A joining process sends it a
JoinRequest: "N PNs in rack R with C cpus / M GB each", or "a JM host". The registrar gives
it server ids (of the cluster's declared servers, in that rack, not held by anyone else) or a
JM host index, and the cluster's description (every process's address), and remembers the
grant in its store, so the same process asking again (it restarted) gets the same ids back,
and a restarted RM does not give them to another. From then on the joined process is an
ordinary member: its PNs heartbeat to the RM, which tracks their liveness (a PN that stops
heartbeating is dead, its tasks placed again; it may come back), and the processes it talks
to learn its addresses from its connections (and dial it back at its listen address).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from apollo.core.effects import Log, Persist, Send, Start
from apollo.core.messages import JoinReply, JoinRequest


class Registrar:
    def __init__(self, info: dict) -> None:
        """``info``: cluster.json's content (config and the processes started with the cluster)."""
        self.info = info
        cfg = info["config"]
        self.pns, self.racks = cfg["pns"], cfg["racks"]
        self.cpus, self.mem_gb = float(cfg["cpus"]), float(cfg["mem_gb"])
        self.rack_of = (np.arange(self.pns) * self.racks // self.pns).tolist()   # as apollo.core.cluster.Topology
        self.joined: dict[str, dict] = {}       # listen address -> its process entry
        self._taken: set[int] = set()
        for p in info["processes"]:
            self._taken.update(p.get("pns", []))
        self._jm_indexes = {p["index"] for p in info["processes"] if p["role"] == "jm"}

    def handle(self, event, now: float, rng) -> list:
        if type(event) is Start:
            for entry in (event.stored or {}).values():
                self._remember(entry)
            return []
        if type(event) is JoinRequest:
            return self._join(event)
        return [Log("warn", (f"registrar ignored {type(event).__name__}",))]

    def _remember(self, entry: dict) -> None:
        self.joined[entry["address"]] = entry
        self._taken.update(entry.get("pns", []))
        if entry["role"] == "jm":
            self._jm_indexes.add(entry["index"])

    def _join(self, r: JoinRequest) -> list:
        old = self.joined.get(r.address)
        if old is not None and old["role"] == r.kind and (r.kind == "jm" or len(old["pns"]) == r.count):
            return [self._reply(r, old)]         # the same process again (it restarted)
        if r.kind == "pn":
            why = self._pn_misfit(r)
            if why:
                return [Send(r.reply_to, JoinReply(False, why, [], -1, "")), Log("warn", (f"join refused: {why}",))]
            free = [s for s in range(self.pns) if s not in self._taken and (r.rack < 0 or self.rack_of[s] == r.rack)]
            if len(free) < r.count:
                where = f"rack {r.rack}" if r.rack >= 0 else "the cluster"
                why = (f"{r.address} asked for {r.count} PNs in {where}, which has {len(free)} free server slots "
                       f"(the cluster was declared with {self.pns} PNs in {self.racks} racks)")
                return [Send(r.reply_to, JoinReply(False, why, [], -1, "")), Log("warn", (f"join refused: {why}",))]
            entry = {"role": "pn", "index": 1000 + len(self.joined), "address": r.address, "pns": free[:r.count],
                     "joined": True}
        elif r.kind == "jm":
            index = max(self._jm_indexes, default=-1) + 1
            entry = {"role": "jm", "index": index, "address": r.address, "joined": True}
        else:
            why = f"unknown kind {r.kind!r} (pn or jm)"
            return [Send(r.reply_to, JoinReply(False, why, [], -1, ""))]
        self._remember(entry)
        return [Persist("joined", (entry,)), self._reply(r, entry),
                Log("joined", (r.kind, r.address, entry.get("pns", entry["index"])))]

    def _pn_misfit(self, r: JoinRequest) -> str:
        if abs(r.cpus - self.cpus) > 1e-9 or abs(r.mem_gb - self.mem_gb) > 1e-9:
            return (f"{r.address} offers PNs of {r.cpus} cpu / {r.mem_gb} GB; this cluster's servers are "
                    f"{self.cpus} cpu / {self.mem_gb} GB each (start the join with --cpus {self.cpus} "
                    f"--mem-gb {self.mem_gb})")
        if not (r.rack < self.racks):
            return f"{r.address} asked for rack {r.rack}; the cluster has racks 0-{self.racks - 1}"
        return ""

    def _reply(self, r: JoinRequest, entry: dict) -> Send:
        info = dict(self.info)
        info["processes"] = list(self.info["processes"]) + [e for e in self.joined.values()]
        return Send(r.reply_to, JoinReply(True, "", list(entry.get("pns", [])), entry["index"],
                                          json.dumps(info)))


class JoinStore:
    """The registrar's grants, in DIR/joined.json (a Persist store: written before answering)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def recovered(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def apply(self, p: Persist) -> None:
        if p.op != "joined":
            raise ValueError(f"unknown registrar store operation {p.op!r}")
        entry = p.args[0]
        grants = self.recovered()
        grants[entry["address"]] = entry
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(grants, indent=1))
        tmp.replace(self.path)
