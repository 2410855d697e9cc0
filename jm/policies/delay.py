"""Delay scheduling (Zaharia et al., EuroSys 2010, section 4.2): a job that cannot launch a
node-local task waits up to W1 for a node-local opportunity, then up to W2 more for a
rack-local one, then takes any slot; launching a task sets its level to that task's
locality and restarts the wait (so one node-local launch brings it back to waiting).

Here a job "waits" from the first placement pass that found no slot it would take; tasks
without input (reduces) are never held, as in HFS. The waits are PlacementConfig.delay_node_s (W1)
and PlacementConfig.delay_rack_s (W2).
"""
from __future__ import annotations

import numpy as np

from apollo.core.cluster import NODE, RACK, REMOTE

from .base import Filter
from .batch import Batch, Cut


class DelayState:
    __slots__ = ("level", "since")

    def __init__(self) -> None:
        self.level = NODE        # the locality the job may launch at without waiting
        self.since: float | None = None   # skipped since (None: not waiting)


def allowed_level(state: DelayState, now: float, w1: float, w2: float) -> int:
    """The worst locality the job may take now."""
    waited = 0.0 if state.since is None else now - state.since
    if state.level == NODE:
        return REMOTE if waited >= w1 + w2 else (RACK if waited >= w1 else NODE)
    if state.level == RACK:
        return REMOTE if waited >= w2 else RACK
    return REMOTE


class DelayScheduling(Filter):
    name = "delay-scheduling"
    # (the lightly loaded candidates come from the RM's list as it is, and a held task waits
    # for a slot to free up: the job polls; Filter's defaults)

    def new_state(self) -> DelayState:
        return DelayState()

    def cut(self, b: Batch, state: DelayState) -> Cut | None:
        cfg = b.cfg
        if state.since is None:
            state.since = b.now
        lvl = allowed_level(state, b.now, cfg.placement.delay_node_s, cfg.placement.delay_rack_s)
        if lvl >= REMOTE:
            return None
        # tasks with no input to be near are never held
        return Cut("loc", np.where(b.has_input, lvl, REMOTE))

    def wake_at(self, state: DelayState, now: float, cfg) -> float | None:
        """When the job's allowed level next widens (it should look again then)."""
        if state.since is None or state.level >= REMOTE:
            return None
        pc = cfg.placement
        w = state.since + (pc.delay_node_s + pc.delay_rack_s if state.level == NODE else pc.delay_rack_s)
        w1 = state.since + pc.delay_node_s
        if state.level == NODE and now < w1:
            return w1
        return w if now < w else None

    def dispatched(self, state: DelayState, where: np.ndarray, now: float) -> None:
        if len(where):
            state.level = int(where.min())
            state.since = None
