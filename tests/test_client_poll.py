"""The live client's wait: it asks after its job by key (JobQuery), and submits the job again if
the RM answers that it holds none for that key."""
import asyncio

import numpy as np

import apollo.tools.client as client_mod
from apollo.core.messages import JobAccepted, JobQuery, SubmitJob
from apollo.core.spec import JobSpec, StageSpec
from apollo.tools.client import Client, _Inbox


class SentTo:
    def __init__(self):
        self.sent = []

    def inject(self, to, msg):
        self.sent.append((to, msg))


def _client() -> Client:
    c = object.__new__(Client)          # (no cluster folder: only the wait's parts are used)
    c.address = "client:t"
    c.rt = SentTo()
    c.inbox = _Inbox()
    c.inbox.on_lost = c._submit_again
    c._asked = {}
    return c


def test_a_waiting_client_asks_by_key_and_resubmits_a_job_the_rm_lost(monkeypatch):
    monkeypatch.setattr(client_mod, "POLL_S", 0.01)
    c = _client()
    sub = SubmitJob(-1, JobSpec("w", [StageSpec("s", 1, np.ones(1))]), c.address, "client:t:1")
    c._asked[4] = sub

    async def wait_for_two_queries():
        f = asyncio.get_running_loop().create_future()
        handle = c._ask_again(4, f)
        for _ in range(500):
            if len(c.rt.sent) >= 2:
                break
            await asyncio.sleep(0.01)
        handle[0].cancel()
    asyncio.run(wait_for_two_queries())
    assert len(c.rt.sent) >= 2
    assert all(to == "rm" and type(m) is JobQuery and m.key == "client:t:1" and m.reply_to == c.address
               for to, m in c.rt.sent)
    c.rt.sent.clear()
    c.inbox.handle(JobAccepted(4, "w", True, "already stored", "client:t:1"), 0.0, None)
    assert c.rt.sent == []                   # stored: nothing to do but wait
    c.inbox.handle(JobAccepted(0, "", False, "no job is stored for submission key 'client:t:1'", "client:t:1"),
                   0.0, None)
    assert c.rt.sent == [("rm", sub)]        # the same submission, the same key
    c.inbox.handle(JobAccepted(0, "", False, "no job is stored for submission key 'other'", "other"), 0.0, None)
    assert c.rt.sent == [("rm", sub)]        # not a job this client waits for
