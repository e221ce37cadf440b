"""The course's one rule and its one table.

Time the same thing twice and the two numbers differ: other programs, caches and clocks
move them. So a lesson never compares two single numbers. Each setup is run several times,
and `compare` prints one table: each setup's median with its standard error, how many runs
it holds, its ratio to the baseline, and a verdict from one rule, `verdict`:

- the margin is the larger of 5% and twice the two medians' combined standard error;
- a difference larger than the margin is "faster" or "slower";
- a smaller one is "no clear difference", unless the margin is wider than 25%: then the run
  cannot tell a real difference from noise, and the verdict is "too noisy to tell".

`RULE` says the same in under 60 words, for lesson 1 and the reference page. Every
comparison in the course goes through `verdict`; nothing else decides "faster".
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Mapping, Sequence

import numpy as np

FLOOR = 0.05  # below 5%, clocks and caches alone can move a median
FACTOR = 2.0  # a difference must exceed twice the combined standard error
TOO_NOISY = 0.25  # a margin wider than this cannot show a difference worth having

FASTER, SLOWER, SAME, NOISY = "faster", "slower", "no clear difference", "too noisy to tell"
VERDICTS = (FASTER, SLOWER, SAME, NOISY)
BASELINE = "baseline"

RULE = (f"The rule: two setups differ only when their medians differ by more than a margin, "
        f"the larger of {FLOOR:.0%} and {FACTOR:g} times their combined standard error. "
        f"A smaller difference is \"{SAME}\"; if the margin itself is over {TOO_NOISY:.0%}, "
        f"it is \"{NOISY}\": run it again on a quieter machine.")


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A median and its standard error, from `count` runs.

    The spread comes from the interquartile range, so one run disturbed by another program
    barely moves it; for a normal spread the median's standard error is 1.25 times the
    mean's.
    """

    value: float
    stderr: float
    count: int

    @classmethod
    def of(cls, runs: Sequence[float]) -> Estimate:
        array = np.asarray(runs, dtype=np.float64).ravel()
        if array.size == 0 or not np.all(np.isfinite(array)) or np.any(array <= 0):
            raise ValueError(f"runs={list(runs)!r} must be one or more positive, finite "
                             "measurements: time the setup at least once.")
        if array.size == 1:
            return cls(float(array[0]), float("nan"), 1)
        low, high = np.percentile(array, [25, 75])
        stderr = 1.2533 * float(high - low) / 1.349 / float(np.sqrt(array.size))
        return cls(float(np.median(array)), stderr, int(array.size))


def margin(measured: Estimate, baseline: Estimate) -> float:
    """The rule's margin, as a share of the baseline: a setup run once adds no error."""
    errors = [0.0 if np.isnan(side.stderr) else side.stderr for side in (measured, baseline)]
    return max(FLOOR, FACTOR * float(np.hypot(*errors)) / baseline.value)


def verdict(measured: Estimate, baseline: Estimate, *, higher_is_better: bool = False,
            words: tuple[str, str] = (FASTER, SLOWER)) -> str:
    """The course's one rule: `words[0]` (better), `words[1]` (worse), "no clear difference"
    or "too noisy to tell", for `measured` against `baseline`."""
    share = margin(measured, baseline)
    difference = (measured.value - baseline.value) / baseline.value
    if abs(difference) <= share:
        return NOISY if share > TOO_NOISY else SAME
    return words[0] if (difference > 0) == higher_is_better else words[1]


@dataclasses.dataclass(frozen=True)
class Row:
    setup: str
    estimate: Estimate
    ratio: float  # above 1: better than the baseline, by this factor
    verdict: str


@dataclasses.dataclass(frozen=True)
class Table:
    """What `compare` measured: one `Row` per setup, the baseline first among equals.

    Printed (or left as a cell's last value) it is one table; `table["2 workers"].verdict`
    reads one row."""

    rows: tuple[Row, ...]
    baseline: str
    unit: str
    higher_is_better: bool

    def __getitem__(self, setup: str) -> Row:
        for row in self.rows:
            if row.setup == setup:
                return row
        raise KeyError(f"no setup {setup!r} in this table; it has "
                       f"{[row.setup for row in self.rows]}")

    @property
    def verdicts(self) -> dict[str, str]:
        return {row.setup: row.verdict for row in self.rows}

    def _cells(self) -> tuple[list[str], list[list[str]]]:
        header = ["setup", "median ± s.e." if self.unit == "s" else
                  f"median ± s.e. ({self.unit})", "runs", f"vs {self.baseline}", "verdict"]
        body = [[row.setup, _value(row.estimate, self.unit), str(row.estimate.count),
                 format_ratio(row.ratio), row.verdict] for row in self.rows]
        return header, body

    def __str__(self) -> str:
        header, body = self._cells()
        widths = [max(len(line[column]) for line in [header, *body])
                  for column in range(len(header))]
        lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
                 .rstrip() for line in [header, *body]]
        return "\n".join([lines[0], "  ".join("-" * width for width in widths), *lines[1:]])

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        header, body = self._cells()
        head = "".join(f"<th>{html.escape(cell)}</th>" for cell in header)
        rows = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in line)
                       + "</tr>" for line in body)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def compare(runs: Mapping[str, Sequence[float]], *, baseline: str | None = None,
            unit: str = "s", higher_is_better: bool = False,
            words: tuple[str, str] | None = None) -> Table:
    """One table for one comparison: every setup of `runs` (its measurements, several per
    setup) against `baseline` (the first setup unless named), judged by `verdict`.

    `unit="s"` prints times in µs, ms or s; any other unit prints three significant digits
    after it ("steps/s"). Times are better low; pass `higher_is_better=True` for rates. The
    ratio column says how many times better than the baseline a setup is (2.00x: twice as
    fast, or twice the rate). `words` replaces "faster"/"slower" for a quantity that is not a
    speed (("less", "more") for memory)."""
    if not runs:
        raise ValueError("runs is empty: give at least two setups, each with its measurements.")
    names = list(runs)
    baseline = names[0] if baseline is None else baseline
    if baseline not in runs:
        raise ValueError(f"baseline={baseline!r} is not one of the setups {names}: name one "
                         "of them, or leave it out to use the first.")
    if words is None:
        words = (FASTER, SLOWER)
    estimates = {name: Estimate.of(runs[name]) for name in names}
    base = estimates[baseline]
    rows = []
    for name in names:
        estimate = estimates[name]
        ratio = (estimate.value / base.value if higher_is_better else
                 base.value / estimate.value)
        rows.append(Row(name, estimate, ratio,
                        BASELINE if name == baseline else
                        verdict(estimate, base, higher_is_better=higher_is_better, words=words)))
    return Table(tuple(rows), baseline, unit, higher_is_better)


def format_ratio(ratio: float) -> str:
    """A ratio to three significant digits, as far as timings support: "1.25x", "12.3x",
    "3,320x"."""
    if ratio >= 100:
        return f"{float(f'{ratio:.3g}'):,.0f}x"
    return f"{ratio:.3g}x" if ratio >= 10 else f"{ratio:.2f}x"


def format_time(seconds: float) -> str:
    """A duration in the unit that reads best: "840 µs", "12.3 ms", "1.52 s"."""
    scale, suffix = _time_unit(seconds)
    return f"{_three_digits(seconds / scale)} {suffix}"


def _time_unit(seconds: float) -> tuple[float, str]:
    for scale, suffix in ((1.0, "s"), (1e-3, "ms")):
        if seconds >= scale:
            return scale, suffix
    return 1e-6, "µs"


def _decimals(value: float) -> int:
    """How many decimals give `value` three significant digits (two below 1)."""
    if value >= 100:
        return 0
    if value >= 1:
        return 1 if value >= 10 else 2
    return max(2, 1 - int(np.floor(np.log10(value)))) if value > 0 else 2


def _three_digits(value: float) -> str:
    return f"{value:,.{_decimals(value)}f}"


def _value(estimate: Estimate, unit: str) -> str:
    """"18.4 ± 1.1 ms": the median to three significant digits, its standard error to the
    same decimal place, both in the median's unit."""
    scale, suffix = _time_unit(estimate.value) if unit == "s" else (1.0, "")
    value = estimate.value / scale
    decimals = _decimals(value)
    text = f"{value:,.{decimals}f}"
    if not np.isnan(estimate.stderr):
        stderr = estimate.stderr / scale
        shown = f"{stderr:,.{decimals}f}"
        if stderr > 0 and float(shown.replace(",", "")) == 0:
            shown = f"{stderr:.1g}"  # "± 0.04", not "± 0.0", which reads as no spread
        text += f" ± {shown}"
    return f"{text} {suffix}" if suffix else text
