"""Small builders shared by tests."""
import numpy as np

from apollo.messages import TaskSpec


def task(job=1, t=0, attempt=1, cpu=1.0, mem=2.0, est=10.0, dur=10.0, opp=False, in_bytes=0.0, loc=2):
    return TaskSpec(job, t, attempt, 0, cpu, mem, dur, in_bytes, loc, est, opp, None, {}, None, None, False)


class Rng:
    """A numpy Generator with a fixed seed (actors take one as ``rng``)."""
    def __new__(cls, seed=0):
        return np.random.default_rng(seed)
