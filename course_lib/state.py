"""Iterator state: where in the stream a loader stands, as JSON.

Because the sampler is a pure function of the index, the whole position of a loader is one
number, `next_index`: the stream index just after the last record of the last element handed
out. Records that were read ahead or dropped by a filter are simply recomputed on resume.
The state also records the facts that fix the stream: the sampler's settings and the
source's type name and length (`source_facts`). `set_state` refuses a state whose facts
differ from the loader's, so a loader with another seed, another number of records or a
source of another type or length does not silently continue in another stream. Those are
all it checks of the data: it cannot see the records, so a source of the same type and
length that holds other records passes. The state records the worker count it was saved at
(`worker_count`), but `set_state` does not check it: the batches are the same at any count,
so a state continues exactly under any other.

`next_index` counts the steps of the loader's own shard: with `k` shards, step `j` of shard
`i` is the sampler's global position `i + j * k` (see `sampler.py`). Grain 0.2.18 saves
another state (version 2, the last global position seen by each worker), so a state of one
library cannot be restored by the other; both refuse it with an error.

A state looks like this (`STATE_SHAPE`), and `set_state` checks every part of it, so that a
file that is not a state, or was edited by hand, is refused with what is wrong:

    {"version": 1, "next_index": 4096,
     "sampler": {"num_records": 60000, "shard_index": 0, "shard_count": 1,
                 "drop_remainder": false, "shuffle": true, "num_epochs": null, "seed": 0},
     "data_source": {"type": "ArrayDataSource", "length": 60000}, "worker_count": 0}

One operation needs a second number. `BucketByLength` sorts the records of a window of
batches by length before batching, so the batches it has handed out from a window are not
the records before one position. Its loaders save `next_index` as the window's first record
and add `"window_batches_taken"`, how many of that window's batches were handed out; the
restored loader reads the window again and skips them (see `bucketing.py`).
"""

from __future__ import annotations

import json
from typing import Any

STATE_VERSION = 1
WINDOW_KEY = "window_batches_taken"  # only for BucketByLength: see bucketing.ResumePoint


def source_facts(data_source) -> dict[str, Any]:
    """Stable facts about a source; an equal source rebuilt after a restart matches them."""
    return {"type": type(data_source).__name__, "length": len(data_source)}


def encode_state(next_index: int, sampler, data_source, worker_count: int,
                 window_batches_taken: int | None = None) -> bytes:
    """The state as JSON bytes; `window_batches_taken` only for a loader that groups by
    length in windows (None leaves the key out)."""
    state = {
        "version": STATE_VERSION,
        "next_index": int(next_index),
        "sampler": sampler.describe(),
        "data_source": source_facts(data_source),
        "worker_count": worker_count,
    }
    if window_batches_taken is not None:
        state[WINDOW_KEY] = int(window_batches_taken)
    return json.dumps(state, sort_keys=True).encode()


# What `get_state()` returns, as a learner should picture it (errors quote it).
STATE_SHAPE = ('{"version": 1, "next_index": <int>, "sampler": {<the sampler settings>}, '
               '"data_source": {"type": <str>, "length": <int>}, "worker_count": <int>}')

# Stream positions are int64 inside the sampler; one read ahead of a position must still fit.
MAX_NEXT_INDEX = 2**62


def _not_a_state(problem: str) -> ValueError:
    return ValueError(f"{problem}, so it is not a state. A state is the JSON object that "
                      f"get_state() returns, {STATE_SHAPE}. Pass exactly what get_state() "
                      "returned (bytes, or that JSON as str or dict).")


def _as_dict(state) -> dict:
    if isinstance(state, bytes | bytearray | str):
        try:
            state = json.loads(state)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(
                f"state is not valid JSON ({error}). Pass exactly what get_state() returned."
            ) from None
        if not isinstance(state, dict):
            raise _not_a_state(f"state is the JSON {type(state).__name__} {state!r:.60}")
        return state
    if isinstance(state, dict):
        return state
    raise TypeError(
        f"state must be the bytes returned by get_state() (or that JSON as str or dict), "
        f"got {type(state).__name__}.")


def _check_part(state: dict, part: str, expected: dict) -> dict:
    """`state[part]` must be an object with exactly the keys this loader describes."""
    saved = state.get(part)
    if not isinstance(saved, dict):
        raise _not_a_state(f"state[{part!r}] is {saved!r:.60}, not a JSON object")
    if set(saved) != set(expected):
        missing, extra = sorted(set(expected) - set(saved)), sorted(set(saved) - set(expected))
        differences = [f"{name} {keys}" for name, keys in (("missing", missing),
                                                           ("unexpected", extra)) if keys]
        raise _not_a_state(f"state[{part!r}] has keys {sorted(saved)} "
                           f"({', '.join(differences)})")
    return saved


def _mismatch(what: str, saved: dict, current: dict) -> str | None:
    for name in sorted(current):
        if saved[name] != current[name] or type(saved[name]) is not type(current[name]):
            return (f"the state was saved with {what} {name}={saved[name]!r}, but this "
                    f"loader has {name}={current[name]!r}")
    return None


def _check_next_index(next_index, total: int | None) -> int:
    upper = MAX_NEXT_INDEX - 1 if total is None else total
    if isinstance(next_index, bool) or not isinstance(next_index, int) or not (
            0 <= next_index <= upper):
        rule = ("an integer in [0, 2**62) (an endless stream)" if total is None else
                f"an integer in [0, {total}], the length of this loader's stream")
        raise ValueError(f"state has next_index={next_index!r}, but it must be {rule}. Pass a "
                         "state from get_state() of a loader with the same settings.")
    return next_index


def _check_window(state: dict, window_batches: int | None) -> int:
    """How many batches of its window the state's loader had handed out (0 without one)."""
    if window_batches is None:
        if WINDOW_KEY in state:
            raise ValueError(
                f"state has {WINDOW_KEY!r}, which only a loader whose last operation is "
                "BucketByLength saves, but this loader has none. Rebuild the loader with the "
                "operations that produced the state.")
        return 0
    if WINDOW_KEY not in state:
        raise ValueError(
            f"state has no {WINDOW_KEY!r}, so it was saved by a loader without "
            "BucketByLength, but this loader ends with one. Rebuild the loader with the "
            "operations that produced the state.")
    taken = state[WINDOW_KEY]
    if isinstance(taken, bool) or not isinstance(taken, int) or not 0 <= taken < window_batches:
        raise ValueError(
            f"state has {WINDOW_KEY}={taken!r}, but it must be an integer in "
            f"[0, {window_batches}), this loader's window_batches. Pass a state from "
            "get_state() of a loader with the same operations.")
    return taken


def decode_state(state, sampler, data_source,
                 window_batches: int | None = None) -> tuple[int, int]:
    """Check `state` against this loader and return where to resume: `next_index`, and how
    many batches of the window starting there to skip (`window_batches` is the loader's
    `BucketByLength.window_batches`, None without one)."""
    state = _as_dict(state)
    version = state.get("version")
    if version != STATE_VERSION or isinstance(version, bool) or "next_index" not in state:
        raise ValueError(
            f"state has version {version!r} and keys {sorted(state)}; expected "
            f"version {STATE_VERSION} with 'next_index'. Pass a state from get_state().")
    problem = (_mismatch("sampler setting", _check_part(state, "sampler", sampler.describe()),
                         sampler.describe())
               or _mismatch("data source", _check_part(state, "data_source",
                                                       source_facts(data_source)),
                            source_facts(data_source)))
    if problem:
        raise ValueError(f"Cannot restore: {problem}. Rebuild the loader with the same data "
                         "source and sampler settings that produced the state.")
    return (_check_next_index(state["next_index"], sampler.total_length),
            _check_window(state, window_batches))
