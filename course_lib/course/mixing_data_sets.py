"""Lesson 13, mixing data sets: the two corpora as records, the rule's arithmetic, counts,
Grain run side by side, pictures and the sentences that turn with the numbers.

The corpora are the capstone's (`capstone.text_pieces`, the standard library's docstrings,
and `capstone.code_pieces`, its source), cut into pieces of at most `ROW_LENGTH` bytes. A
record is a dict of the piece's bytes padded to one row (`tokens`), the corpus it comes from
(`corpus`, 0 or 1) and its index in that corpus (`key`), so that every count in the lesson
is read from the records themselves.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from course_lib.course import capstone  # noqa: F401  (the lesson reads its corpora from it)
from course_lib.course.basics import (
    BETTER,
    SAME,
    TOO_NOISY,
    TOO_NOISY_TO_TELL,
    WORSE,
    Comparison,
    bar_chart,
    compare_runs,
    format_duration,
    format_times,
)
from course_lib.course.variable_length import ROW_LENGTH  # bytes per piece, as in lesson 10

MIX_BATCH = 32  # records per batch in this lesson
CORPUS_NAMES = ("docstrings", "code")


# -- the records ------------------------------------------------------------------------------
class CorpusPieces:
    """A data source over one corpus's pieces: record `i` is `{"tokens": the piece's bytes
    padded with 0 to ROW_LENGTH, "corpus": corpus, "key": i}` (int32 arrays). Picklable, so
    worker processes can read it."""

    def __init__(self, pieces: Sequence[bytes], corpus: int, row_length: int = ROW_LENGTH):
        longest = max((len(piece) for piece in pieces), default=0)
        if longest > row_length:
            raise ValueError(f"a piece of {longest} bytes does not fit row_length={row_length}:"
                             " cut the corpus with the same row length.")
        self.pieces, self.corpus, self.row_length = list(pieces), int(corpus), row_length

    def __len__(self) -> int:
        return len(self.pieces)

    def __getitem__(self, key: int) -> dict[str, np.ndarray]:
        piece = self.pieces[key]
        tokens = np.zeros(self.row_length, np.int32)
        tokens[:len(piece)] = np.frombuffer(piece, np.uint8)
        return {"tokens": tokens, "corpus": np.int32(self.corpus), "key": np.int32(key)}


def no_docstring_quote(record: Mapping[str, np.ndarray]) -> bool:
    """True for a code piece with no triple quote in it: the lesson's example filter keeps
    these and drops the pieces that hold one."""
    return b'"""' not in np.asarray(record["tokens"], np.uint8).tobytes()


def corpus_ids(records: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """The corpus of each record (or of each row of each batch), in stream order."""
    return np.concatenate([np.atleast_1d(np.asarray(record["corpus"])) for record in records])


# -- 1. the rule ----------------------------------------------------------------------------------
def grain_integer_weights(weights: Sequence[float]) -> tuple[int, ...] | None:
    """The integer weights Grain's mix uses for `weights` (`_float_to_int_proportions` in
    Grain's `mix.py`), or None where Grain is not installed."""
    try:
        from grain._src.python.dataset.transformations import mix
    except ImportError:
        return None
    return tuple(int(weight) for weight in mix._float_to_int_proportions(list(weights)))


def rule_sentence(weights: Sequence[float], integers: Sequence[int],
                  grain_integers: Sequence[int] | None) -> str:
    """What the given weights become, the long-run share of each component, and whether
    Grain turns them into the same integers."""
    total = sum(integers)
    shares = ", ".join(f"{name} {weight / total:.2%}"
                       for name, weight in zip(CORPUS_NAMES, integers, strict=False))
    given = sum(weights)
    exact = all(abs(weight / total - asked / given) < 1e-12
                for weight, asked in zip(integers, weights, strict=True))
    head = (f"The weights {' / '.join(f'{weight:g}' for weight in weights)} become the integers "
            f"{':'.join(map(str, integers))} (the smallest scaled to 100, the others alike and "
            f"truncated), so in the long run the mix holds {shares}. ")
    head += ("Those are exactly the shares asked for. " if exact else
             "That is not exactly the share asked for: the truncation moved it, and every "
             "share below is measured against these integers, which are what the rule uses. ")
    if grain_integers is None:
        return head + "Grain is not installed here, so its integers cannot be compared."
    if tuple(grain_integers) == tuple(integers):
        return head + "Grain 0.2.18 turns them into the same integers."
    return head + (f"Grain 0.2.18 turns them into {':'.join(map(str, grain_integers))}, other "
                   "integers: the two mixes would pick other components.")


def print_positions(records: Sequence[Mapping[str, Any]],
                    grain_pairs: Sequence[tuple[int, int]] | None = None) -> None:
    """One line per position of the mix: the component and the index in it, and Grain's
    pair for the same position where it is given."""
    header = "position  component    index" + ("   Grain" if grain_pairs is not None else "")
    print(header)
    for position, record in enumerate(records):
        corpus, key = int(record["corpus"]), int(record["key"])
        line = f"{position:>8}  {CORPUS_NAMES[corpus]:<10} {key:>6}"
        if grain_pairs is not None:
            line += f"   {tuple(grain_pairs[position])}"
        print(line)


# -- 2. what a batch holds ------------------------------------------------------------------------
def coin_components(count: int, share: float, seed: int = 0) -> np.ndarray:
    """A weighted coin per element: component 0 with probability `share`, else 1."""
    return (np.random.default_rng(seed).random(count) >= share).astype(np.int32)


def per_batch(components: np.ndarray, batch_size: int, component: int = 0) -> np.ndarray:
    """How many elements of each whole batch belong to `component`."""
    whole = len(components) // batch_size * batch_size
    return (np.asarray(components[:whole]) == component).reshape(-1, batch_size).sum(axis=1)


def prefix_deviation(components: np.ndarray, share: float, component: int = 0) -> np.ndarray:
    """For every prefix of the stream (the first 1, 2, ... elements), how many elements
    `component` holds beyond (or short of) `share` of the prefix, in elements."""
    held = np.cumsum(np.asarray(components) == component)
    return np.abs(held - share * np.arange(1, len(held) + 1))


def plot_batch_shares(mix_counts: np.ndarray, coin_counts: np.ndarray,
                      mix_deviation: np.ndarray, coin_deviation: np.ndarray,
                      batch_size: int, share: float):
    """Left: how many batches held each count of docstring records, for the mix and the
    coin. Right: how far every prefix strays from the share, for both."""
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    low = int(min(np.min(mix_counts), np.min(coin_counts)))
    high = int(max(np.max(mix_counts), np.max(coin_counts)))
    values = np.arange(low, high + 1)
    for offset, counts, color, label in ((-0.2, coin_counts, "tab:orange", "a coin per record"),
                                         (0.2, mix_counts, "tab:blue", "the mix's rule")):
        left.bar(values + offset, [int(np.sum(counts == value)) for value in values],
                 width=0.4, color=color, label=label)
    left.axvline(share * batch_size, color="black", linestyle=":",
                 label=f"{share:.2%} of {batch_size}")
    left.set_xlabel(f"docstring records in a batch of {batch_size}")
    left.set_ylabel("batches")
    left.set_title(f"What each of {len(mix_counts)} batches holds")
    left.legend(fontsize="small")
    positions = np.arange(1, len(mix_deviation) + 1)
    right.plot(positions, coin_deviation, color="tab:orange",
               label=f"a coin per record (at most {np.max(coin_deviation):.1f})")
    right.plot(positions, mix_deviation, color="tab:blue", linewidth=0.6,
               label=f"the mix's rule (at most {np.max(mix_deviation):.3f})")
    right.set_xlabel("prefix length (records from the start)")
    right.set_ylabel("docstring records off the share")
    right.set_title("How far every prefix strays from the share")
    right.legend(fontsize="small")
    figure.tight_layout()
    return figure


def batch_share_sentence(mix_counts: np.ndarray, coin_counts: np.ndarray,
                         mix_deviation: float, coin_deviation: float, batch_size: int,
                         share: float) -> str:
    """The per-batch counts and the largest prefix deviation of the mix against the coin."""
    low, high = int(np.min(mix_counts)), int(np.max(mix_counts))
    coin_low, coin_high = int(np.min(coin_counts)), int(np.max(coin_counts))
    parts = [f"Over {len(mix_counts)} batches of {batch_size}, the mix put {low} to {high} "
             f"docstring records in a batch ({share:.2%} of {batch_size} is "
             f"{share * batch_size:.1f}); a coin per record put {coin_low} to {coin_high}."]
    if mix_deviation < 1:
        parts.append(f"No prefix of the mix strays a whole record from the share (at most "
                     f"{mix_deviation:.3f}): each record is placed by the counts the share "
                     "gives, so the share holds in every prefix, not only in the long run.")
    else:
        parts.append(f"A prefix of the mix strays {mix_deviation:.3f} records from the share, "
                     "not less than the one record the rule promises: that is a bug to report.")
    if coin_deviation > max(mix_deviation, 1):
        parts.append(f"The coin's prefixes stray up to {coin_deviation:.1f} records: its "
                     "share is right only on average, and nothing pulls a prefix back to it: how "
                     "far off a prefix is depends on the luck of the draws before it.")
    else:
        parts.append(f"The coin's prefixes stray up to {coin_deviation:.1f} records, no more "
                     "than the mix's here: run longer to see a coin wander.")
    return " ".join(parts)


# -- 3. the end of an epoch ----------------------------------------------------------------------
def reads_per_corpus(records: Sequence[Mapping[str, Any]], lengths: Sequence[int]) -> list[dict]:
    """For each corpus, from the records a run read: how many it read, how many distinct
    records, and how many of the corpus's records it never read."""
    corpora = corpus_ids(records)
    keys = np.concatenate([np.atleast_1d(np.asarray(record["key"])) for record in records])
    counts = []
    for corpus, length in enumerate(lengths):
        mine = keys[corpora == corpus]
        distinct = len(np.unique(mine))
        counts.append({"read": len(mine), "distinct": distinct,
                       "never_read": int(length - distinct),
                       "epochs": len(mine) / length})
    return counts


def epoch_end_sentence(mix_length: int, grain_length: int | None, lengths: Sequence[int],
                       counts: Sequence[Mapping[str, int]], streamed: int) -> str:
    """Where the mix ends, which corpus ran out, what the other left unread, and Grain's
    length for the same components."""
    ran_out = [corpus for corpus, (length, count) in enumerate(zip(lengths, counts,
                                                                   strict=True))
               if count["distinct"] == length]
    sizes = ", ".join(f"{name} {length:,}" for name, length in zip(CORPUS_NAMES, lengths,
                                                                    strict=False))
    parts = [f"The corpora hold {sizes} records; len(mix) is {mix_length:,}, and iterating "
             f"the mix gave {streamed:,} records."]
    if ran_out:
        names = " and ".join(CORPUS_NAMES[corpus] for corpus in ran_out)
        tallies = [f"{counts[corpus]['read']:,} reads of {counts[corpus]['distinct']:,} "
                   f"distinct {CORPUS_NAMES[corpus]} records" for corpus in ran_out]
        once = all(counts[corpus]["read"] == counts[corpus]["distinct"] for corpus in ran_out)
        unread = [f"{count['never_read']:,} of the {length:,} {name} records "
                  f"({count['never_read'] / length:.0%})"
                  for name, length, count in zip(CORPUS_NAMES, lengths, counts, strict=False)
                  if count["never_read"]]
        if once:
            parts.append(f"It ends where {names} runs out: {' and '.join(tallies)}, so every "
                         f"{names} record was read exactly once"
                         + (f", and {' and '.join(unread)} were never read." if unread else
                            ", and no record of the other corpus was left unread."))
        else:
            parts.append(f"It ends where {names} runs out, but with {' and '.join(tallies)}: "
                         "some records were read more than once within one epoch, which the "
                         "rule should never do: a bug to report.")
    else:
        parts.append("It ended before any corpus ran out: this run did not read a whole "
                     "epoch.")
    if grain_length is None:
        parts.append("Grain is not installed here, so its length cannot be compared.")
    elif grain_length == mix_length:
        parts.append(f"Grain 0.2.18's MapDataset.mix over components of the same lengths has "
                     f"the same length, {grain_length:,}.")
    else:
        parts.append(f"Grain 0.2.18's MapDataset.mix over components of the same lengths has "
                     f"another length, {grain_length:,}.")
    return " ".join(parts)


def stream_end_sentence(streamed: int, map_length: int) -> str:
    """How many records an `IterDataset.mix` over the same components gave, beside
    `len(MapDataset.mix)`: the two follow different rules, which agree only sometimes."""
    rules = ("IterDataset.mix stops at its first draw from an exhausted component (Grain "
             "0.2.18, mix.py), while len(MapDataset.mix) is the smallest len(component) / "
             "share, rounded down")
    if streamed == map_length:
        return (f"IterDataset.mix over the same two streams stopped after {streamed:,} records, "
                f"MapDataset.mix's length too. The rules differ ({rules}), so the two can "
                "be a few records apart; with these lengths they agree.")
    way = "after" if streamed > map_length else "before"
    return (f"IterDataset.mix over the same two streams stopped after {streamed:,} records, "
            f"{abs(streamed - map_length):,} {way} MapDataset.mix's length ({map_length:,}): "
            f"{rules}.")


def repeat_sentence(counts: Sequence[Mapping[str, float]], positions: int, length: int,
                    share: float) -> str:
    """With every component repeated, whether the mix is endless (`length` is
    `len(repeated)`, endless when it is `sys.maxsize`), how far each corpus got in its first
    `positions` records, and the first corpus's share of them against `share`."""
    parts = []
    for name, count in zip(CORPUS_NAMES, counts, strict=False):
        epochs = count["epochs"]
        if count["never_read"] == 0:
            parts.append(f"{name} {epochs:.2f} epochs (every record read)")
        else:
            parts.append(f"{name} {epochs:.2f} epochs ({count['never_read']:,} records not "
                         "reached yet)")
    if length == sys.maxsize:
        head = ("With repeat() on both components, len(repeated) == sys.maxsize is True: the "
                "mix has no end. ")
    else:
        head = (f"With repeat() on both components, len(repeated) == sys.maxsize is False "
                f"(len is {length:,}): this mix still ends, so a component was not repeated "
                "endlessly. ")
    head += f"Its first {positions:,} records read {', '.join(parts)}."
    total = sum(count["read"] for count in counts)
    measured = counts[0]["read"] / total
    off = abs(counts[0]["read"] - share * total)
    if off <= 1:
        head += (f" {CORPUS_NAMES[0].capitalize()} were {measured:.2%} of them, the rule's "
                 f"{share:.2%} to within one record.")
    else:
        head += (f" {CORPUS_NAMES[0].capitalize()} were {measured:.2%} of them, {off:,.0f} "
                 f"records off the rule's {share:.2%}: a bug to report.")
    if any(count["epochs"] > 1 for count in counts):
        return (head + " The corpus that ran out first starts its next epoch, reshuffled; the "
                "price is that its records come back more often than the other corpus's.")
    return head + " No corpus has passed its first epoch yet in this many records."


# -- 4. MapDataset.mix against IterDataset.mix ----------------------------------------------------
def filter_sentence(kept: int, total: int, map_share: float, iter_share: float,
                    asked: float) -> str:
    """What a filter before each kind of mix does to the code share, measured on the
    records each mix gave."""
    dropped = total - kept
    parts = [f"The filter drops {dropped:,} of {total:,} code pieces ({dropped / total:.0%})."]
    if abs(map_share - asked) > 0.005:
        parts.append(f"Under MapDataset.mix, a filtered position is a hole (None) that "
                     f"iterating skips, so code fell to {map_share:.2%} of the records instead "
                     f"of {asked:.2%}: the weights were silently changed.")
    else:
        parts.append(f"Under MapDataset.mix code stayed at {map_share:.2%}: the filter "
                     "dropped too little to move the share here.")
    if abs(iter_share - asked) <= 0.005:
        parts.append(f"IterDataset.mix draws the next kept record instead, so code is "
                     f"{iter_share:.2%} of its records, the share of the weights.")
    else:
        parts.append(f"IterDataset.mix gave code {iter_share:.2%} of its records, not "
                     f"{asked:.2%}: that is a bug to report.")
    return " ".join(parts)


def access_sentence(comparison: Comparison, position: int) -> str:
    """Reaching one far position: by index on a MapDataset.mix (`comparison.seconds`)
    against streaming an IterDataset.mix to it (`comparison.baseline_seconds`)."""
    how = comparison.how(f"Indexing the MapDataset.mix at position {position:,}",
                         "streaming the IterDataset.mix to it")
    sentence = f"{how} {comparison.numbers()}."
    if comparison.verdict == BETTER:
        return (sentence + " A MapDataset answers any position from its index alone; a "
                "stream must produce every element before it (or be restored from a state "
                "saved there).")
    if comparison.verdict == TOO_NOISY_TO_TELL:
        return sentence + " Too noisy to tell: the run's margin is too wide to name a winner."
    return (sentence + " Streaming was not slower here: the position is too near the start to "
            "show what random access saves.")


def stream_cost_sentence(map_seconds: Sequence[float], iter_seconds: Sequence[float],
                         count: int) -> str:
    """Reading `count` records through each kind of mix, judged by the margin rule."""
    why = {
        WORSE: ("The two chains differ in more than the mix (IterDataset.mix pulls one "
                "element at a time from an iterator per component; MapDataset.mix reads its "
                "mixed positions on the engine's read threads), and this pair does not "
                "isolate which of those costs the time."),
        BETTER: ("The two chains differ in more than the mix (an iterator per component "
                 "against the engine's read threads over the mixed positions), and this pair "
                 "does not isolate why the stream was cheaper."),
        SAME: "Where the mix runs costs nothing measurable next to reading the records.",
    }
    return compare_runs(f"Reading {count:,} records through IterDataset.mix",
                        iter_seconds, "reading them through MapDataset.mix", map_seconds,
                        why=why)


def plot_mix_costs(times: Mapping[str, Sequence[float]]):
    """The timings of part 4 on a log axis, a bar per timing (the median) and a dot per
    run; `times` maps a label (lines split by newlines) to the runs in seconds."""
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=(8.5, 3.8))
    return bar_chart({name: float(np.median(runs)) for name, runs in times.items()},
                     ylabel="seconds (log scale)",
                     title="Reaching a far position, and reading records",
                     value_format=format_duration, log=True, runs=times, ax=ax)


# -- 5. resume -----------------------------------------------------------------------------------
def equal_batches(batches: Sequence[Mapping[str, np.ndarray]],
                  reference: Sequence[Mapping[str, np.ndarray]]) -> list[bool]:
    """For each batch, whether every array equals the reference's batch at the same place
    (a missing batch counts as different)."""
    flags = []
    for place, wanted in enumerate(reference):
        if place >= len(batches):
            flags.append(False)
            continue
        got = batches[place]
        flags.append(set(got) == set(wanted)
                     and all(np.array_equal(got[key], wanted[key]) for key in wanted))
    return flags


def mix_resume_sentence(results: Mapping[str, Sequence[bool]], control: str,
                        library: str = "course_lib") -> str:
    """How many batches after the resume point equal the uninterrupted run's, for each way
    of resuming in `results` on `library`; `control` names the negative control among them,
    which must match none for the others to prove anything."""
    if control not in results:
        raise ValueError(f"control={control!r} is not one of {list(results)}.")
    lines = [f"{name}: {sum(flags)}/{len(flags)} batches equal the uninterrupted run's"
             for name, flags in results.items()]
    resumes = {name: flags for name, flags in results.items() if name != control}
    control_equal = sum(results[control])
    exact = all(all(flags) for flags in resumes.values())
    if control_equal:
        verdict = (f"The control that ignores the saved state matched {control_equal} "
                   "batches, so equal batches do not prove a resume here: the comparison "
                   "cannot tell streams apart.")
    elif exact:
        verdict = (f"Every {library} resume continued exactly, and the control that ignores "
                   "the saved state matched none: the comparison does tell streams apart.")
    else:
        failed = [name for name, flags in resumes.items() if not all(flags)]
        verdict = (f"Not exact: {', '.join(failed)} gave other batches than the uninterrupted "
                   "run (the control matched none, so the comparison is sound).")
    return f"On {library}, " + "; ".join(lines) + ". " + verdict


def reshard_sentence(flags: Sequence[bool]) -> str:
    """A resume that reads one shard of everything (`[0::1]`) from rank 0's state, compared
    with the two-process run: it should match nothing."""
    equal = sum(flags)
    if equal == 0:
        return (f"Read as one shard of everything ([0::1]) from rank 0's state, 0/{len(flags)} "
                "batches equal the two-process run's: the shards define the stream, so a "
                "resume at another process count keeps the old shards.")
    return (f"Read as one shard of everything ([0::1]) from rank 0's state, {equal}/"
            f"{len(flags)} batches equal the two-process run's, which another stream should "
            "not give: the comparison is suspect.")


def plot_resume_grid(results: Mapping[str, Sequence[bool]]):
    """One row per way of resuming, one square per batch after the resume point: filled
    where the batch equals the uninterrupted run's."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    names = list(results)
    grid = np.array([[1 if flag else 0 for flag in results[name]] for name in names])
    figure, ax = plt.subplots(figsize=(max(6.0, 0.35 * grid.shape[1] + 3.5),
                                       0.5 * len(names) + 1.2))
    ax.imshow(grid, cmap=ListedColormap(["tab:red", "tab:green"]), vmin=0, vmax=1,
              aspect="auto")
    ax.set_yticks(range(len(names)), names)
    ax.set_xticks(range(grid.shape[1]), [str(place + 1) for place in range(grid.shape[1])],
                  fontsize="small")
    ax.set_xlabel("batch after the resume point")
    ax.set_xticks(np.arange(-0.5, grid.shape[1]), minor=True)
    ax.set_yticks(np.arange(-0.5, len(names)), minor=True)
    ax.grid(which="minor", color="white", linewidth=1)
    ax.tick_params(which="minor", length=0)
    ax.set_title("Green: the batch equals the uninterrupted run's; red: it does not")
    figure.tight_layout()
    return figure


GRAIN_RESUME_SCRIPT = """\
import json, sys
from absl import flags
flags.FLAGS.mark_as_parsed()  # what a notebook never does; Grain's workers need it
import numpy as np
import grain.python as grain
from course_lib.course.mixing_data_sets import equal_batches
lengths = [int(sys.argv[1]), int(sys.argv[2])]
batch_size, save_after, compare = (int(argument) for argument in sys.argv[3:6])


def records(length, corpus):  # ids only: each record's corpus and key
    return grain.MapDataset.range(length).map(
        lambda key: {"corpus": np.int32(corpus), "key": np.int32(key)})


def mixed_chain(rank=0, count=1, num_workers=0):  # the lesson's chain, step for step
    corpora = [records(length, corpus)[rank::count]
               .shuffle(seed=10 * rank + corpus).repeat()
               for corpus, length in enumerate(lengths)]
    stream = grain.MapDataset.mix(corpora, [0.7, 0.3]).to_iter_dataset()
    if num_workers:
        stream = stream.mp_prefetch(grain.MultiprocessingOptions(num_workers=num_workers))
    return stream.batch(batch_size // count)


def take(chain, batches, state=None):
    iterator = iter(chain)  # Grain's iterator has close() but no `with`
    try:
        if state is not None:
            iterator.set_state(state)
        taken = [next(iterator) for _ in range(batches)]
        return taken, iterator.get_state()
    finally:
        iterator.close()


def global_batches(halves):  # each step's global batch, rank 0's half first
    return [{key: np.concatenate([half[step][key] for half in halves]) for key in halves[0][0]}
            for step in range(len(halves[0]))]


def compared(resume, expected):  # batches equal, or the error Grain raised
    try:
        return sum(equal_batches(resume(), expected))
    except Exception as error:
        return f"{type(error).__name__}: {error}"


# Another worker count: one process, saved at 2 workers, restored at 2, 1 and 0.
reference, _ = take(mixed_chain(num_workers=2), save_after + compare)
_, state = take(mixed_chain(num_workers=2), save_after)
_, state_0 = take(mixed_chain(), save_after)
report = {"state": json.loads(json.dumps(state, default=str)),
          "state_0": json.loads(json.dumps(state_0, default=str))}
for workers in (2, 1, 0):
    report[f"workers {workers}"] = compared(
        lambda: take(mixed_chain(num_workers=workers), compare, state)[0],
        reference[save_after:])

# Another process count: two ranks saved at 1 worker each; one process builds both ranks'
# chains, restores each from its rank's state (at 1 worker, then at 0) and joins the halves.
two_reference = global_batches([take(mixed_chain(rank, 2, 1), save_after + compare)[0]
                                for rank in (0, 1)])[save_after:]
rank_states = [take(mixed_chain(rank, 2, 1), save_after)[1] for rank in (0, 1)]
for workers in (1, 0):
    report[f"ranks {workers}"] = compared(
        lambda: global_batches([take(mixed_chain(rank, 2, workers), compare,
                                     rank_states[rank])[0] for rank in (0, 1)]),
        two_reference)
report["ranks control"] = compared(
    lambda: global_batches([take(mixed_chain(rank, 2, 1), compare)[0] for rank in (0, 1)]),
    two_reference)
print(json.dumps(report))
"""


def grain_resume(lengths: Sequence[int], batch_size: int, save_after: int, compare: int,
                 timeout: float = 600.0) -> dict | None:
    """`GRAIN_RESUME_SCRIPT` run on Grain itself, in a new Python (Grain's workers need
    absl's flags parsed, and `-c` keeps the spawned workers from re-running the script): a
    state saved after `save_after` batches at 2 workers, restored at 2, 1 and 0 workers
    (keys "workers N"); two ranks saved at 1 worker each, restored in one process at 1 and
    at 0 workers (keys "ranks N"), and without their states ("ranks control"). Each value
    is how many of the next `compare` batches equal the uninterrupted run's, or the error
    Grain raised. None where Grain is not installed."""
    import importlib.util

    if importlib.util.find_spec("grain") is None:
        return None
    arguments = [*map(str, lengths), str(batch_size), str(save_after), str(compare)]
    result = subprocess.run([sys.executable, "-c", GRAIN_RESUME_SCRIPT, *arguments],
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no error output"])[-1]
        raise RuntimeError(f"Grain exited with code {result.returncode}: {last}")
    report = json.loads(result.stdout.strip().splitlines()[-1])
    report["compare"] = compare
    return report


def worker_positions(state: Any) -> list[int] | None:
    """The `next_index` of each worker in a state Grain's `mp_prefetch` saved (its
    `iterators_in_use_states`, one per worker), or None where the state has no such list."""
    if not isinstance(state, Mapping):
        return None
    states = state.get("iterators_in_use_states")
    if not isinstance(states, list) or not states or not all(
            isinstance(one, Mapping) and isinstance(one.get("next_index"), int)
            for one in states):
        return None
    return [int(one["next_index"]) for one in states]


def grain_state_sentence(report: Mapping[str, Any], course_lib_state: Mapping[str, Any],
                         save_after: int) -> str:
    """Grain's state saved after `save_after` batches at 2 workers and at 0, read for its
    per-worker positions, beside course_lib's state at the same place."""
    state, state_0 = report["state"], report.get("state_0")
    ours = course_lib_state.get("next_index")
    parts = [f"On Grain 0.2.18, the state saved after {save_after} batches at 2 workers is "
             f"{json.dumps(state)}."]
    positions = worker_positions(state)
    if positions is None:
        parts.append("It holds no list of per-worker positions that this lesson can read: "
                     f"compare it with course_lib's, {json.dumps(dict(course_lib_state))}.")
    else:
        listed = " and ".join(f"{position:,}" for position in positions)
        together = (f", together {sum(positions):,}, the one number course_lib's state holds "
                    f"in the same place ({json.dumps(dict(course_lib_state))})"
                    if sum(positions) == ours else
                    f"; course_lib's state in the same place is "
                    f"{json.dumps(dict(course_lib_state))}")
        parts.append(f"It holds one next_index per worker ({len(positions)} of them: {listed}), "
                     f"each counting the records of that worker's slice of the stream"
                     f"{together}: the worker count is part of Grain's state.")
    if state_0 is not None:
        zero = worker_positions(state_0)
        kind = ("one number, like course_lib's at 2 workers" if zero is None
                and isinstance(state_0, Mapping) and list(state_0) == ["next_index"] else
                "another layout")
        parts.append(f"Saved at 0 workers, Grain's is {json.dumps(state_0)}: {kind}.")
    return " ".join(parts)


def grain_resume_sentence(report: Mapping[str, Any] | None) -> str:
    """What Grain did with the states of `grain_resume`: the one saved at 2 workers, restored
    at 2, 1 and 0 workers; the two ranks' states, restored in one process at 1 worker (the
    count they were saved at) and at 0; and the control that ignores the ranks' states."""
    if report is None:
        return ("Grain is not installed here, so its resume cannot be measured (`pip install "
                "grain`); course_lib's results above stand alone.")
    compare = report["compare"]

    def outcome(key: str) -> str:
        found = report[key]
        if isinstance(found, int):
            return (f"continued exactly ({found}/{compare} batches equal)" if found == compare
                    else f"gave other batches ({found}/{compare} equal)")
        return f"did not restore ({found})"

    def exact(key: str) -> bool:
        return report[key] == compare

    workers = {"2": "2 workers", "1": "1 worker", "0": "0 workers"}
    worker_parts = [f"at {workers[n]} it {outcome('workers ' + n)}" for n in ("2", "1", "0")]
    rank_parts = [f"each rank restored at {workers[n]}, it {outcome('ranks ' + n)}"
                  for n in ("1", "0")]
    control = report["ranks control"]
    control_text = (f"ignoring the states, {control}/{compare} batches equal"
                    if isinstance(control, int) else f"ignoring the states, {control}")
    sentences = [
        "Restored on Grain 0.2.18, the state saved at 2 workers: " + "; ".join(worker_parts) + ".",
        "Two ranks saved at 1 worker each and resumed in one process that keeps both shards: "
        + "; ".join(rank_parts) + "; " + control_text + "."]
    same_count = ["workers 2", "ranks 1"]
    other_count = ["workers 1", "workers 0", "ranks 0"]
    if isinstance(control, int) and control > 0:
        sentences.append("The control matched batches without the states, so equal batches "
                         "prove nothing on Grain here.")
    elif all(exact(key) for key in same_count) and not any(exact(key) for key in other_count):
        sentences.append("So Grain 0.2.18 resumes a mix exactly where the worker count stays "
                         "the same, at another process count too when each old rank's chain "
                         "is restored from its own state; a state saved at one worker count "
                         "did not continue at another, in either part.")
    else:
        names = {"workers 2": "2 → 2 workers", "workers 1": "2 → 1 worker",
                 "workers 0": "2 → 0 workers", "ranks 1": "2 processes → 1 at 1 worker",
                 "ranks 0": "2 processes → 1, 1 → 0 workers"}
        done = [names[key] for key in same_count + other_count if exact(key)]
        missed = [names[key] for key in same_count + other_count if not exact(key)]
        sentences.append(f"Exact on Grain 0.2.18: {', '.join(done) or 'none'}; not exact: "
                         f"{', '.join(missed) or 'none'}.")
    return " ".join(sentences)


# -- 6. a split done wrong -----------------------------------------------------------------------
def leaks_per_epoch(train, validation_keys: Sequence[int], epochs: int) -> list[int]:
    """How many of each training epoch's records are validation records; `train` is a
    MapDataset (course_lib's or Grain's) of record keys, repeated at least `epochs` times,
    whose first epoch has `epoch_length = len(train) // epochs` records."""
    held_out = set(int(key) for key in validation_keys)
    length = len(train) // epochs
    return [sum(int(train[position]) in held_out
                for position in range(epoch * length, (epoch + 1) * length))
            for epoch in range(epochs)]


def plot_leaks(leaks: Mapping[str, Sequence[int]], validation_size: int):
    """Validation records read in each training epoch, one group of bars per epoch and one
    bar per way of splitting."""
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(8, 3.4))
    names = list(leaks)
    epochs = max(len(counts) for counts in leaks.values())
    width = 0.8 / len(names)
    for place, name in enumerate(names):
        xs = np.arange(1, len(leaks[name]) + 1) + (place - (len(names) - 1) / 2) * width
        bars = ax.bar(xs, leaks[name], width=width, label=name)
        ax.bar_label(bars, fontsize="small")
    ax.set_xticks(range(1, epochs + 1))
    ax.set_xlabel("training epoch")
    ax.set_ylabel("validation records trained on")
    ax.set_title(f"Held-out records that came back into training (of {validation_size:,})")
    ax.margins(y=0.2)
    ax.legend(fontsize="small")
    figure.tight_layout()
    return figure


def split_sentence(wrong: Sequence[int], grain_wrong: Sequence[int] | None,
                   right: Sequence[int], validation_size: int) -> str:
    """The leaks of the wrong split on course_lib and on Grain, and of the right one."""
    def listed(counts: Sequence[int]) -> str:
        return ", ".join(f"{count:,}" for count in counts)

    parts = []
    if wrong[0] == 0 and any(count > 0 for count in wrong[1:]):
        parts.append(f"Shuffled, then sliced, then repeated: training epoch 1 holds none of "
                     f"the {validation_size:,} validation records, but the epochs after it "
                     f"hold {listed(wrong[1:])} of them: each epoch is a new shuffle, and the "
                     "slice takes its positions, not its records, so records held out in epoch "
                     "1 land in training later.")
    elif any(wrong):
        parts.append(f"Shuffled, then sliced, then repeated: validation records in training, "
                     f"epoch by epoch: {listed(wrong)}.")
    else:
        parts.append("Shuffled, then sliced, then repeated: no validation record reached "
                     "training in these epochs (each epoch kept the first epoch's order).")
    if grain_wrong is None:
        parts.append("Grain is not installed here, so its split cannot be measured.")
    elif list(grain_wrong) == list(wrong):
        parts.append(f"Grain 0.2.18, the same chain: {listed(grain_wrong)}, the same counts.")
    else:
        parts.append(f"Grain 0.2.18, the same chain: {listed(grain_wrong)} (its shuffle is "
                     "another permutation, so other counts; "
                     + ("the same leak from epoch 2 on)." if grain_wrong[0] == 0
                        and any(grain_wrong[1:]) else "see the counts)."))
    if any(right):
        parts.append(f"Sliced first, then shuffled and repeated: still {listed(right)} leaked, "
                     "which the split should have made impossible: a bug to report.")
    else:
        parts.append("Sliced first, then shuffled and repeated: 0 in every epoch, because the "
                     "training part never holds a validation record to shuffle in.")
    return " ".join(parts)


# -- 7. the speed cost in the loop ---------------------------------------------------------------
def training_speed_sentence(mixed_seconds: Sequence[float],
                            single_seconds: Sequence[float], steps: int,
                            loader_mixed: Sequence[float],
                            loader_single: Sequence[float]) -> str:
    """Steps per second of the loop fed by the mixed chain against one source, and the
    loaders alone, each judged by the margin rule; a cause is named only where the loaders'
    own difference is beyond their margin."""
    loop = Comparison(tuple(mixed_seconds), tuple(single_seconds))
    loaders = Comparison(tuple(loader_mixed), tuple(loader_single))
    rate, single_rate = steps / loop.median, steps / loop.baseline_median
    head = (f"{steps} training steps: {rate:.1f} steps/s fed by the mix, {single_rate:.1f} "
            f"fed by the docstrings alone. ")
    body = f"{loop.how('The mixed loop', 'the single-source loop')} {loop.numbers()}."
    loader_part = (f" The loaders alone, {steps} batches each: "
                   f"{loaders.how('the mix', 'one source')} {loaders.numbers()}.")
    said = head + body + loader_part
    if loop.verdict == TOO_NOISY_TO_TELL:
        return said + (f" The loops' margin is wider than {TOO_NOISY:.0%}, so this run cannot "
                       "tell whether the mix costs the loop anything, and no cause is named; "
                       "a quieter machine can tell.")
    if loop.verdict == SAME and loaders.verdict == WORSE:
        extra = (loaders.median - loaders.baseline_median) / steps
        return said + (
            f" The mixed chain adds about {format_duration(extra)} per batch to the loader, "
            f"against {format_duration(loop.median / steps)} per step of the whole loop: too "
            "little for the loop to feel.")
    if loop.verdict == SAME and loaders.verdict == SAME:
        return said + (" Neither the loop nor the loader alone shows a cost beyond its margin: "
                       "mixing costs nothing measurable here.")
    if loop.verdict == SAME and loaders.verdict == BETTER:
        return said + (" The mixed loader was the faster one, although the mix adds work: "
                       "something else differs between the two feeds (their records, for "
                       "one), and this measurement does not say what; the loop does not feel "
                       "it either way.")
    if loop.verdict == SAME:
        return said + (" The loaders alone are too noisy to tell apart, so this run says only "
                       "that the loop does not feel the mix.")
    if loop.verdict == WORSE and loaders.verdict == WORSE:
        loader_extra = (loaders.median - loaders.baseline_median) / steps
        loop_extra = (loop.median - loop.baseline_median) / steps
        compared = (f" The loader alone is slower with the mix too "
                    f"({format_times(1 / loaders.ratio)} the time per batch): it adds "
                    f"{format_duration(loader_extra)} per batch, against "
                    f"{format_duration(loop_extra)} more per step in the loop")
        if loader_extra >= loop_extra / 2:
            return said + compared + ", so the mix's own cost is most of what the loop lost."
        return said + compared + (
            f", so the mix's own cost is at most {loader_extra / loop_extra:.0%} of what the "
            "loop lost; this run does not isolate the rest (the two feeds' records differ "
            "too).")
    if loop.verdict == WORSE:
        return said + (" The loaders alone do not show the mix slower beyond their margin, so "
                       "this measurement cannot say the mix is the cause.")
    return said + (" The mixed loop was the faster one, although the mix adds work: something "
                   "else differs between the two feeds (their records, for one), and this "
                   "measurement does not say what.")


def plot_training_speed(runs: Mapping[str, Sequence[float]], steps: int,
                        loaders: Mapping[str, Sequence[float]]):
    """Left: steps per second of the loop fed by each chain; right: the time of the loader
    alone for the same number of batches. A bar per feed (the median) and a dot per run."""
    import matplotlib.pyplot as plt

    rates = {name: [steps / seconds for seconds in times] for name, times in runs.items()}
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    bar_chart({name: float(np.median(values)) for name, values in rates.items()},
              ylabel="training steps per second",
              title=f"The loop fed by each chain ({steps} steps a run)",
              value_format="{:.1f}", runs=rates, statistic="median", ax=left)
    milliseconds = {name: [1e3 * seconds for seconds in times] for name, times in loaders.items()}
    bar_chart({name: float(np.median(times)) for name, times in milliseconds.items()},
              ylabel="milliseconds", title=f"The loader alone ({steps} batches a run)",
              value_format=lambda value: format_duration(value / 1e3), runs=milliseconds,
              statistic="median", ax=right)
    figure.tight_layout()
    return figure
