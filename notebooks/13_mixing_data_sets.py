# %% [markdown]
# # Lesson 13: Mixing data sets
#
# After this lesson you can train on two corpora at once in fixed proportions with
# `MapDataset.mix` and `IterDataset.mix`: you will read the rule that places every record of
# the mix, measure what each batch holds against the weights, see where a mix ends and what
# `repeat` changes, choose between the two kinds of mix when a component is filtered, resume
# a mix exactly at another worker count and another process count, catch a train/validation
# split that leaks held-out records back into training, and measure what mixing costs in a
# training loop.
#
# It assumes lesson 2 (a `MapDataset` chain), lesson 5 (a shard per process), lesson 8
# (saving the data position) and lesson 10 (the Dataset API's `IterDataset` steps).
# Exercise 9 asks you to write the rule yourself.

# %%
import json
import time

import jax
import numpy as np
from flax import nnx

import course_lib as grain
from course_lib import course, mixing, sequence_model

course.print_mode()
real_grain = course.import_grain()  # import grain.python; None if it is not installed

# %% [markdown]
# ## The question: what does a 70/30 mix of two corpora feed the model?
#
# A model trains on two corpora, 70% of its records from one and 30% from the other. Ours
# ship with Python: the docstrings of the standard library's top-level modules, and the
# source code of those modules, each cut into pieces of at most `ROW_LENGTH` bytes (the
# capstone's corpora). A record is one piece, padded with zeros to one row, and it carries
# the corpus it comes from and its index in that corpus, so that every count below is read
# from the records the mix hands out. Three questions: what does each batch hold, what
# happens when the smaller corpus runs out, and does a resume, or a change of worker count
# or process count, give the same mixture?

# %%
ROW_LENGTH, BATCH = course.ROW_LENGTH, course.MIX_BATCH
WEIGHTS = [0.7, 0.3]  # docstrings, code
text = course.capstone.text_pieces(ROW_LENGTH, limit=course.choose(fast=800, full=None))
code = course.capstone.code_pieces(ROW_LENGTH, limit=course.choose(fast=30, full=None))
sources = [course.CorpusPieces(text, corpus=0), course.CorpusPieces(code, corpus=1)]
print(f"{len(text):,} docstring pieces and {len(code):,} code pieces of at most {ROW_LENGTH} "
      f"bytes; a record: {sorted(sources[0][0])}, tokens of shape {sources[0][0]['tokens'].shape}")

# %% [markdown]
# ## 1. The rule: every position placed by arithmetic
#
# `MapDataset.mix(datasets, weights)` answers "record `k` of the mix?" from `k` alone. The
# rule (`course_lib/mixing.py`, the same arithmetic as `_dataset_and_key_of_next_element`
# in Grain 0.2.18's `mix.py`) asks how many of the first `k` records belong to the
# components after the first: `k * (W - w_0) // W` for integer weights `w` summing to `W`.
# If that count does not grow from `k` to `k + 1`, record `k` is the first component's, and
# its index there is how many of the first `k + 1` records are the first component's, minus
# one; otherwise the same question is asked again among the other components. No counter,
# no random state: any position is computed directly, and a resume needs one number.
#
# The rule works on integers, so the weights are turned into integers first: the smallest
# becomes 100 and the others are scaled alike and truncated (`_float_to_int_proportions` in
# Grain's `mix.py`, `integer_weights` in course_lib's):

# %%
integers = mixing.integer_weights(WEIGHTS, len(WEIGHTS))
share = integers[0] / sum(integers)  # the docstrings' long-run share under the rule
print(course.rule_sentence(WEIGHTS, integers, course.grain_integer_weights(WEIGHTS)))

# %% [markdown]
# The first ten records of the mix, so you can read the rule at work: the component each
# position goes to, and the index inside it. Each component is read in order, with no gap
# and no repeat; the last column is Grain's `MapDataset.mix` over the same two sources.

# %%
# NBVAL_CHECK_OUTPUT
mixed = grain.MapDataset.mix([grain.MapDataset.source(source) for source in sources], WEIGHTS)
grain_mixed = (real_grain.MapDataset.mix([real_grain.MapDataset.source(source)
                                          for source in sources], WEIGHTS)
               if real_grain is not None else None)
grain_pairs = (None if grain_mixed is None else
               [(int(grain_mixed[k]["corpus"]), int(grain_mixed[k]["key"])) for k in range(10)])
course.print_positions([mixed[k] for k in range(10)], grain_pairs)

# %% [markdown]
# ## 2. What each batch holds
#
# The other way to mix is a weighted coin per record: draw the corpus with probability 0.7
# and 0.3. Its share is right on average, but nothing holds a batch or a prefix of the
# stream to it. Here is one epoch of the mix cut into batches of `BATCH`, against a coin
# per record with the same share (the rule's long-run share printed above), drawn from a
# seeded generator:

# %%
records = [mixed[k] for k in range(len(mixed) // BATCH * BATCH)]  # whole batches
by_rule = course.corpus_ids(records)
by_coin = course.coin_components(len(by_rule), share, seed=0)
rule_counts, coin_counts = course.per_batch(by_rule, BATCH), course.per_batch(by_coin, BATCH)
rule_off = course.prefix_deviation(by_rule, share)
coin_off = course.prefix_deviation(by_coin, share)
print(course.batch_share_sentence(rule_counts, coin_counts, rule_off.max(), coin_off.max(),
                                  BATCH, share))
course.plot_batch_shares(rule_counts, coin_counts, rule_off, coin_off, BATCH, share);

# %% [markdown]
# Every prefix of the mix holds its share, rounded, so every batch stays close to it too,
# never a batch made mostly of code. The coin's batches spread over a wide range, and its prefixes wander away from the share
# by more and more records as the run goes. For training, the difference shows as noise:
# how much each step's gradient comes from each corpus changes from step to step with the
# coin, and hardly at all with the rule.
#
# ## 3. The end of an epoch
#
# Grain 0.2.18's docstrings state the rule: `MapDataset.mix` "Length of the mixed dataset
# will be determined by the length of the shortest input dataset. If you need an infinite
# dateset consider repeating the input datasets before mixing", and `IterDataset.mix`
# "Stops producing elements once *any* input dataset is exhausted." Its code
# (`SelectionWithProportionsMap`) makes "shortest" precise: the length is the smallest
# `len(component) / share`, the point where the first component runs out at its share.
# Iterating a mix reads to that point; what the other components have not handed out by
# then is never read in that epoch. Counted from the records themselves:

# %%
one_epoch = list(mixed.to_iter_dataset())  # iterating the mix, to its end
counts = course.reads_per_corpus(one_epoch, [len(text), len(code)])
print(course.epoch_end_sentence(len(mixed), None if grain_mixed is None else len(grain_mixed),
                                [len(text), len(code)], counts, len(one_epoch)))
streams = [grain.MapDataset.source(source).to_iter_dataset() for source in sources]
streamed = sum(1 for _ in grain.IterDataset.mix(streams, WEIGHTS))
print(f"IterDataset.mix over the same two streams stopped after {streamed:,} records "
      f"(MapDataset.mix's length: {len(mixed):,}).")

# %% [markdown]
# A training run that wants every code record needs more than one epoch of the docstrings.
# `repeat()` on each component (after its `shuffle`, so that each epoch is a new order)
# makes every component endless, so the mix never runs out: the shares stay those of the
# weights, and the smaller corpus is read again, reshuffled, while the larger one goes on.
# Read until the code corpus should have come round once:

# %%
repeated = grain.MapDataset.mix([grain.MapDataset.source(source).shuffle(seed=corpus).repeat()
                                  for corpus, source in enumerate(sources)], WEIGHTS)
until = -(-len(code) * sum(integers) // integers[1])  # positions that hold len(code) code records
long_run = [repeated[k] for k in range(until)]
print(course.repeat_sentence(course.reads_per_corpus(long_run, [len(text), len(code)]), until))

# %% [markdown]
# ## 4. `MapDataset.mix` against `IterDataset.mix`
#
# Some components need a step that only a stream can do. A filter is the common one: here,
# drop the code pieces that hold a triple quote, text the docstring corpus may already
# hold. On a `MapDataset`, `filter` keeps the positions and makes a dropped record `None`
# (in Grain and in course_lib), and iterating skips the `None`s. Under `MapDataset.mix`
# the rule still gives those positions to code, so every dropped code record is a record
# the mix no longer hands out, and the share moves. `IterDataset.mix` asks each component
# for its next element instead, and a filtered stream's next element is the next one kept:

# %%
code_kept = grain.MapDataset.source(sources[1]).filter(course.no_docstring_quote)
kept = sum(1 for _ in code_kept.to_iter_dataset())
docstrings = grain.MapDataset.source(sources[0])
with_holes = list(grain.MapDataset.mix([docstrings, code_kept], WEIGHTS).to_iter_dataset())


def filtered_mix():  # the filter forces the streaming mix
    return grain.IterDataset.mix([docstrings.to_iter_dataset(), code_kept.to_iter_dataset()],
                                 WEIGHTS)


streamed_mix = list(filtered_mix())
print(course.filter_sentence(kept, len(code), float(np.mean(course.corpus_ids(with_holes))),
                             float(np.mean(course.corpus_ids(streamed_mix))), 1 - share))

# %% [markdown]
# What each allows. A `MapDataset.mix` answers any position by index: `mixed[k]` computes
# the component and index from `k` and reads that one record. An `IterDataset.mix` only
# answers "next?": to reach position `k` it must produce every record before it (or be
# restored from a state saved there). Measured: reaching one far position both ways, and
# reading the same records through each kind of mix (here both over the unfiltered
# components, so that the records are the same and only where the mix runs differs):

# %%
far = course.choose(fast=2_000, full=10_000)
count = course.choose(fast=2_000, full=5_000)
repeats = course.choose(fast=3, full=5)


def index_to_far():
    return mixed[far]


def stream_to_far():
    with iter(filtered_mix()) as iterator:
        for _ in range(far + 1):
            record = next(iterator)
    return record


def read_map_mix():
    with iter(mixed.to_iter_dataset()) as iterator:
        return [next(iterator) for _ in range(count)]


def read_iter_mix():
    parts = [grain.MapDataset.source(source).to_iter_dataset() for source in sources]
    with iter(grain.IterDataset.mix(parts, WEIGHTS)) as iterator:
        return [next(iterator) for _ in range(count)]


times = {name: course.run_times(function, repeats) for name, function in
         [("index to far", index_to_far), ("stream to far", stream_to_far),
          ("read via Map", read_map_mix), ("read via Iter", read_iter_mix)]}
print(f"The same {count:,} records both ways: "
      f"{course.equal_batches(read_iter_mix(), read_map_mix()) == [True] * count}")
print(course.access_sentence(course.Comparison(tuple(times["index to far"]),
                                               tuple(times["stream to far"])), far))
print(course.stream_cost_sentence(times["read via Map"], times["read via Iter"], count))
labels = {"index to far": f"MapDataset.mix:\nindex [{far:,}]",
          "stream to far": f"IterDataset.mix,\nfiltered: stream to {far:,}",
          "read via Map": f"MapDataset.mix:\nread {count:,} records",
          "read via Iter": f"IterDataset.mix:\nread {count:,} records"}
course.plot_mix_costs({labels[name]: runs for name, runs in times.items()});

# %% [markdown]
# So keep `MapDataset.mix` where every component is a `MapDataset` (random access, a
# resume from one position, the mix run on the engine's read threads and workers), and
# use `IterDataset.mix` when a component must be a stream (a filter, packing, a source you
# can only iterate). Grain has the same two mixes, with the same rule.
#
# ## 5. Exact resume at another worker count and another process count
#
# The chain of a real run: for each corpus, its records for this process (`[rank::count]`,
# lesson 5), shuffled with a seed of its own, repeated endlessly; the mix; worker processes
# (`mp_prefetch`); batches. `count` processes together make a global batch of `BATCH`
# records, `BATCH // count` from each:

# %%
def mixed_chain(rank=0, count=1, num_workers=0):
    corpora = [grain.MapDataset.source(source)[rank::count]  # this process's records
               .shuffle(seed=10 * rank + corpus)  # its own order, new every epoch
               .repeat()  # endless: the mix never runs out
               for corpus, source in enumerate(sources)]
    stream = grain.MapDataset.mix(corpora, WEIGHTS).to_iter_dataset()
    if num_workers:
        stream = stream.mp_prefetch(grain.MultiprocessingOptions(num_workers=num_workers))
    return stream.batch(BATCH // count)


SAVE, COMPARE = course.choose(fast=(4, 8), full=(8, 16))  # batches before and after the save


def take(chain, batches, state=None):
    """The next `batches` batches of `chain`, restored from `state` first if given, and
    the state after them."""
    with iter(chain) as iterator:
        if state is not None:
            iterator.set_state(state)
        taken = [next(iterator) for _ in range(batches)]
        return taken, iterator.get_state()


reference, _ = take(mixed_chain(num_workers=2), SAVE + COMPARE)  # uninterrupted, 2 workers
_, state = take(mixed_chain(num_workers=2), SAVE)  # stopped after SAVE batches
print(f"The state saved after {SAVE} batches at 2 workers: {json.dumps(state)}")

# %% [markdown]
# The state is one number: how many records of the mixed stream were handed out. Every
# record after it follows from the rule and the seeds, whichever worker reads it. Restored
# at 1 worker and at none, the next batches are compared with the uninterrupted run's; a
# negative control starts the same chain without the state, so that an equality that
# proves nothing would show:

# %%
# NBVAL_CHECK_OUTPUT
after_save = reference[SAVE:]
workers = {
    "2 → 1 worker": course.equal_batches(take(mixed_chain(num_workers=1), COMPARE, state)[0],
                                         after_save),
    "2 → 0 workers": course.equal_batches(take(mixed_chain(), COMPARE, state)[0], after_save),
    "ignoring the state": course.equal_batches(take(mixed_chain(), COMPARE)[0], after_save),
}
print(course.mix_resume_sentence(workers, control="ignoring the state"))

# %% [markdown]
# Another process count. Two processes each read their shard of each corpus and hand out
# `BATCH // 2` records a step; the global batch is the two halves, rank 0's first. They are
# simulated in this one process: each rank's chain is built with its index and the count,
# as `ShardByJaxProcess` would give them, and saves its own state. A job resumed on one
# process cannot simply read one shard of everything (`[0::1]`): that is another stream,
# with other records in other places. It keeps the two logical shards: the one process
# builds both ranks' chains, restores each from its rank's state, and puts the halves
# together as the two processes did. Compared, batch by batch, with the uninterrupted
# two-process run:

# %%
def global_batches(halves):
    """Each step's global batch: the ranks' local batches, rank 0 first."""
    return [{key: np.concatenate([half[step][key] for half in halves]) for key in halves[0][0]}
            for step in range(len(halves[0]))]


two_ranks = [take(mixed_chain(rank, 2, num_workers=1), SAVE + COMPARE)[0] for rank in (0, 1)]
two_reference = global_batches(two_ranks)[SAVE:]
rank_states = [take(mixed_chain(rank, 2, num_workers=1), SAVE)[1] for rank in (0, 1)]
one_process = global_batches([take(mixed_chain(rank, 2), COMPARE, rank_states[rank])[0]
                              for rank in (0, 1)])
resharded = take(mixed_chain(0, 1), COMPARE, rank_states[0])[0]
processes = {
    "2 processes → 1": course.equal_batches(one_process, two_reference),
    "ignoring the states": course.equal_batches(
        global_batches([take(mixed_chain(rank, 2), COMPARE)[0] for rank in (0, 1)]),
        two_reference),
}
print(course.mix_resume_sentence(processes, control="ignoring the states"))
print(course.reshard_sentence(course.equal_batches(resharded, two_reference)))
course.plot_resume_grid({**workers, **processes,
                         "one shard [0::1], rank 0's state": course.equal_batches(
                             resharded, two_reference)});

# %% [markdown]
# Grain promises less. Its `mp_prefetch` runs the chain below it in each worker on a slice
# of the stream, and its state holds each worker's own position, so the worker count is
# part of the state. The same chain on Grain, in a new process (Grain's workers need absl's
# flags parsed, which a notebook never does), saved at 2 workers after the same number of
# batches and restored at 2, 1 and 0; an error Grain raises is caught and printed as the
# measurement, and the notebook goes on:

# %%
print(course.grain_resume_sentence(course.grain_resume([len(text), len(code)], BATCH, SAVE,
                                                       COMPARE)))

# %% [markdown]
# ## 6. A split done wrong
#
# Holding out a validation set from one corpus looks like one line: shuffle, take the first
# tenth for validation, train on the rest, and repeat the training part for several
# epochs. In that order it leaks. `shuffle` reshuffles every epoch, and a slice of a
# repeated chain takes positions, not records: training epoch 2 is the positions after the
# first tenth *of the second shuffle*, which hold records that the first shuffle put in the
# validation set. Counted on the docstring corpus's record keys, epoch by epoch, on
# course_lib and on Grain with the same chain:

# %%
EPOCHS = 3
keys = grain.MapDataset.range(len(text))  # the docstring records, by key
held_out = len(text) // 10
shuffled = keys.shuffle(seed=0)
validation, train_wrong = shuffled[:held_out], shuffled[held_out:].repeat(EPOCHS)
leaks = {"shuffle, slice, repeat": course.leaks_per_epoch(train_wrong, list(validation), EPOCHS)}
if real_grain is not None:
    theirs = real_grain.MapDataset.range(len(text)).shuffle(seed=0)
    leaks["the same on Grain"] = course.leaks_per_epoch(
        theirs[held_out:].repeat(EPOCHS), list(theirs[:held_out]), EPOCHS)

# %% [markdown]
# Done right, the split comes first and is fixed: slice the records, then shuffle and
# repeat only the training part. Each epoch is still a new order, of the training records
# alone:

# %%
validation_right = keys[:held_out]
train_right = keys[held_out:].shuffle(seed=0).repeat(EPOCHS)
leaks["slice, then shuffle, repeat"] = course.leaks_per_epoch(train_right,
                                                              list(validation_right), EPOCHS)
print(course.split_sentence(leaks["shuffle, slice, repeat"], leaks.get("the same on Grain"),
                            leaks["slice, then shuffle, repeat"], held_out))
course.plot_leaks(leaks, held_out);

# %% [markdown]
# In a mix, each component is split this way before it is mixed: the training chain mixes
# the training parts, and validation reads the held-out parts on their own.
#
# ## 7. What mixing costs in the training loop
#
# The rule is a few integer operations per record. Does a loop feel it? Lesson 10's model
# (`course_lib.sequence_model`: byte and position embeddings, one attention layer, Adam),
# trained on batches of `BATCH` pieces from two chains with no worker processes: the mixed
# chain of part 5, and the docstrings alone through the same steps. The loop:

# %%
model = sequence_model.create_model(ROW_LENGTH, seed=0)
optimizer = sequence_model.create_optimizer(model)
step = nnx.jit(sequence_model.train_step)
positions = np.broadcast_to(np.arange(ROW_LENGTH, dtype=np.int32), (BATCH, ROW_LENGTH))


def single_chain():
    corpus = grain.MapDataset.source(sources[0]).shuffle(seed=0).repeat()
    return corpus.to_iter_dataset().batch(BATCH)


def train(chain, steps):
    """`steps` training steps fed by `chain`; the loop's wall time in seconds."""
    with iter(chain) as batches:
        start = time.perf_counter()
        for _ in range(steps):
            tokens = next(batches)["tokens"]
            loss = step(model, optimizer, tokens, (tokens > 0).astype(np.int32), positions)
        jax.block_until_ready(loss)
        return time.perf_counter() - start


def read(chain, steps):
    """The same batches without the model: the loader alone."""
    with iter(chain) as batches:
        start = time.perf_counter()
        for _ in range(steps):
            next(batches)
        return time.perf_counter() - start

# %%
STEPS, RUNS = course.choose(fast=(10, 3), full=(40, 5))
train(single_chain(), 2)  # compile the step once, outside the clock
runs = {"mixed": [], "docstrings alone": []}
loaders = {"mixed": [], "docstrings alone": []}
for _ in range(RUNS):  # alternate, so that a slow moment of the machine hits both
    runs["mixed"].append(train(mixed_chain(), STEPS))
    runs["docstrings alone"].append(train(single_chain(), STEPS))
    loaders["mixed"].append(read(mixed_chain(), STEPS))
    loaders["docstrings alone"].append(read(single_chain(), STEPS))
print(course.noise_rule())
print(course.training_speed_sentence(runs["mixed"], runs["docstrings alone"], STEPS,
                                     loaders["mixed"], loaders["docstrings alone"]))
print(course.accelerator_sentence())
course.plot_training_speed(runs, STEPS);

# %% [markdown]
# ## What to remember
#
# - `MapDataset.mix(datasets, weights)` places every record by arithmetic on its position:
#   every prefix, so every batch, holds the weights' share rounded, each component is read
#   in order, and a resume is one number. The weights become integers first (the smallest
#   scaled to 100, truncated), so check the share they give.
# - A mix ends where its first component runs out at its share; the rest of the others is
#   not read in that epoch. `shuffle` then `repeat()` each component to run on, each
#   epoch reshuffled.
# - Keep `MapDataset.mix` while every component is a `MapDataset`; a filter under it
#   silently changes the shares. Mix streams with `IterDataset.mix`, at the price of
#   random access.
# - course_lib resumes a mix exactly at another worker count, and at another process count
#   when the new job keeps the old shards and restores each from its state. Grain 0.2.18's
#   `mp_prefetch` state holds each worker's position: part 5 measured what restoring it at
#   another worker count does.
# - Split before you shuffle and repeat: a slice after a per-epoch shuffle takes positions,
#   and held-out records come back into training from the second epoch on.
# - Mixing's own cost is a few integer operations per record; measure it in your loop
#   before blaming it.
