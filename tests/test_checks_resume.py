"""The check of exercise 5 (resume a loader exactly) on right and wrong answers.

A right answer reaches the check's two-worker case, which starts worker processes; a wrong
one is caught in this process, at the first stop point where it goes wrong.
"""

from __future__ import annotations

import json

import pytest

from course_lib import checks


def take(iterator, count: int) -> list:
    return [next(iterator) for _ in range(count)]


def resume_batches(make_loader, stop_after):
    with iter(make_loader()) as first:
        take(first, stop_after)
        saved = json.loads(first.get_state())  # plain data, as it would be in a file
    with iter(make_loader()) as fresh:
        fresh.set_state(json.dumps(saved))
        return list(fresh)


@pytest.mark.timeout(120)
def test_a_correct_resume_passes(capsys):
    checks.check_resume_batches(resume_batches)
    assert "went on exactly where it stopped" in capsys.readouterr().out


@pytest.mark.timeout(120)
def test_a_state_passed_as_bytes_passes_too():
    def without_json(make_loader, stop_after):
        first = iter(make_loader())
        take(first, stop_after)
        state = first.get_state()
        first.close()
        fresh = iter(make_loader())
        fresh.set_state(state)
        return list(fresh)

    checks.check_resume_batches(without_json)


def test_the_stub_is_not_solved_yet():
    def stub(make_loader, stop_after):
        raise NotImplementedError("save the state, restore it into a fresh loader")

    with pytest.raises(NotImplementedError, match="fresh loader"):
        checks.check_resume_batches(stub)


def test_starting_over_is_caught():
    def starts_over(make_loader, stop_after):
        with iter(make_loader()) as first:
            take(first, stop_after)
        return list(iter(make_loader()))

    with pytest.raises(AssertionError, match=r"stop_after=4\) .*started over: it returned the "
                                             r"whole epoch.*call set_state"):
        checks.check_resume_batches(starts_over)


def test_skipping_a_batch_is_caught():
    def one_too_many(make_loader, stop_after):
        with iter(make_loader()) as first:
            for number, _batch in enumerate(first):
                if number == stop_after:
                    break
            state = first.get_state()
        with iter(make_loader()) as fresh:
            fresh.set_state(state)
            return list(fresh)

    with pytest.raises(AssertionError, match=r"stop_after=0\) .*skipped a batch: batch 0 "):
        checks.check_resume_batches(one_too_many)


def test_repeating_a_batch_is_caught():
    def one_too_few(make_loader, stop_after):
        with iter(make_loader()) as first:
            state = first.get_state()
            for _ in range(stop_after):
                state = first.get_state()  # saved before the batch is taken
                next(first)
        with iter(make_loader()) as fresh:
            fresh.set_state(state)
            return list(fresh)

    with pytest.raises(AssertionError, match=r"stop_after=4\) .*repeated a batch: the "
                                             r"continuation starts with batch 3"):
        checks.check_resume_batches(one_too_few)


def test_reusing_the_first_iterator_is_caught():
    def same_iterator(make_loader, stop_after):
        with iter(make_loader()) as iterator:
            take(iterator, stop_after)
            state = iterator.get_state()
            iterator.set_state(state)
            return list(iterator)

    with pytest.raises(AssertionError, match=r"called make_loader\(\) only once.*second "
                                             r"make_loader\(\) call"):
        checks.check_resume_batches(same_iterator)


def test_returning_the_batches_taken_before_the_stop_is_caught():
    def the_first_part(make_loader, stop_after):
        with iter(make_loader()) as first:
            taken = take(first, stop_after)
            state = first.get_state()
        with iter(make_loader()) as fresh:
            fresh.set_state(state)
            return taken

    with pytest.raises(AssertionError, match=r"stop_after=0\) .*returned 0 of the 9 "
                                             r"batches after the stop"):
        checks.check_resume_batches(the_first_part)

    def the_first_part_past_zero(make_loader, stop_after):
        return the_first_part(make_loader, stop_after) if stop_after else resume_batches(
            make_loader, stop_after)

    with pytest.raises(AssertionError, match=r"returned the 4 batches taken before the stop "
                                             r"instead of the 5 batches after"):
        checks.check_resume_batches(the_first_part_past_zero)


def test_prepending_the_batches_taken_before_the_stop_is_caught():
    def whole_story(make_loader, stop_after):
        with iter(make_loader()) as first:
            taken = take(first, stop_after)
            state = first.get_state()
        with iter(make_loader()) as fresh:
            fresh.set_state(state)
            return taken + list(fresh)

    with pytest.raises(AssertionError, match=r"returned the 4 batches taken before the stop, "
                                             r"followed by the 5 batches after"):
        checks.check_resume_batches(whole_story)


def test_a_state_saved_before_taking_the_batches_is_caught():
    def saved_too_early(make_loader, stop_after):
        with iter(make_loader()) as first:
            state = first.get_state()
            take(first, stop_after)
        with iter(make_loader()) as fresh:
            fresh.set_state(state)
            return list(fresh)

    with pytest.raises(AssertionError, match=r"position before the 4 batches were taken "
                                             r"\(next_index 0\).*get_state\(\) after"):
        checks.check_resume_batches(saved_too_early)


def test_reading_up_to_the_stop_again_is_caught():
    def fast_forward(make_loader, stop_after):
        with iter(make_loader()) as first:
            take(first, stop_after)
        with iter(make_loader()) as fresh:
            take(fresh, stop_after)
            return list(fresh)

    with pytest.raises(AssertionError, match=r"right batches, but the fresh loader's iterator "
                                             r"was never restored.*set_state"):
        checks.check_resume_batches(fast_forward)


def test_returning_an_iterator_is_caught():
    def lazy(make_loader, stop_after):
        first = iter(make_loader())
        take(first, stop_after)
        fresh = iter(make_loader())
        fresh.set_state(first.get_state())
        return fresh

    with pytest.raises(AssertionError, match=r"returned an iterator, not a list"):
        checks.check_resume_batches(lazy)


def test_losing_the_last_batch_is_caught():
    def all_but_the_last(make_loader, stop_after):
        return resume_batches(make_loader, stop_after)[:-1]

    with pytest.raises(AssertionError, match=r"stop_after=0\) .*returned 8 of the 9 "
                                             r"batches after the stop; those match"):
        checks.check_resume_batches(all_but_the_last)


def test_another_error_names_resume_batches():
    def broken(make_loader, stop_after):
        return make_loader().get_state()

    with pytest.raises(AssertionError, match=r"resume_batches\(make_loader, stop_after=0\) "
                                             r"raised AttributeError"):
        checks.check_resume_batches(broken)
