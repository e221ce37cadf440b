"""Lesson 13's resume at another worker count, run on Grain itself.

    python -m course_lib.scripts.mix_resume_on_grain DOCSTRINGS CODE BATCH SAVE COMPARE

The chain is the lesson's `mixed_chain` step for step (the seeds, the 70/30 weights,
`repeat`, `mp_prefetch`, the batch size) on records that hold only their corpus and key
(`MapDataset.range(n).map(...)`): a resume depends on positions, not on tokens. The
lesson's `[rank::count]` slice is left out: at one process it is `[0::1]`, which changes
nothing. One run at 2 workers gives the reference
batches and the state after SAVE batches; that state is then restored at 2, 1 and 0
workers, and the next COMPARE batches are compared with the reference. The state saved at
0 workers is printed beside it. A control starts at 2 workers without the state: it should
match no batch. The last line is one JSON object: the states, for each worker count the
number of equal batches or the error Grain raised, and the control's count.

It needs Grain and NumPy only. It runs as its own Python process because Grain's workers
read absl flags, which a notebook never parses.
"""

import json
import sys

import grain.python as grain
import numpy as np
from absl import flags


def records(length, corpus):  # ids only: each record's corpus and key
    return grain.MapDataset.range(length).map(
        lambda key: {"corpus": np.int32(corpus), "key": np.int32(key)})


def mixed_chain(lengths, batch_size, num_workers=0):  # the lesson's chain, step for step
    corpora = [records(length, corpus).shuffle(seed=corpus).repeat()
               for corpus, length in enumerate(lengths)]
    stream = grain.MapDataset.mix(corpora, [0.7, 0.3]).to_iter_dataset()
    if num_workers:
        stream = stream.mp_prefetch(grain.MultiprocessingOptions(num_workers=num_workers))
    return stream.batch(batch_size)


def take(chain, batches, state=None, save_after=None):
    """`batches` batches (restored from `state` first), and the state after `save_after`."""
    iterator = iter(chain)  # Grain's iterator has close() but no `with`
    saved = None
    try:
        if state is not None:
            iterator.set_state(state)
        taken = []
        for _ in range(batches):
            taken.append(next(iterator))
            if len(taken) == save_after:
                saved = iterator.get_state()
        return taken, saved
    finally:
        iterator.close()


def equal(batches, reference):
    return sum(all(np.array_equal(got[key], wanted[key]) for key in wanted)
               for got, wanted in zip(batches, reference, strict=True))


def main():
    flags.FLAGS.mark_as_parsed()  # Grain's workers read a flag; parse none, keep defaults
    docstrings, code, batch_size, save_after, compare = (int(word) for word in sys.argv[1:6])
    lengths = [docstrings, code]
    reference, state = take(mixed_chain(lengths, batch_size, 2), save_after + compare,
                            save_after=save_after)
    _, state_0 = take(mixed_chain(lengths, batch_size), save_after, save_after=save_after)
    report = {"state at 2 workers": state, "state at 0 workers": state_0}
    for workers in (2, 1, 0):
        try:
            resumed, _ = take(mixed_chain(lengths, batch_size, workers), compare, state)
            found = f"{equal(resumed, reference[save_after:])}/{compare} batches equal"
        except Exception as error:  # the error Grain raised is the measurement
            found = f"{type(error).__name__}: {error}"
        report[f"restored at {workers} worker{'' if workers == 1 else 's'}"] = found
    control, _ = take(mixed_chain(lengths, batch_size, 2), compare)  # no state: from the start
    report["control: 2 workers, no state"] = (
        f"{equal(control, reference[save_after:])}/{compare} batches equal")
    print(json.dumps(report, default=str, ensure_ascii=False))


if __name__ == "__main__":
    main()
