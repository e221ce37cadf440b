"""Lesson 5, sharding: the keys each policy deals to a process, and their pictures; which
records meet in one global step epoch after epoch; and step counts once a filter runs.
`unread_keys_sentence` and `stride_shards_sentence` read what the lesson's cells measured:
the keys each shard's loader read (and those no shard read), and the sizes of the shards
that dealing by stride makes."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections.abc import Mapping, Sequence

import numpy as np


def plot_shard_sizes(sizes: Mapping[bool, Mapping[int, Sequence[int]]], num_records: int, *,
                     loader: str = "course_lib's loader"):
    """Smallest and largest shard, and records read by no shard, per shard count, for
    `drop_remainder` False and True (`sizes[drop][count]` lists the shard sizes), as
    `loader` reads them (its name goes in the title)."""
    import matplotlib.pyplot as plt

    figure, (size_ax, lost_ax) = plt.subplots(1, 2, figsize=(10, 3.4))
    # drop_remainder=True in large hollow squares over small filled dots, so that where the
    # two lines meet (every count that divides num_records) both markers stay visible
    styles = {False: {"marker": "o", "markersize": 5},
              True: {"marker": "s", "markersize": 10, "markerfacecolor": "none",
                     "markeredgewidth": 1.5}}
    for drop in (False, True):
        counts = sorted(sizes[drop])
        spread = [max(sizes[drop][count]) - min(sizes[drop][count]) for count in counts]
        lost = [num_records - sum(sizes[drop][count]) for count in counts]
        label = f"drop_remainder={drop}"
        size_ax.plot(counts, spread, label=label, **styles[drop])
        lost_ax.plot(counts, lost, label=label, **styles[drop])
    size_ax.set_xlabel("number of shards (processes)")
    size_ax.set_ylabel("largest minus smallest shard")
    size_ax.set_title("Do all shards have the same size?")
    lost_ax.set_xlabel("number of shards (processes)")
    lost_ax.set_ylabel("records read by no shard")
    lost_ax.set_title(f"Records left out, of {num_records}")
    figure.suptitle(f"Shard sizes as {loader} reads them")
    for ax in (size_ax, lost_ax):
        ax.legend()
        ax.set_ylim(bottom=-0.2)
        ax.yaxis.set_major_locator(plt.MaxNLocator(integer=True))  # records come whole
    figure.tight_layout()
    return figure


def plot_shard_policies(policies: Mapping[str, np.ndarray], labels: np.ndarray, *,
                        batch_size: int, num_steps: int):
    """For each policy (name -> one shard's keys in reading order): the labels of that
    shard's first local batches as a heatmap, and where in the file its reads land."""
    import matplotlib.pyplot as plt

    classes = int(labels.max()) + 1
    figure, axes = plt.subplots(2, len(policies), figsize=(5.2 * len(policies), 6.4),
                                squeeze=False)
    tables = {name: label_counts(keys, labels, batch_size=batch_size, num_steps=num_steps)
              for name, keys in policies.items()}
    # One colour scale for every panel: the same colour is the same count in all of them.
    largest = max(int(counts.max()) for counts in tables.values())
    for column, (name, keys) in enumerate(policies.items()):
        counts = tables[name]
        steps = len(counts)
        heat = axes[0, column].imshow(counts, aspect="auto", cmap="viridis", vmin=0,
                                      vmax=largest)
        axes[0, column].set_title(name, fontsize="medium")
        axes[0, column].set_xlabel("label")
        axes[0, column].set_ylabel("step")
        axes[0, column].set_xticks(range(classes))
        axes[0, column].yaxis.set_major_locator(plt.MaxNLocator(integer=True))
        figure.colorbar(heat, ax=axes[0, column], label="records in the local batch")
        shown = keys[:steps * batch_size]
        axes[1, column].plot(np.arange(len(shown)), shown, ".", markersize=2)
        axes[1, column].set_xlabel("read number (in this process)")
        axes[1, column].set_ylabel("record key (position in the file)")
        axes[1, column].set_ylim(0, len(labels))
    figure.suptitle("Process 0 of 2: what its local batches hold (one colour scale for both), "
                    "and where it reads")
    figure.tight_layout()
    return figure


def label_counts(keys: np.ndarray, labels: np.ndarray, *, batch_size: int,
                 num_steps: int) -> np.ndarray:
    """How many records of each label the first `num_steps` local batches hold, shape
    `(steps, number of labels)`, for one shard's `keys` in reading order."""
    classes = int(labels.max()) + 1
    steps = min(num_steps, len(keys) // batch_size)
    if steps < 1:
        raise ValueError(f"{len(keys)} keys make no batch of batch_size={batch_size}: pass "
                         "more keys or a smaller batch.")
    return np.array([np.bincount(labels[keys[step * batch_size:(step + 1) * batch_size]],
                                 minlength=classes) for step in range(steps)])


# -- what each shard's loader read, and what dealing by stride gives ------------------------
def _keys_text(keys: Sequence[int]) -> str:
    keys = [int(key) for key in keys]
    return "key " + str(keys[0]) if len(keys) == 1 else "keys " + ", ".join(map(str, keys))


def unread_keys_sentence(library: str, read: Sequence[Sequence[int]], num_records: int) -> str:
    """What each shard's loader read of keys `0 .. num_records - 1` (`read[i]` lists shard
    i's keys, in order), and which keys no shard, or more than one, read."""
    if not read:
        raise ValueError("read is empty: pass the keys each shard's loader read, one list per "
                         "shard.")
    listed = "; ".join(f"shard {index} read {[int(key) for key in keys]}"
                       for index, keys in enumerate(read))
    seen = [int(key) for keys in read for key in keys]
    unread = sorted(set(range(num_records)) - set(seen))
    twice = sorted({key for key in seen if seen.count(key) > 1})
    found = []
    if unread:
        found.append(f"{_keys_text(unread)} {'was' if len(unread) == 1 else 'were'} read by no "
                     "shard")
    if twice:
        found.append(f"{_keys_text(twice)} {'was' if len(twice) == 1 else 'were'} read by more "
                     "than one shard")
    if not found:
        return (f"{library}: {listed}. Every one of the {num_records} records was read, by "
                "exactly one shard.")
    return f"{library}: {listed}. Of the {num_records} records, {' and '.join(found)}."


def stride_shards_sentence(sizes: Sequence[int]) -> str:
    """What the sizes of the shards dealt by stride mean for the step counts."""
    if not sizes:
        raise ValueError("sizes is empty: pass the length of every process's shard.")
    sizes = [int(size) for size in sizes]
    listed = ", ".join(map(str, sizes))
    if len(set(sizes)) == 1:
        return (f"Shards of {listed} records: equal, so every process runs the same number of "
                "steps.")
    longer = [index for index, size in enumerate(sizes) if size == max(sizes)]
    who = ("process " + str(longer[0]) if len(longer) == 1
           else "processes " + ", ".join(map(str, longer)))
    return (f"Shards of {listed} records: unequal, {who} {'holds' if len(longer) == 1 else 'hold'} "
            f"{max(sizes) - min(sizes)} more, so the step counts can differ, as in the first "
            "section.")




# -- which records meet in one global step ----------------------------------------------------
def shard_step_keys(num_records: int, *, shard_count: int, num_epochs: int, seed: int,
                    own_shuffles: bool = True) -> np.ndarray:
    """Keys read at every step, shape `(shard_count, num_epochs, shard_size)`, for equal
    shards (`drop_remainder=True`). `own_shuffles=True` is what `IndexSampler` does; `False`
    rebuilds one shuffle shared by every shard (shard 0's order moved to each block), which
    is what Grain 0.2.18 does: its shards shuffle their local positions with the same seed."""
    from course_lib.sampler import IndexSampler
    from course_lib.sharding import ShardOptions

    samplers = [IndexSampler(num_records, ShardOptions(index, shard_count, drop_remainder=True),
                             shuffle=True, num_epochs=num_epochs, seed=seed)
                for index in range(shard_count)]
    size = samplers[0].shard_size
    keys = np.stack([sampler.record_keys(0, num_epochs * size).reshape(num_epochs, size)
                     for sampler in samplers])
    if not own_shuffles:
        local = keys[0] - samplers[0].shard_start
        keys = np.stack([sampler.shard_start + local for sampler in samplers])
    return keys


def grain_shard_step_keys(num_records: int, *, shard_count: int, num_epochs: int,
                          seed: int) -> np.ndarray | None:
    """What `shard_step_keys(..., own_shuffles=False)` simulates, read from Grain 0.2.18's
    own `IndexSampler` (shard `i` answers the global positions `i, i + k, ...`), in the same
    shape; None where Grain is not installed."""
    try:
        import grain.python as real_grain
    except ImportError:
        return None
    keys = []
    for index in range(shard_count):
        sampler = real_grain.IndexSampler(
            num_records, shard_options=real_grain.ShardOptions(index, shard_count,
                                                               drop_remainder=True),
            shuffle=True, num_epochs=num_epochs, seed=seed)
        size = num_records // shard_count
        keys.append([[sampler[(epoch * size + step) * shard_count + index].record_key
                      for step in range(size)] for epoch in range(num_epochs)])
    return np.array(keys)


@dataclasses.dataclass(frozen=True)
class PairRepeats:
    """Pairs of records that share a global step (one read by each of two processes)."""

    num_epochs: int
    pairs_per_epoch: int  # pairs that share a step in one epoch
    repeated: int  # pairs that shared a step in more than one epoch
    every_epoch: int  # pairs that shared a step in every epoch
    by_chance: float  # expected `repeated` if every epoch paired records at random


def pair_repeats(step_keys: np.ndarray) -> PairRepeats:
    """Count the pairs of `shard_step_keys` that meet again in later epochs."""
    shard_count, num_epochs, size = step_keys.shape
    seen: dict[tuple[int, int], int] = {}
    for epoch in range(num_epochs):
        for step in range(size):
            for pair in itertools.combinations(sorted(step_keys[:, epoch, step].tolist()), 2):
                seen[pair] = seen.get(pair, 0) + 1
    pairs_per_epoch = size * math.comb(shard_count, 2)
    # A given pair shares a step in one epoch with probability 1/size if orders are random.
    by_chance = math.comb(num_epochs, 2) * pairs_per_epoch / size
    return PairRepeats(num_epochs, pairs_per_epoch, sum(count > 1 for count in seen.values()),
                       sum(count == num_epochs for count in seen.values()), by_chance)


def describe_pair_repeats(shared: PairRepeats, own: PairRepeats) -> str:
    """The conclusion of the two counts, for every outcome."""
    epochs = shared.num_epochs
    head = (f"One shuffle for every shard: {shared.every_epoch} of the "
            f"{shared.pairs_per_epoch} pairs that share a step met in all {epochs} epochs, "
            f"{shared.repeated} in more than one. Each shard its own shuffle: "
            f"{own.repeated} pair{'s' if own.repeated != 1 else ''} met in more than one epoch "
            f"({own.every_epoch} in all), "
            f"where random pairings would give about {own.by_chance:.1f}. ")
    if own.repeated >= shared.repeated:
        return head + ("Here the shards' own shuffles did not reduce the repeats: with "
                       f"{shared.pairs_per_epoch} pairs per epoch the shards are too small for "
                       "two orders to differ much; try more records.")
    if own.repeated > 3 * own.by_chance + 3:
        return head + ("Own shuffles cut the repeats, but they stay above chance: some pairs "
                       "still meet too often; more epochs or records would show whether it "
                       "is more than noise.")
    partner = ("never changes (a and a + shard size, every epoch)"
               if shared.every_epoch == shared.pairs_per_epoch else "often stays the same")
    return head + (f"With one shared shuffle, a record's partner in the global batch "
                   f"{partner}; with each shard's own shuffle, pairs meet again only about as "
                   "often as chance makes them.")


def plot_step_partners(shared: np.ndarray, own: np.ndarray, *,
                       shared_title: str = "one shuffle for every shard, simulated"):
    """Per step: the record process 0 reads against the one process 1 reads, by epoch.
    `shared_title` names the left panel: say whether it was simulated or read from Grain."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    titles = (shared_title, "each shard its own shuffle (course_lib)")
    for ax, keys, title in zip(axes, (shared, own), titles, strict=True):
        epochs = keys.shape[1]
        for epoch in range(epochs):  # earlier epochs bigger: dots that coincide stay visible
            ax.plot(keys[0, epoch], keys[1, epoch], "o", markersize=3 + 3 * (epochs - 1 - epoch),
                    markerfacecolor="none" if epoch < epochs - 1 else None, alpha=0.8,
                    label=f"epoch {epoch}")
        ax.set_title(title, fontsize="medium")
        ax.set_xlabel("record read by process 0")
        ax.legend(fontsize="small", loc="lower right")
    axes[0].set_ylabel("record read by process 1 at the same step")
    figure.suptitle("Which records meet in one global step, epoch after epoch "
                    "(rings: earlier epochs, drawn larger)")
    figure.tight_layout()
    return figure


# -- step counts once a filter runs -------------------------------------------------------
def describe_step_counts(counts: Sequence[int]) -> str:
    """Whether processes with equal shards and a filter would run equal step counts, and if
    not, at which step the job would hang and who would wait where."""
    counts = [int(count) for count in counts]
    listed = ", ".join(f"process {index}: {count}" for index, count in enumerate(counts))
    if len(set(counts)) == 1:
        return (f"Steps per process: {listed}. Equal here, but only because the filter kept "
                "about as many records in every shard: the count depends on each shard's "
                "data, and another filter or data set would not be equal.")
    fewest = min(counts)
    ahead = [index for index, count in enumerate(counts) if count > fewest]
    done = [index for index, count in enumerate(counts) if count == fewest]
    return (f"Steps per process: {listed}. The shards are equal, but the filter kept more "
            f"records in some than in others: {max(counts)} steps against {fewest}. The job "
            f"would hang at the {_ordinal(fewest + 1)} step (step {fewest}, counting from 0 as "
            f"the scripts of this lesson do): {_processes(ahead)} "
            f"{'enters' if len(ahead) == 1 else 'enter'} its collective, which "
            f"{_processes(done)}, done after {fewest} steps, never "
            f"{'joins' if len(done) == 1 else 'join'}.")


def _ordinal(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10,
                                                                                "th")
    return f"{number}{suffix}"


def _processes(indices: Sequence[int]) -> str:
    if len(indices) == 1:
        return f"process {indices[0]}"
    return "processes " + ", ".join(map(str, indices[:-1])) + f" and {indices[-1]}"


# -- JAX's own timeouts, read from the JAX installed ----------------------------------------
JAX_TIMEOUTS = {"initialization_timeout": "init_timeout",
                "heartbeat_timeout_seconds": "heartbeat_timeout",
                "shutdown_timeout_seconds": "shutdown_timeout"}
"""The timeout arguments of `jax.distributed.initialize`, each with the keyword under which
`initialize()` hands it to jaxlib's coordination service or client."""


def jax_parameter_docs(docstring: str) -> dict[str, str]:
    """The text the `Args:` section of a Google-style docstring gives each argument, with
    its line breaks joined."""
    docs: dict[str, str] = {}
    lines = docstring.expandtabs().splitlines()
    try:
        start = next(index for index, line in enumerate(lines) if line.strip() == "Args:")
    except StopIteration:
        return docs
    indent, name = None, None
    for line in lines[start + 1:]:
        if not line.strip():
            if name is not None:
                break
            continue
        depth = len(line) - len(line.lstrip())
        indent = depth if indent is None else indent
        if depth < indent:
            break
        match = re.match(r"\s*(\w+)\s*(?:\([^)]*\))?:\s*(.*)", line)
        if depth == indent and match:
            name = match.group(1)
            docs[name] = match.group(2).strip()
        elif name is not None:
            docs[name] = f"{docs[name]} {line.strip()}".strip()
    return docs


def _call_keywords(source: str, function: str) -> dict[str, str] | None:
    """The `keyword=value` arguments of the first call of `function` in `source`."""
    start = source.find(function + "(")
    if start < 0:
        return None
    depth, index = 0, start + len(function)
    for index in range(start + len(function), len(source)):
        depth += {"(": 1, ")": -1}.get(source[index], 0)
        if depth == 0:
            break
    arguments = source[start + len(function) + 1:index]
    return dict(re.findall(r"(\w+)\s*=\s*([\w.]+)", arguments))


def jax_timeout_routes(source: str) -> dict[str, dict[str, str]] | None:
    """For the source of JAX's `State.initialize`: the keyword arguments it passes to the
    coordination service (`"service"`) and to each process's client (`"client"`); None
    where a call cannot be found."""
    routes = {target: _call_keywords(source, f"get_distributed_runtime_{target}")
              for target in ("service", "client")}
    return None if None in routes.values() else routes


def _installed_jax_docs_and_routes():
    import inspect

    import jax

    docs = jax_parameter_docs(jax.distributed.initialize.__doc__ or "")
    try:
        from jax._src import distributed

        routes = jax_timeout_routes(inspect.getsource(distributed.State.initialize))
    except (ImportError, AttributeError, OSError, TypeError):
        routes = None
    return docs, routes


_TARGETS = {("service",): "the coordination service (which process 0 starts) only",
            ("client",): "each process's client only",
            ("service", "client"): "the coordination service (which process 0 starts) and "
                                   "each process's client"}


def timeout_lines(version: str, defaults: Mapping[str, object], *,
                  docs: Mapping[str, str] | None = None,
                  routes: Mapping[str, Mapping[str, str]] | bool | None = False) -> list[str]:
    """One line per timeout of `JAX_TIMEOUTS`: its default in the installed JAX (`defaults`
    maps each name to its default, or None where `initialize` has no such parameter), where
    `initialize()` passes it, and its docstring's words. `docs` and `routes` are read from
    the installed JAX unless given (`routes=None`: the source could not be read)."""
    if docs is None or routes is False:
        installed_docs, installed_routes = _installed_jax_docs_and_routes()
        docs = installed_docs if docs is None else docs
        routes = installed_routes if routes is False else routes
    lines = []
    for name, keyword in JAX_TIMEOUTS.items():
        default = defaults.get(name)
        # A parameter reaches a target when initialize() passes it there (as some
        # keyword's value); a missing one, when initialize() sets that keyword at all.
        targets = None if routes is None else tuple(
            target for target in ("service", "client")
            if (name in routes[target].values() if default is not None
                else keyword in routes[target]))
        if default is None:
            line = f"{name}: not a parameter of jax.distributed.initialize in JAX {version}"
            if targets == ():
                line += (f"; initialize() passes no {keyword} to the service or the clients, "
                         "so jaxlib's own default applies")
            lines.append(line + ".")
            continue
        line = f"{name}={default} ({float(default) / 60:.1f} minutes)"
        if targets is None:
            line += ", where initialize() passes it could not be read from its source"
        elif targets:
            line += f", passed to {_TARGETS[targets]}"
        else:
            line += ", passed to neither the service nor the clients"
        if docs.get(name):
            line += f'; its docstring: "{docs[name]}"'
        lines.append(line + ("" if line.endswith(".\"") else "."))
    return lines


def exit_wait_sentence(version: str, defaults: Mapping[str, object], *,
                       routes: Mapping[str, Mapping[str, str]] | bool | None = False) -> str:
    """How long the process that finished first waits at exit, in the JAX installed.

    It waits in its client's `shutdown()`, bounded by two limits: the coordination service's
    (`shutdown_timeout_seconds`) and the client's own shutdown timeout, whose default in XLA's
    `xla/pjrt/distributed/client.h` is 5 minutes ("How long to wait for all nodes to call
    Shutdown()"). `routes` (as `jax_timeout_routes` reads them; read from the installed JAX
    unless given, None: unreadable) say whether `initialize()` passes the latter."""
    if routes is False:
        routes = _installed_jax_docs_and_routes()[1]
    shutdown = defaults.get("shutdown_timeout_seconds")
    if shutdown is None:
        return (f"So in JAX {version} initialize() gives no way to set how long the process "
                "waiting at exit waits for the others: jaxlib's own default decides, with "
                "every device of the job idle meanwhile.")
    minutes = f"{float(shutdown) / 60:.1f} minutes by default"
    if routes is not None and "shutdown_timeout" in routes["client"]:
        return (f"So in JAX {version} the process waiting at exit waits for the others for at "
                f"most shutdown_timeout_seconds, {minutes}, with every device of the job idle "
                "meanwhile.")
    if routes is None:
        return (f"So in JAX {version} the process waiting at exit waits for the others for at "
                f"most shutdown_timeout_seconds ({minutes}), or less if its client's own "
                "shutdown timeout is shorter (whether initialize() sets it could not be read "
                "from its source), with every device of the job idle meanwhile.")
    return (f"So in JAX {version} the process waiting at exit waits for the others for at most "
            f"the shorter of two limits: shutdown_timeout_seconds ({minutes}, the coordination "
            "service's), and its client's own shutdown timeout, which initialize() does not "
            "set, so jaxlib's default applies (5 minutes in XLA's "
            "xla/pjrt/distributed/client.h). Raising shutdown_timeout_seconds alone does not "
            "make it wait longer than that. Every device of the job is idle meanwhile.")


# -- the script's loader on each library, and an endless stream run for fixed steps --------
def batched_steps_sentence(library: str, batches: Sequence[Sequence[Sequence[int]]],
                           num_records: int) -> str:
    """What the script's loader gave each shard (`batches[i]` lists shard i's batches, each
    the keys it holds): the step counts, whether the job would hang, and the keys of
    `0 .. num_records - 1` that reached no batch."""
    if not batches:
        raise ValueError("batches is empty: pass the batches of every shard, one list each.")
    steps = [len(shard) for shard in batches]
    listed = "; ".join(f"shard {index} ran {count} step{'s' if count != 1 else ''} "
                       f"{[[int(key) for key in batch] for batch in shard]}"
                       for index, (count, shard) in enumerate(zip(steps, batches, strict=True)))
    batched = {int(key) for shard in batches for batch in shard for key in batch}
    unread = sorted(set(range(num_records)) - batched)
    left = (f"{_keys_text(unread)} reached no batch" if unread
            else f"all {num_records} records reached a batch")
    if len(set(steps)) == 1:
        return (f"{library}: {listed}. Equal step counts, so this job would finish; "
                f"{left}.")
    return (f"{library}: {listed}. Unequal step counts ({max(steps)} against {min(steps)}), so "
            f"this job waits at the extra step's collective; {left}.")


def endless_run_sentence(steps: int, epoch_counts: Sequence[int],
                         reread: Sequence[int]) -> str:
    """What processes running an endless stream for `steps` steps did: `epoch_counts[i]` is
    the batches one epoch of process i's shard held, `reread[i]` the records process i read
    a second time in the run (counted from the records' ids, so it shows whether the stream
    went on into another epoch)."""
    reread = [int(count) for count in reread]
    listed = "; ".join(f"process {index}: {steps} steps, {count} records read twice"
                       for index, count in enumerate(reread))
    head = (f"{listed}. One epoch of each shard held {list(map(int, epoch_counts))} batches. ")
    stayed = [index for index, count in enumerate(reread) if count == 0]
    if not stayed:
        return head + (f"Every process read past its epoch's end into the next and still "
                       f"reached step {steps}: no process ran out, so none waits for another.")
    return head + (f"{_processes(stayed)} read no record twice: {steps} steps did not take "
                   f"{'it' if len(stayed) == 1 else 'them'} past an epoch's end, so this run "
                   "does not show an endless stream outlasting an epoch; raise the step count.")


def device_rows_lines(reports: Sequence[Mapping]) -> list[str]:
    """One line per process: the ids of its local batch and the ids each of its devices holds
    of the global batch (`report["local_ids"]`, `report["device_ids"]`: device id -> ids),
    then whether every device holds only rows of its own process's local batch."""
    lines, strays = [], []
    for report in sorted(reports, key=lambda report: report["rank"]):
        own = set(report["local_ids"])
        held = "; ".join(f"device {device} holds {ids}"
                         for device, ids in sorted(report["device_ids"].items(),
                                                   key=lambda item: int(item[0])))
        lines.append(f"rank {report['rank']}: local batch {report['local_ids']}; {held}")
        strays += [(report["rank"], device, sorted(set(ids) - own))
                   for device, ids in report["device_ids"].items() if set(ids) - own]
    if not reports:
        raise ValueError("no reports: the script printed no RESULT line")
    if strays:
        lines.append("Not every device holds only its own process's rows: " + "; ".join(
            f"rank {rank}'s device {device} holds {ids} from another process"
            for rank, device, ids in strays) + ".")
    else:
        lines.append("Every device holds only rows of its own process's local batch: each "
                     "process's rows stay on its own devices.")
    return lines
