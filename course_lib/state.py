"""Iterator state: where in the stream a loader stands, as JSON.

Because the sampler is a pure function of the index, the whole position of a loader is one
number, `next_index`: the stream index just after the last record of the last element handed
out. Records that were read ahead or dropped by a filter are simply recomputed on resume.
The state also records the facts that fix the stream (sampler settings, source type and
length) so that restoring into a loader over different data fails loudly instead of silently
continuing somewhere else. It does not record the worker count: any count continues exactly.
"""

from __future__ import annotations

import json
from typing import Any

STATE_VERSION = 1


def source_facts(data_source) -> dict[str, Any]:
    """Stable facts about a source; an equal source rebuilt after a restart matches them."""
    return {"type": type(data_source).__name__, "length": len(data_source)}


def encode_state(next_index: int, sampler, data_source, worker_count: int) -> bytes:
    state = {
        "version": STATE_VERSION,
        "next_index": next_index,
        "sampler": sampler.describe(),
        "data_source": source_facts(data_source),
        "worker_count": worker_count,
    }
    return json.dumps(state, sort_keys=True).encode()


def _as_dict(state) -> dict:
    if isinstance(state, dict):
        return state
    if isinstance(state, bytes | bytearray | str):
        try:
            return json.loads(state)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"state is not valid JSON ({error}). Pass exactly what get_state() returned."
            ) from None
    raise TypeError(
        f"state must be the bytes returned by get_state() (or that JSON as str or dict), "
        f"got {type(state).__name__}.")


def _mismatch(what: str, saved: dict, current: dict) -> str | None:
    for name in sorted(set(saved) | set(current)):
        if saved.get(name) != current.get(name):
            return (f"the state was saved with {what} {name}={saved.get(name)!r}, but this "
                    f"loader has {name}={current.get(name)!r}")
    return None


def decode_state(state, sampler, data_source) -> int:
    """Check `state` against this loader and return the `next_index` to resume from."""
    state = _as_dict(state)
    if state.get("version") != STATE_VERSION or "next_index" not in state:
        raise ValueError(
            f"state has version {state.get('version')!r} and keys {sorted(state)}; expected "
            f"version {STATE_VERSION} with 'next_index'. Pass a state from get_state().")
    problem = (_mismatch("sampler setting", state.get("sampler", {}), sampler.describe())
               or _mismatch("data source", state.get("data_source", {}),
                            source_facts(data_source)))
    if problem:
        raise ValueError(f"Cannot restore: {problem}. Rebuild the loader with the same data "
                         "source and sampler settings that produced the state.")
    next_index = state["next_index"]
    total = sampler.total_length
    if not isinstance(next_index, int) or next_index < 0 or (
            total is not None and next_index > total):
        raise ValueError(f"state has next_index={next_index!r}, outside [0, {total}].")
    return next_index
