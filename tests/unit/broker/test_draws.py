"""broker/draws.py gives what random.Random's own methods give from the same
state, so the simulator's seeds replay as before."""

from __future__ import annotations

import random

from broker import draws


def test_draws_are_random_randoms_own():
    for seed in range(300):
        ours, ref = random.Random(seed), random.Random(seed)
        for n in (1, 2, 3, 250, 1000, 45_000, 2**40 + 3):
            assert draws.randint(ours, 0, n) == ref.randint(0, n)
            assert draws.randint(ours, 5, 5 + n) == ref.randint(5, 5 + n)
        for size in (1, 2, 4, 5, 21, 22, 40):
            population = [f"node{i}" for i in range(size)]
            for k in range(0, min(size, 7) + 1):
                assert draws.sample(ours, population, k) == ref.sample(population, k)
            assert draws.choice(ours, population) == ref.choice(population)
        assert ours.getstate() == ref.getstate()
