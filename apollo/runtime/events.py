"""The simulator's event queue: a calendar of fixed-width time buckets.

Entries are tuples ordered by ``(time, seq)``, pushed in increasing ``seq``, and popped in
exactly the order a binary heap would give. A heap of a 20,000-server run holds ~100,000 entries
and each pop walks ~17 levels of them scattered over memory; here a push
appends to its bucket's list and the buckets are sorted one at a time as
time reaches them, so pops walk one small list. Entries for the bucket being
drained (a message sent less than a bucket width ahead) are inserted in order.
"""
from __future__ import annotations

import heapq
from operator import itemgetter
from typing import Final

FAR: Final = 1 << 62      # the bucket of times too large to bucket (never, for practical purposes)
BY_TIME: Final = itemgetter(0)     # an entry's time: a sort key (stable: ties keep their seq order)


class EventQueue:
    __slots__ = ("per_s", "buckets", "order", "cur", "pos", "cur_bucket", "size")

    def __init__(self, width_s: float = 1e-3) -> None:
        self.per_s = 1.0 / width_s
        self.buckets: dict[int, list] = {}   # bucket -> its entries, unsorted
        self.order: list[int] = []           # heap of the buckets in ``buckets``
        self.cur: list = []                  # the bucket being drained, sorted; entries from pos on
        self.pos = 0
        self.cur_bucket = -1
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def push(self, entry: tuple) -> None:
        self.size += 1
        t: float = entry[0]
        b = int(t * self.per_s) if t < 1e15 else FAR
        if b <= self.cur_bucket:      # due while the current bucket drains (or overdue): in order
            _insort(self.cur, entry, t, self.pos)
            return
        lst = self.buckets.get(b)
        if lst is None:
            self.buckets[b] = [entry]
            heapq.heappush(self.order, b)
        else:
            lst.append(entry)

    def advance(self) -> bool:
        """Make the next non-empty bucket current; False when there is none."""
        if not self.order:
            return False
        b = heapq.heappop(self.order)
        lst = self.buckets.pop(b)
        # Entries are pushed in ``seq`` order (the simulator numbers them as it pushes them), so
        # a bucket's list is in seq order, and a stable sort by time alone puts it in (time,
        # seq) order: float keys compare at a third of what whole tuples cost.
        lst.sort(key=BY_TIME)
        self.cur, self.pos, self.cur_bucket = lst, 0, b
        return True

    def drain(self, until: float = float("inf")):
        """Yield the entries due by ``until`` in order, one at a time, including any pushed
        while the caller handles one (the simulator's loop: a generator resumes faster than a
        call per pop)."""
        while True:
            cur = self.cur
            pos = self.pos
            while pos < len(cur):          # cur grows under us when a push lands in it
                entry: tuple = cur[pos]      # (typed: compiled, the time is compared as a C double)
                t: float = entry[0]
                if t > until:
                    return
                pos += 1
                self.pos = pos             # before the yield: a push inserts after it
                self.size -= 1
                yield entry
            if not self.advance():
                return

    def pop_due(self, until: float = float("inf")) -> tuple | None:
        """The next entry if it is due by ``until``; None (and nothing taken) otherwise."""
        pos = self.pos
        cur = self.cur
        if pos >= len(cur):
            if not self.advance():
                return None
            pos, cur = 0, self.cur
        entry = cur[pos]
        if entry[0] > until:
            return None
        self.pos = pos + 1
        self.size -= 1
        return entry


def _insort(cur: list, entry: tuple, t: float, lo: int) -> None:
    """bisect.insort_right(cur, entry, lo) for entries ordered by (time, seq), seqs unique: the
    same place, found comparing floats (and a seq on a tie) rather than whole tuples. Most
    messages arrive within the bucket being drained, so this is most pushes."""
    seq: int = entry[1]
    hi = len(cur)
    while lo < hi:
        mid = (lo + hi) // 2
        e: tuple = cur[mid]
        et: float = e[0]
        if et < t or (et == t and e[1] < seq):
            lo = mid + 1
        else:
            hi = mid
    cur.insert(lo, entry)
