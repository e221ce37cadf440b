"""The course's one rule and its one table: every verdict reachable, each able to turn."""

import math

import pytest

from course_lib.course import table
from course_lib.course.table import Estimate, compare, verdict


def test_each_verdict_is_reachable_and_turns_with_the_numbers():
    base = [10.0, 10.1, 9.9, 10.0, 10.05]
    assert compare({"a": base, "b": [5.0, 5.1, 4.9, 5.0, 5.0]})["b"].verdict == "faster"
    assert compare({"a": base, "b": [20.0, 20.2, 19.8, 20.0, 20.1]})["b"].verdict == "slower"
    assert compare({"a": base, "b": [10.1, 10.0, 10.2, 10.1, 10.0]})["b"].verdict == \
        "no clear difference"
    noisy = [5.0, 15.0, 9.0, 11.0, 20.0, 3.0]
    assert compare({"a": noisy, "b": [10.5, 4.0, 16.0, 8.0, 19.0, 2.0]})["b"].verdict == \
        "too noisy to tell"


def test_higher_is_better_swaps_the_direction_and_the_ratio():
    rates = compare({"naive": [100.0, 101.0, 99.0], "fed": [200.0, 202.0, 198.0]},
                    unit="steps/s", higher_is_better=True)
    assert rates["fed"].verdict == "faster"
    assert math.isclose(rates["fed"].ratio, 2.0, rel_tol=1e-9)
    times = compare({"naive": [2.0, 2.0, 2.0], "fed": [1.0, 1.0, 1.0]})
    assert math.isclose(times["fed"].ratio, 2.0, rel_tol=1e-9)
    assert compare({"naive": [2.0] * 3, "fed": [4.0] * 3})["fed"].verdict == "slower"


def test_the_floor_holds_for_single_runs():
    one, other = Estimate.of([1.0]), Estimate.of([1.04])
    assert verdict(other, one) == "no clear difference"
    assert verdict(Estimate.of([1.06]), one) == "slower"
    assert math.isnan(one.stderr) and table.margin(other, one) == table.FLOOR


def test_words_name_a_quantity_that_is_not_a_speed():
    memory = compare({"whole": [100.0] * 3, "on disk": [10.0] * 3}, unit="MB",
                     words=("less", "more"))
    assert memory["on disk"].verdict == "less"
    assert memory["whole"].verdict == "baseline"


def test_the_table_prints_every_setup_in_order_with_its_verdict():
    printed = str(compare({"naive": [0.010, 0.011, 0.0105], "2 workers": [0.005] * 3},
                          baseline="naive"))
    lines = printed.splitlines()
    assert lines[0].split()[:2] == ["setup", "median"]
    assert lines[2].startswith("naive") and "baseline" in lines[2]
    assert lines[3].startswith("2 workers") and lines[3].endswith("faster")
    assert "10.5 ± 0.3 ms" in lines[2] and "2.10x" in lines[3]
    assert "<td>faster</td>" in compare({"a": [2.0] * 2, "b": [1.0] * 2})._repr_html_()


def test_the_rule_is_short_enough_to_read_once():
    assert len(table.RULE.split()) <= 60


@pytest.mark.parametrize("bad", [[], [0.0], [float("nan")], [-1.0]])
def test_runs_must_be_positive_measurements(bad):
    with pytest.raises(ValueError, match="positive, finite"):
        compare({"a": [1.0], "b": bad})


def test_an_unknown_baseline_is_named():
    with pytest.raises(ValueError, match="baseline='c'"):
        compare({"a": [1.0], "b": [2.0]}, baseline="c")
    with pytest.raises(KeyError, match="no setup 'z'"):
        compare({"a": [1.0], "b": [2.0]})["z"]


def test_times_print_in_a_readable_unit():
    assert table.format_time(0.0000842) == "84.2 µs"
    assert table.format_time(0.00000042) == "0.42 µs"
    assert table.format_time(0.01234) == "12.3 ms"
    assert table.format_time(1.5) == "1.50 s"


def test_ratios_print_three_significant_digits():
    assert [table.format_ratio(r) for r in (1.254, 12.34, 3320.94, 10070.3, 0.5)] == \
        ["1.25x", "12.3x", "3,320x", "10,100x", "0.50x"]


def test_the_standard_error_keeps_the_medians_unit_and_decimals():
    assert table._value(Estimate(0.0184, 0.00111, 5), "s") == "18.4 ± 1.1 ms"
    assert table._value(Estimate(0.158, 0.000735, 5), "s") == "158 ± 1 ms"
    assert table._value(Estimate(18.0, 2.12, 5), "steps/s") == "18.0 ± 2.1"
    assert table._value(Estimate(0.5, float("nan"), 1), "steps/s") == "0.50"


def test_a_spread_below_the_last_decimal_is_not_printed_as_zero():
    assert table._value(Estimate(0.0112, 0.00004, 30), "s") == "11.2 ± 0.04 ms"
    assert table._value(Estimate(0.0112, 0.0, 30), "s") == "11.2 ± 0.0 ms"
