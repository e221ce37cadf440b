"""A script with no `if __name__ == "__main__":` guard, run by tests/test_workers.py.

Its transform and source live in `__main__`. With `spawn`, a child that re-imported this file
would print "script body ran" again and try to start workers of its own.
"""

from pathlib import Path

import numpy as np

import course_lib as grain

print("script body ran", flush=True)


class Squares:
    def __len__(self):
        return 100

    def __getitem__(self, record_key):
        return np.int64(record_key * record_key)


class Noisy(grain.RandomMapTransform):
    def random_map(self, element, rng):
        return element + rng.integers(10)


def batches(worker_count):
    loader = grain.DataLoader(
        data_source=Squares(), sampler=grain.IndexSampler(100, shuffle=True, seed=4, num_epochs=1),
        operations=[Noisy(), grain.Batch(6)], worker_count=worker_count)
    return [batch.tolist() for batch in loader]


expected = batches(0)
assert batches(2) == expected
print("results match worker_count=0", flush=True)


class Fails(grain.MapTransform):
    def map(self, element):
        if element == 49:
            raise ValueError("forty-nine")  # FAILS_HERE
        return element


failing = grain.DataLoader(data_source=Squares(), sampler=grain.IndexSampler(100, num_epochs=1),
                           operations=[Fails()], worker_count=2)
try:
    list(failing)
except ValueError as error:
    notes = "\n".join(error.__notes__)
    line = next(number for number, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                if text.rstrip().endswith("# FAILS_HERE"))
    assert f'no_main_guard.py", line {line}, in map' in notes, notes
    print("the worker's traceback names this script", flush=True)
