"""The live processes' report records: ``events-NAME.msgpack`` in the cluster's folder, one per
process, a stream of MessagePack arrays ``[kind, now, data]`` (the actors' Log effects of the
kinds the report reads). The one place that writes them (EventFile) and reads them (read_from,
records); the report, `apollo jobs`, `apollo job`, replays, sweeps and the RM's HTTP face all
read through here.

MessagePack, not JSON lines: a busy JM host writes a record per ended attempt, and JSON's
shortest float repr made ~15% of its CPU (7 us a record against 1 us packed). A record is
whole or absent: a process killed in a write leaves a partial record at the end of its file,
which readers leave (as one still being written) and the process's next incarnation cuts off
before it appends.
"""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Iterator

import msgpack

PATTERN = "events-*.msgpack"
# (the kinds the report, the tools and the HTTP face read; job_admitted and allocation: the
# report's per-queue figures; the last five: its control counts)
RECORDED = frozenset({"attempt", "job_done", "job_submitted", "job_refused", "decisions", "preempted", "upgraded",
                      "warn", "job_admitted", "allocation", "adopted", "rehomed", "host_dead", "host_up",
                      "released"})
log = logging.getLogger("apollo.events")


def path(folder: Path, name: str) -> Path:
    """The event file of the process named ``name`` (rm, jm0, pn1, joined-TAG)."""
    return Path(folder) / f"events-{name}.msgpack"


def _plain(o):
    """numpy's numbers as Python's (a record's fields come from the actors' arrays)."""
    item = getattr(o, "item", None)
    if item is None:
        raise TypeError(f"cannot record a {type(o).__name__}")
    return item()


def read_from(data: bytes, where: str = "") -> tuple[list[list], int]:
    """(the whole records in ``data``, the bytes they take): a partial record at the end is
    left for later; bytes that are no record end the reading there (with a warning)."""
    u = msgpack.Unpacker(raw=False, strict_map_key=True, max_buffer_size=max(len(data), 1 << 20))
    u.feed(data)
    out: list[list] = []
    used = 0
    try:
        for row in u:
            if type(row) is list and len(row) == 3 and type(row[0]) is str and type(row[2]) is list:
                out.append(row)
            used = u.tell()
    except (ValueError, msgpack.UnpackException) as e:
        log.warning("%s: not an event record at byte %d (%s): read up to there", where, used, e)
    return out, used


def records(folder: Path, *kinds: str) -> Iterator[tuple[str, str, float, list]]:
    """(file name, kind, now, data) of every record of ``kinds`` (all if none) in a cluster's
    event files, file by file in name order, each in its order."""
    for f in sorted(Path(folder).glob(PATTERN)):
        rows, _ = read_from(f.read_bytes(), str(f))
        for kind, now, data in rows:
            if not kinds or kind in kinds:
                yield f.name, kind, now, data


def empty(folder: Path) -> None:
    """Empty every event file of the cluster (a replay keeps its own run's records only)."""
    for f in Path(folder).glob(PATTERN):
        f.write_bytes(b"")


class EventFile:
    """Appends the actors' report records.

    Records are buffered and written with one write per event-loop iteration, not one per
    record: the first record of an iteration schedules the write for the end of the next one
    (``call_soon`` twice), after the transport has sent the messages of the handler that
    produced it (the transport flushes with ``call_soon`` too), so a file write never delays a
    message. They are packed then too, not in the handler's wake: a record costs the critical
    path one list append. A crashed process loses at most the records of its last two
    iterations. Outside a running loop every record is written at once.
    """

    def __init__(self, file: Path) -> None:
        _cut_partial_tail(file)
        self.f = open(file, "ab", buffering=1 << 16)
        self._pack = msgpack.Packer(default=_plain, use_bin_type=True, autoreset=True).pack
        self._lines: list[tuple] = []
        self._armed = False

    def __call__(self, kind: str, data: tuple, now: float) -> None:
        if kind in RECORDED:
            self._lines.append((kind, now, data))
            if not self._armed:
                try:
                    loop = asyncio.get_running_loop()
                except RuntimeError:
                    self.flush()
                else:
                    self._armed = True
                    loop.call_soon(loop.call_soon, self.flush)
        if kind == "warn":
            logging.getLogger("apollo.actor").warning("%s", data)

    def flush(self) -> None:
        self._armed = False
        if self._lines:
            lines, self._lines = self._lines, []
            pack = self._pack
            self.f.write(b"".join([pack((kind, now, data)) for kind, now, data in lines]))
        self.f.flush()

    def close(self) -> None:
        self.flush()
        self.f.close()


def _cut_partial_tail(file: Path) -> None:
    """Drop what follows the last whole record (a write cut short by a kill), so that records
    appended after it read as records. (Streamed: a long-lived cluster's file can be large.)"""
    try:
        f = open(file, "rb")
    except FileNotFoundError:
        return
    with f:
        size = f.seek(0, 2)
        f.seek(0)
        u = msgpack.Unpacker(f, raw=False, strict_map_key=True, read_size=1 << 20)
        used = 0
        try:
            for _ in u:
                used = u.tell()
        except (ValueError, msgpack.UnpackException) as e:
            log.warning("%s: not an event record at byte %d (%s)", file, used, e)
    if used < size:
        log.warning("%s: dropped %d bytes after its last whole record", file, size - used)
        with open(file, "r+b") as f:
            f.truncate(used)
