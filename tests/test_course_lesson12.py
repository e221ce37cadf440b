"""Lesson 12's sentences and helpers, with made-up numbers for every outcome."""

from __future__ import annotations

import json
import math

import pytest

from course_lib.course import capstone


def _steps(losses, checksums, start=1):
    return [{"step": start + i, "loss": loss, "checksum": checksum,
             "segment_checksum": 10 * checksum, "position_checksum": 100 * checksum,
             "real_tokens": 100, "time": float(i)}
            for i, (loss, checksum) in enumerate(zip(losses, checksums, strict=True))]


def test_an_exact_resume_is_said_to_be_exact():
    reference = _steps([3.0, 2.5, 2.25, 2.0], [1, 2, 3, 4])
    resumed = _steps([2.25, 2.0], [3, 4], start=3)
    comparison = capstone.compare_runs(reference, resumed, from_step=2)
    assert comparison == {"steps": 2, "missing": [], "same_batches": [3, 4],
                          "same_segments": [3, 4], "same_positions": [3, 4],
                          "same_losses": [3, 4]}
    sentence = capstone.resume_sentence(comparison, killed_after=3, resumed_from=2,
                                        traces=[1, 1, 1, 1], same_weights=True)
    assert "all 2 steps after the checkpoint have the same global batch" in sentence
    assert "segment ids and positions" in sentence and "identical, bit for bit" in sentence
    assert "traced its step once" in sentence and "not exact" not in sentence


def test_a_different_loss_batch_or_weights_is_reported_as_not_exact():
    reference = _steps([3.0, 2.5, 2.25, 2.0], [1, 2, 3, 4])
    resumed = _steps([2.25, 2.0000001], [3, 5], start=3)
    comparison = capstone.compare_runs(reference, resumed, from_step=2)
    sentence = capstone.resume_sentence(comparison, 3, 2, [1, 1, 1, 1], same_weights=False)
    assert "1 have the same tokens, 1 the same segment ids, 1 the same positions" in sentence
    assert "1 the same loss" in sentence and "not exact" in sentence
    assert "optimizer state are different" in sentence


def test_other_positions_alone_make_a_resume_not_exact():
    reference = _steps([3.0, 2.5], [1, 2])
    resumed = [{**step, "position_checksum": 7} for step in reference]
    comparison = capstone.compare_runs(reference, resumed, from_step=0)
    assert comparison["same_batches"] == [1, 2] and comparison["same_positions"] == []
    assert "not exact" in capstone.resume_sentence(comparison, 2, 0, [1, 1], True)


def test_a_second_trace_and_missing_steps_are_reported():
    reference = _steps([3.0, 2.5, 2.25], [1, 2, 3])
    comparison = capstone.compare_runs(reference, _steps([2.25], [3], start=3), 2)
    assert "[1, 2, 1, 1] times" in capstone.resume_sentence(comparison, 3, 2, [1, 2, 1, 1],
                                                              True)
    short = capstone.compare_runs(reference, _steps([2.5], [2], start=2), 1)
    assert "cannot be compared" in capstone.resume_sentence(short, 3, 1, [1, 1], True)


def test_the_resumed_lines_are_found_by_step_number_not_by_count():
    killed = _steps([3.0, 2.5, 2.25, 2.0, 1.9], [1, 2, 3, 4, 5])  # killed after step 5
    appended = _steps([2.1, 2.0, 1.9], [4, 5, 6], start=4)  # resumed from step 3
    assert capstone.resumed_lines(killed + appended, 3) == appended
    with pytest.raises(ValueError, match="did not resume from step 6"):
        capstone.resumed_lines(killed, 6)


def _report(rank, waits, saves, start_step=0):
    """A process's report: timed steps of 1 s each (numbered from start_step + 2, after the
    compiling step), the given wait before each, and each save (step, seconds) right after
    its step."""
    return _timed(rank, [1.0] * len(waits), saves, wait=waits, start_step=start_step)


@pytest.mark.parametrize(("waits", "saves", "verdicts"), [
    ([0.0] * 10, [], ["The loader keeps up", "almost no idle time"]),
    ([0.5] * 10, [], ["The loader makes the step wait",
                      "most of the idle time is waiting for data"]),
    ([0.01] * 10, [(5, 3.0)], ["The loader keeps up",
                               "most of the idle time is saving checkpoints, 23% of the wall "
                               "time (at least the 5% at which this sentence advises a "
                               "change): the saves are synchronous, so a longer "
                               "job would save less often or asynchronously."]),
])
def test_the_idle_sentence_splits_the_idle_time_and_names_its_largest_part(waits, saves,
                                                                          verdicts):
    reports = [_report(rank, waits, saves) for rank in range(2)]
    sentence = capstone.idle_sentence(reports, 12345.0)
    assert "12,300 real tokens per second" in sentence  # three significant digits
    for verdict in verdicts:
        assert verdict in sentence
    split = capstone.time_split(reports[1])
    assert split["saves"] == len(saves)
    assert split["checkpoint"] == pytest.approx(sum(length for _, length in saves))
    assert split["wait"] == pytest.approx(sum(waits))
    assert split["rest"] == pytest.approx(0.0, abs=1e-9)
    percent = capstone.wall_percents(reports[1])
    assert f"process 1 {percent['idle']}% (data {percent['wait']}%" in \
        capstone.idle_summary(reports)
    assert percent["idle"] == percent["wait"] + percent["checkpoint"] + percent["rest"]
    assert percent["idle"] + percent["step"] == 100


def test_a_save_after_the_last_step_is_outside_the_wall_time():
    report = _report(0, [0.0] * 4, [(5, 2.0)])  # step 5 is the last timed step
    assert capstone.time_split(report)["saves"] == 0


def test_the_rest_of_the_loop_is_named_when_it_is_the_largest_idle_part():
    report = _report(0, [0.0] * 4, [])
    report["step_spans"] = [[a, b - 0.3] for a, b in report["step_spans"]]
    sentence = capstone.idle_sentence([report], 1.0)
    assert "most of the idle time is the rest of the loop" in sentence


def test_a_largest_idle_part_under_half_the_idle_time_is_not_called_most():
    # waits of 0.2 s and 0.15 s of loop a step (2 s and 1.35 s in all): the wait is most of
    # the idle time; with a save of 1 s as well it is the largest part (46%), not most
    for saves, words in (([], "most of the idle time is waiting for data"),
                         ([(5, 1.0)], "the largest part of the idle time is waiting for data")):
        report = _timed(0, [1.0] * 10, saves, wait=0.2, rest=0.15)
        split = capstone.time_split(report)
        idle = split["wait"] + split["checkpoint"] + split["rest"]
        assert (split["wait"] > idle / 2) == words.startswith("most")
        assert words in capstone.idle_sentence([report], 1.0)


def test_the_global_batch_check_matches_each_process_block_to_its_local_batch():
    steps = [{"process_checksums": [11, 21]}, {"process_checksums": [12, 22]}]
    reports = [{"rank": 0, "local_checksums": [11, 12], "local_shape": [8, 128],
                "global_shape": [16, 128]},
               {"rank": 1, "local_checksums": [21, 22], "local_shape": [8, 128],
                "global_shape": [16, 128]}]
    check = capstone.global_batch_check(steps, reports)
    assert check["matching"] == 2
    sentence = capstone.global_batch_sentence(check)
    assert "(16, 128), from process 0's (8, 128), process 1's (8, 128)" in sentence
    assert "at all 2 steps" in sentence
    reports[1]["local_checksums"] = [21, 99]  # process 1's second batch is not its block
    check = capstone.global_batch_check(steps, reports)
    assert check["matching"] == 1
    assert "only at 1 of 2 steps" in capstone.global_batch_sentence(check)
    reports[0]["local_checksums"] = [11]
    assert "cannot be matched" in capstone.global_batch_sentence(
        {**check, "counted": [1, 2]})


@pytest.mark.parametrize(("final", "verdict"), [
    (1.5, "below both, beyond the margin (5%)"), (2.97, "about the byte frequencies"),
    (3.03, "about the byte frequencies (within the 5% margin)"),
    (4.0, "better than uniform but not yet below"),
    (5.6, "no better than a uniform guess")])
def test_the_loss_is_measured_against_both_baselines(final, verdict):
    steps = _steps([6.0] * 3 + [final] * 5, list(range(8)))
    sentence = capstone.loss_sentence(steps, unigram_nats=3.0)
    assert verdict in sentence and f"{final:.2f} ± 0.00 nats" in sentence and "5.55" in sentence


def test_the_loss_is_judged_with_its_standard_error():
    # 2.8 against 3.0 is beyond the 5% floor, but not when the last steps spread this much
    spread = _steps([6.0] * 3 + [2.0, 3.6, 2.2, 3.4, 2.8], list(range(8)))
    sentence = capstone.loss_sentence(spread, unigram_nats=3.0)
    assert "2.80 ± 0.32 nats" in sentence
    assert "about the byte frequencies (within the 21% margin)" in sentence
    wild = _steps([6.0] * 3 + [1.0, 5.0, 1.0, 5.0, 3.0], list(range(8)))
    sentence = capstone.loss_sentence(wild, unigram_nats=3.0)
    assert "too noisy to tell from the byte frequencies" in sentence
    assert "below both" not in sentence
    tight = _steps([6.0] * 3 + [2.8, 2.81, 2.79, 2.8, 2.8], list(range(8)))
    assert "below both" in capstone.loss_sentence(tight, unigram_nats=3.0)


def test_the_unigram_entropy_is_the_entropy_of_the_byte_frequencies():
    import math

    assert capstone.unigram_entropy([b"aaaa"]) == 0.0
    assert capstone.unigram_entropy([b"ab", b"ab"]) == pytest.approx(math.log(2))


def _layout(records=1400, padding=500, footer=60, rest=40) -> dict:
    return {"records": records, "footer": footer, "padding": padding, "postscript": rest // 2,
            "signature": rest // 4, "block_headers": rest // 4}


def _sizes(layout, tokens=1000, records=10, grouped=600) -> dict:
    return {"bytes_on_disk": sum(layout.values()), "tokens": tokens, "records": records,
            "files": 2, "layout": layout, "bytes_group_64": grouped}


@pytest.mark.parametrize(("layout", "verdict"), [
    (_layout(), "2.00x larger"), (_layout(records=300, padding=100), "2.00x smaller"),
    (_layout(records=700, padding=210), "the text's size, within the course's 5% margin")])
def test_the_size_sentence_compares_with_the_text_and_groups_of_64(layout, verdict):
    sentence = capstone.size_sentence(_sizes(layout))
    assert verdict in sentence
    assert "group_size:64 take 600 bytes, padding included (0.60x the text)" in sentence
    assert f"padding {layout['padding']:,} bytes" in sentence
    assert f"({layout['padding'] / 2 / 1024:.0f} KiB per file" in sentence


def test_the_size_sentence_says_which_outweighs_the_other_chunk_header_or_compression():
    larger = capstone.size_sentence(_sizes(_layout(records=1400)))
    assert "(140 per record for 100 bytes of text: with group_size:1" in larger
    assert "outweigh what compressing one short record saves" in larger
    smaller = capstone.size_sentence(_sizes(_layout(records=800)))
    assert "(80 per record for 100 bytes of text: compressing even one record" in smaller


def test_the_size_sentence_says_so_when_the_parts_do_not_add_up():
    sizes = _sizes(_layout())
    sizes["bytes_on_disk"] += 7
    sentence = capstone.size_sentence(sizes)
    assert "account for 2,000 of those bytes, not all of them" in sentence
    assert "padding" not in sentence


@pytest.mark.parametrize("count", [1, 400, 800])
def test_an_array_record_file_is_records_footer_padding_and_postscript(tmp_path, count):
    from course_lib.array_record import write_array_record_shards

    path = write_array_record_shards([bytes(range(100))] * count, tmp_path, 1)[0]
    layout = capstone.file_layout(path)
    size = path.stat().st_size
    assert sum(layout[part] for part in capstone.LAYOUT_PARTS) == size == layout["file_size"]
    assert layout["record_chunks"] == count
    assert layout["records"] == count * (capstone.CHUNK_HEADER_BYTES + 123)  # 100 raw bytes
    assert layout["block_headers"] == size // capstone.BLOCK_BYTES * 24
    assert layout["signature"] == capstone.CHUNK_HEADER_BYTES
    # The postscript sits in the file's last 64 KiB; the padding fills the blocks up.
    chunks = capstone.file_chunks(path)
    assert [kind for kind, _, _ in chunks[-3:]] == ["p", "r", "p"]
    assert chunks[-2][1] == size - capstone.BLOCK_BYTES
    assert capstone.BLOCK_BYTES < layout["padding"] < 2 * capstone.BLOCK_BYTES


def test_a_file_with_padding_after_every_chunk_has_more_padding_chunks(tmp_path):
    from course_lib.array_record import write_array_record_shards

    plain = write_array_record_shards([b"x" * 100] * 3, tmp_path / "a", 1)[0]
    padded = write_array_record_shards([b"x" * 100] * 3, tmp_path / "b", 1,
                                       options="group_size:1,pad_to_block_boundary:true")[0]
    kinds = [[kind for kind, _, _ in capstone.file_chunks(path)] for path in (plain, padded)]
    assert kinds[0] == ["s", "r", "r", "r", "r", "p", "r", "p"]
    assert kinds[1].count("p") == 5 and padded.stat().st_size == 5 * capstone.BLOCK_BYTES


def test_the_corpus_reports_its_sizes_as_the_files_have_them(tmp_path):
    sizes = capstone.write_corpus(tmp_path, row_length=32, num_shards=2, limit=20)
    files = sorted(tmp_path.glob("*.array_record"))
    assert sizes["bytes_on_disk"] == sum(path.stat().st_size for path in files)
    assert sizes["layout"]["record_chunks"] == sizes["records"]
    assert sum(sizes["layout"][part] for part in capstone.LAYOUT_PARTS) == sizes["bytes_on_disk"]
    assert sizes["bytes_group_64"] > 0 and sizes["files"] == 2


def test_tokens_per_second_covers_the_steps_after_the_compiling_step():
    # step 1 (compiling) ends at 10 s; steps 2-4 end at 11, 12 and 14 s: 150 tokens in 4 s,
    # the same steps 2-4 the processes time (not from the end of step 2 on)
    steps = [{"time": t, "real_tokens": 50} for t in (10.0, 11.0, 12.0, 14.0)]
    assert capstone.tokens_per_second(steps) == pytest.approx(150 / 4.0)
    assert capstone.tokens_per_second(steps, skip=2) == pytest.approx(100 / 3.0)
    with pytest.raises(ValueError, match="too few"):
        capstone.tokens_per_second(steps[:1])
    with pytest.raises(ValueError, match="at least 1"):
        capstone.tokens_per_second(steps, skip=0)


def test_text_pieces_cover_every_docstring_byte_in_row_length_pieces(tmp_path):
    pieces = capstone.text_pieces(64, limit=30)
    assert max(len(piece) for piece in pieces) == 64
    joined = b"".join(capstone._stdlib_docstrings()[:30])
    assert b"".join(pieces) == joined
    (tmp_path / "steps.jsonl").write_text("\n".join(json.dumps(s) for s in _steps([1.0], [7])))
    assert capstone.read_steps(tmp_path)[0]["checksum"] == 7


def _mixture_report(counts, mix=0.7) -> dict:
    return {"rank": 1, "mix": mix, "mixture": counts}


def test_the_mixture_check_follows_the_rule_prefix_by_prefix():
    # weights [0.7, 1 - 0.7] -> 233/99 (integer_weights): of 10 records 2 are code, of 20: 5
    on_rule = capstone.mixture_check(_mixture_report([[8, 2, 800, 200], [6, 4, 600, 400]]))
    assert on_rule["on_rule"] == 1 and on_rule["records"] == [14, 6]
    exact = capstone.mixture_check(_mixture_report([[8, 2, 800, 200], [6, 4, 600, 400]][:1]))
    assert exact["on_rule"] == 1 and exact["steps"] == 1
    assert on_rule["batch_share"] == (0.6, 0.8) and on_rule["records_per_batch"] == 10
    assert on_rule["weights"] == (233, 99) and on_rule["with_both"] == 2


def test_a_batch_without_one_corpus_is_counted():
    check = capstone.mixture_check(_mixture_report([[8, 2, 800, 200], [10, 0, 1000, 0]]))
    assert check["with_both"] == 1


@pytest.mark.parametrize(("mix", "text"), [
    (0.7, "1 - 0.7 = 0.30000000000000004 for the code. The mix's rule (Grain 0.2.18's "
          "`_float_to_int_proportions`, and course_lib's `integer_weights`) turns them into "
          "whole numbers: it scales the smallest weight to 100 and truncates each (in "
          "floating point, 0.30000000000000004 x (100 / 0.30000000000000004) is "
          "99.99999999999999, just under 100, so the smallest truncates to 99), giving "
          "233:99, so the docstrings get 233/332 = 70.18% of the records, not 70% (weights"),
    (0.75, "truncates each, giving 300:100, so the docstrings get 300/400 = 75.00% of the "
           "records, exactly the 75% asked for."),
])
def test_the_weights_sentence_gives_the_share_the_rule_makes(mix, text):
    assert text in capstone.weights_sentence(mix)


@pytest.mark.parametrize(("tokens", "verdict"), [
    ([1500, 500], "about their share of records (within the course's 5% margin)"),
    ([1530, 470], "about their share of records"),
    ([3000, 500], "more than their share of records, because the docstrings records this "
                  "process drew hold 200 bytes on average and its code records 100"),
    ([750, 500], "less than their share of records, because the docstrings records this "
                 "process drew hold 50")])
def test_the_mixture_sentence_says_how_tokens_follow_records(tokens, verdict):
    check = capstone.mixture_check(_mixture_report([[15, 5, *tokens]]))
    sentence = capstone.mixture_sentence(check)
    assert "weights 233:99 (70.18% docstrings): 15 docstrings and 5 code records, 75.00% " \
        "docstrings" in sentence
    assert verdict in sentence
    assert "exactly what 233:99 gives (the code records: the records so far times 99/332, " \
        "rounded down)" in sentence  # 20 records, 20 * 99 // 332 = 5 code


def test_the_mixture_sentence_says_when_the_records_stray_from_the_rule():
    check = capstone.mixture_check(_mixture_report([[10, 10, 100, 100], [14, 6, 140, 60]]))
    sentence = capstone.mixture_sentence(check)
    assert "only after 0 of 2 steps" in sentence
    assert "between 50% and 70% docstrings" in sentence


def test_the_mixed_unigram_entropy_weights_each_corpus_byte_distribution():
    import math

    only_a, only_b = [0] * 256, [0] * 256
    only_a[ord("a")], only_b[ord("b")] = 5, 9
    assert capstone.mixed_unigram_entropy([only_a, only_b], [1.0, 0.0]) == 0.0
    assert capstone.mixed_unigram_entropy([only_a, only_b], [0.5, 0.5]) == pytest.approx(
        math.log(2))
    with pytest.raises(ValueError, match="adding up to 1"):
        capstone.mixed_unigram_entropy([only_a, only_b], [0.5, 0.6])


def test_both_corpora_are_written_in_their_own_files(tmp_path):
    sizes = capstone.write_corpora(tmp_path, 64, 2, {"docstrings": 10, "code": 1})
    assert list(sizes) == list(capstone.CORPORA)
    for name in capstone.CORPORA:
        assert len(list(tmp_path.glob(f"{name}-*.array_record"))) == 2
    assert sizes["code"]["tokens"] == len(capstone._stdlib_sources()[0])
    assert sum(sizes["code"]["byte_counts"]) == sizes["code"]["tokens"]
    assert b"".join(capstone.code_pieces(64, 1)) == capstone._stdlib_sources()[0]
    with pytest.raises(ValueError, match="corpus='images'"):
        capstone.write_corpus(tmp_path, 64, 2, corpus="images")


@pytest.mark.parametrize(("shares", "expected"), [
    ({"step": 0.76, "wait": 0.014, "checkpoint": 0.21, "rest": 0.016},
     {"step": 76, "wait": 1, "checkpoint": 21, "rest": 2}),
    ({"step": 0.755, "wait": 0.0145, "checkpoint": 0.2155, "rest": 0.015},
     {"step": 76, "wait": 1, "checkpoint": 22, "rest": 1}),
    ({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}, {"a": 34, "b": 33, "c": 33}),
])
def test_rounded_percents_add_up_to_the_rounded_whole(shares, expected):
    percents = capstone.rounded_percents(shares)
    assert percents == expected
    assert sum(percents.values()) == round(100 * sum(shares.values()))


def test_rounded_percents_refuse_what_is_not_a_share():
    with pytest.raises(ValueError, match="finite"):
        capstone.rounded_percents({"a": float("nan")})


def test_wall_percents_add_up_in_the_sentence_and_the_picture_title():
    report = _report(0, [0.014] * 10, [(5, 2.1)])
    percent = capstone.wall_percents(report)
    assert percent["step"] + percent["idle"] == 100
    assert percent["idle"] == percent["wait"] + percent["checkpoint"] + percent["rest"]
    sentence = capstone.idle_sentence([report], 1.0)
    assert (f"{percent['step']}% in the step, idle {percent['idle']}%: {percent['wait']}% "
            f"waiting for data, {percent['checkpoint']}% saving 1 checkpoint, ") in sentence
    two = capstone.idle_sentence([_report(0, [0.014] * 10, [(3, 2.1), (6, 2.1)])], 1.0)
    assert "saving 2 checkpoints, " in two


@pytest.mark.parametrize(("rate", "text"), [(19873.0, "19,900"), (20575.4, "20,600"),
                                            (987.6, "988"), (1234567.0, "1,230,000")])
def test_format_rate_keeps_three_significant_digits(rate, text):
    assert capstone.format_rate(rate) == text


def test_a_small_checkpoint_share_gets_no_advice():
    # checkpoints are the largest idle part, but under 5% of the wall time
    report = _report(0, [0.001] * 40, [(10, 0.8)])
    sentence = capstone.idle_sentence([report], 1.0)
    assert "most of the idle time is saving checkpoints." in sentence
    assert "asynchronously" not in sentence


class _Rank:
    def __init__(self, rank, status, returncode=0, signal_name=None):
        self.rank, self.status, self.returncode = rank, status, returncode
        self.signal_name = signal_name


class _Result:
    def __init__(self, ranks, elapsed=11.8, timeout=600):
        self.script, self.ranks, self.elapsed, self.timeout = "/x/train_lm.py", ranks, \
            elapsed, timeout
        self.ok = all(rank.status == "ok" for rank in ranks)


@pytest.mark.parametrize(("ranks", "text"), [
    ([_Rank(0, "ok"), _Rank(1, "ok")], "train_lm.py: both processes finished in 11.8 s."),
    ([_Rank(0, "ok")], "train_lm.py: the one process finished in 11.8 s."),
    ([_Rank(r, "ok") for r in range(3)], "train_lm.py: all 3 processes finished in 11.8 s."),
    ([_Rank(0, "killed", -9), _Rank(1, "failed", -9, "SIGKILL")],
     "train_lm.py: rank 1 was killed by SIGKILL; rank 0 was stopped by the launcher because "
     "a peer failed, after 11.8 s."),
    ([_Rank(0, "failed", 1), _Rank(1, "killed"), _Rank(2, "killed"), _Rank(3, "killed")],
     "train_lm.py: rank 0 failed with exit code 1; ranks 1, 2 and 3 were stopped by the "
     "launcher because a peer failed, after 11.8 s."),
    ([_Rank(0, "stuck"), _Rank(1, "stuck")],
     "train_lm.py: ranks 0 and 1 were still running at the 600 s deadline, after 11.8 s."),
])
def test_the_job_sentence_names_each_rank_in_the_singular_or_plural(ranks, text):
    assert capstone.job_sentence(_Result(ranks)) == text


def test_the_control_sentence_opens_with_whether_the_broken_resume_was_caught():
    reference = _steps([3.0, 2.5, 2.25, 2.0], [1, 2, 3, 4])
    broken = capstone.compare_runs(reference, _steps([2.4, 2.3], [7, 8], start=3), 2)
    sentence = capstone.control_sentence(broken, 2, same_weights=False)
    assert sentence.startswith("Caught: the resume that ignores the data position differs")
    assert "0 have the same tokens" in sentence and "weights and optimizer state differ" in \
        sentence
    assert not sentence.startswith(capstone.resume_sentence(broken, 3, 2, [1, 1], False)[:20])
    same = capstone.compare_runs(reference, reference[2:], 2)
    assert capstone.control_sentence(same, 2, same_weights=True).startswith("Not caught:")
    only_weights = capstone.control_sentence(same, 2, same_weights=False)
    assert only_weights.startswith("Caught:") and "2 the same loss" in only_weights
    short = capstone.compare_runs(reference, _steps([2.0], [4], start=4), 2)
    assert capstone.control_sentence(short, 2, True).startswith("Not comparable:")


def test_the_state_sentence_lists_the_saved_entries_as_saved():
    state = {"groups": 29, "parent": {"next_index": 253}, "rows_taken": 8}
    sentence = capstone.state_sentence(state)
    assert sentence.startswith("The saved position holds 3 numbers:")
    assert "parent.next_index = 253: the position in the mixed stream" in sentence
    assert "groups = 29: how many groups" in sentence and "rows_taken = 8: how many" in sentence
    other = capstone.state_sentence({"next_index": 5})
    assert "1 number:" in other and "next_index = 5: not described in this lesson" in other
    assert "all 8 of them" not in sentence  # the group's size is not in the state
    full = capstone.state_sentence(state, rows_per_group=8)
    assert "handed out already (all 8 of them, so the next row starts a new group)." in full
    part = capstone.state_sentence({**state, "rows_taken": 3}, rows_per_group=8)
    assert "handed out already (3 of its 8)." in part, part
    for bad in (0, 8.0, True):
        with pytest.raises(ValueError, match=r"rows_per_group=.* must be a positive int"):
            capstone.state_sentence(state, rows_per_group=bad)


def _timed(rank, step_seconds, saves=(), wait=0.001, start_step=0, rest=0.0):
    """A report whose timed steps last `step_seconds` (one per step), each after `wait` (one
    number for every step, or one per step), with `rest` seconds of loop after it and the
    given saves (step, seconds)."""
    waits = wait if isinstance(wait, (list, tuple)) else [wait] * len(step_seconds)
    wait_spans, step_spans, save_spans, clock = [], [], [], 0.0
    for index, (seconds, wait) in enumerate(zip(step_seconds, waits, strict=True)):
        wait_spans.append([clock, clock + wait])
        step_spans.append([clock + wait, clock + wait + seconds])
        clock += wait + seconds + rest
        for step, length in saves:
            if step == start_step + 2 + index:
                save_spans.append([step, clock, clock + length])
                clock += length
    return {"rank": rank, "wait_spans": wait_spans, "step_spans": step_spans,
            "start_step": start_step, "save_spans": save_spans}


def _jitter(value, count):
    return [value * (1 + 0.01 * ((i % 5) - 2)) for i in range(count)]


def test_a_slower_step_is_named_as_the_cause_when_it_alone_moves_the_time():
    first = _timed(0, _jitter(0.100, 58), [(15, 0.5), (30, 0.5), (45, 0.5)], start_step=0)
    second = _timed(0, _jitter(0.150, 28), [(45, 0.5)], start_step=30)
    sentence = capstone.process_speed_sentence(first, second)
    assert sentence.startswith("Process 0: ")
    assert "(1 save in 28 steps against 3 in 58)" in sentence
    assert "Slower, beyond the margin (5%), by +33%: the step (+39% on its own, margin 5%) " \
        "accounts for " \
        "it, partly offset by the checkpoints (-" in sentence

    assert "within" not in sentence


def test_slower_checkpoints_are_named_and_the_step_is_not_when_it_did_not_move():
    first = _timed(1, _jitter(0.100, 58), [(15, 0.3), (30, 0.3), (45, 0.3)])
    second = _timed(1, _jitter(0.100, 58), [(15, 1.5), (30, 1.5), (45, 1.5)])
    sentence = capstone.process_speed_sentence(first, second)
    assert "Slower, beyond the margin (5%), by +" in sentence and "the checkpoints (+" in sentence
    assert "on their own, margin 5%) account for it." in sentence and "the step (" not in sentence


def test_a_change_no_part_makes_alone_names_no_cause():
    # step and rest each add 4%: the whole moves 8%, neither part beyond 5% on its own, and
    # neither holds most of it
    first = _timed(0, _jitter(0.100, 50))
    second = _timed(0, _jitter(0.104, 50), rest=0.004)
    sentence = capstone.process_speed_sentence(first, second)
    assert "Slower, beyond the margin (5%), by +8%: no part alone moves the time per step " \
        "beyond the margin, and the change is spread over several parts, so this run cannot " \
        "say which part made it slower." in sentence
    assert "the step (+" not in sentence and "accounts" not in sentence
    assert "The slowest steps" not in sentence


def test_the_parts_are_means_that_add_up_to_the_whole():
    first = _timed(0, _jitter(0.100, 28), [(45, 0.3)], start_step=30, rest=0.002)
    parts = capstone.per_step(first)
    assert {parts[name].statistic for name in parts} == {"mean"}
    total = sum(parts[name].value for name in ("step", "wait", "checkpoint", "rest"))
    assert total == pytest.approx(parts["whole"].value)
    # the whole carries the standard errors of the step and the wait, combined
    assert parts["whole"].stderr == pytest.approx(
        math.hypot(parts["step"].stderr, parts["wait"].stderr))
    sentence = capstone.process_speed_sentence(first, first)
    assert "made of, as means per step: the step 99.9 ± 0.3 against 99.9 ± 0.3 ms" in sentence


def test_a_faster_run_and_parts_that_cancel_are_said_so():
    first = _timed(0, _jitter(0.100, 50))
    faster = capstone.process_speed_sentence(first, _timed(0, _jitter(0.080, 50)))
    assert "Faster, beyond the margin (5%), by -20%: the step (-20% on its own, margin 5%) " \
        "accounts for " \
        "it. The step's median: 80 against 100 ms, -20.0 ms where the mean moved -20.0 ms: " \
        "the typical step changed (-20%), not only a few." in faster
    assert "the step 80.0 ± 0.2 against 100.0 ± 0.2 ms" in faster
    # a 10% slower step, made up for by a loop that lost 10 ms per step
    cancel = capstone.process_speed_sentence(_timed(0, _jitter(0.100, 50), rest=0.010),
                                             _timed(0, _jitter(0.110, 50)))
    assert "The same within the margin (5%), at +0%, though on their own 2 parts moved " \
        "beyond their own margins: the step by +9% (margin 5%) and the rest of the loop by " \
        "-9% (margin 5%); the other parts together: +0%." in cancel, cancel
    # the checkpoints, measured once, have the 5% floor where the whole has a wider margin
    wide = capstone.process_speed_sentence(
        _timed(0, [0.06, 0.14] * 25, [(20, 0.3)]), _timed(0, [0.06, 0.14] * 25, [(20, 1.0)]))
    assert "The same within the margin (15%), at +13%, though on its own one part moved " \
        "beyond its own margin: the checkpoints by +13% (margin 5%); the other parts " \
        "together: +0%." in wide, wide
    same = capstone.process_speed_sentence(first, _timed(0, _jitter(0.101, 50)))
    assert same.endswith("The same within the margin (5%), and no part on its own moved "
                         "beyond its own margin.")


def test_a_noisy_step_makes_the_whole_too_noisy_to_tell():
    # the time per step carries the step's spread: +14% inside a 62% margin names no cause
    noisy = [0.02, 0.4] * 10
    first = _timed(0, noisy)
    second = _timed(0, [0.03, 0.45] * 10)
    sentence = capstone.process_speed_sentence(first, second)
    assert "Process 0: 241.0 ± 48.2 against 211.0 ± 43.6 ms per step" in sentence
    assert sentence.endswith("Too noisy to tell (a margin of 62%, wider than 25%): no cause "
                             "can be named.")
    assert "Slower" not in sentence and "lies in the step" not in sentence


def test_a_change_inside_the_steps_spread_is_within_the_margin_of_the_whole():
    # +8 ms a step on a step whose standard error is 3.8 ms: the whole's margin is 21%, not
    # the 5% floor, so +16% is the same time, and no part is named
    first = _timed(0, [0.03, 0.07] * 14, start_step=30)
    second = _timed(0, [0.038, 0.078] * 14, start_step=30)
    sentence = capstone.process_speed_sentence(first, second)
    assert "59.0 ± 3.8 against 51.0 ± 3.8 ms per step" in sentence
    assert sentence.endswith("The same within the margin (21%), and no part on its own moved "
                             "beyond its own margin.")


def test_a_step_not_named_gets_no_note():
    # the checkpoints account for the change; the step's +4% is not named, so no note on it
    first = _timed(0, _jitter(0.100, 50), [(20, 0.3)])
    second = _timed(0, _jitter(0.104, 50), [(20, 1.4)])
    sentence = capstone.process_speed_sentence(first, second)
    assert "Slower, beyond the margin (5%), by +24%: the checkpoints (+21% on their own, " \
        "margin 5%) " \
        "account for it (the other +4% lies within the 5% margin). Its saves took (ms), in the " \
        "steps compared: 1400 after step 20" in sentence
    assert "The step's median" not in sentence and "slowest steps" not in sentence


def test_a_change_no_part_moves_alone_but_one_holds_is_placed_in_it():
    # the step adds 4.5% (within the 5% floor on its own), the rest of the loop 0.8%: the
    # whole moves 5.3%, beyond 5%, and the step holds most of it
    first = _timed(0, _jitter(0.100, 50))
    second = _timed(0, _jitter(0.1045, 50), rest=0.0008)
    sentence = capstone.process_speed_sentence(first, second)
    assert "Slower, beyond the margin (5%), by +5%: no part alone moves the time per step " \
        "beyond the margin, but the change lies in the step (+4% on its own, +4.5 ms per " \
        "step), which stays within its margin on its own (5%, the course's 5% floor). The " \
        "step's median: 104 against 100 ms, +4.5 ms where the mean moved +4.5 ms: the " \
        "typical step changed (+4%), not only a few." in sentence


def _logged(seconds_per_step, first=1, count=60, tokens=1000):
    return [{"step": first + i, "real_tokens": tokens, "time": i * seconds_per_step}
            for i in range(count)]


@pytest.mark.parametrize(("seconds", "text"), [
    (1 / 15.3, "Steps 32-60 (from the end of step 31 to the end of step 60), the same steps in "
               "both runs: "
               "15,300 real tokens per second in the resumed run against 17,200 in the "
               "uninterrupted one (-11%). Each process's time per step over steps 32-60, as "
               "it timed them, judged by the margin rule"),
    (0.0530, "18,900 real tokens per second in the resumed run against 17,200 in the "
             "uninterrupted one (+10%)"),
])
def test_the_runs_sentence_gives_the_rates_then_judges_each_process(seconds, text):
    first = [_timed(rank, _jitter(0.100, 59), [(15, 0.5), (45, 0.5)]) for rank in range(2)]
    second = [_timed(rank, _jitter(0.120, 29), [(45, 0.5)], start_step=30)
              for rank in range(2)]
    first_steps = _logged(1 / 17.2)  # 1000 tokens a step: 17,200 tokens per second
    first_steps[5]["time"] += 100.0  # a slow early step: outside the steps compared
    sentence = capstone.runs_sentence(first_steps, first, _logged(seconds, 31, 30), second)
    assert text in sentence
    assert "Process 0: " in sentence and "Process 1: " in sentence
    assert "(1 save in 29 steps against 1 in 29)" in sentence  # the same steps, the same saves
    assert "Slower, beyond the margin" in sentence  # per process, from its own timings
    assert "within the margin (5%; each rate" not in sentence
    # the uninterrupted run's two spans come last, after the processes the header announces
    assert sentence.splitlines()[-1].startswith("The uninterrupted run's ")


def test_a_report_cut_to_the_resumed_runs_steps_keeps_their_spans_and_saves():
    report = _timed(0, [0.1] * 59, [(15, 0.5), (45, 0.5)])  # steps 2..60
    cut = capstone.from_step(report, 32)
    assert len(cut["step_spans"]) == 29 and cut["start_step"] == 30
    assert cut["step_spans"][0] == report["step_spans"][30]
    assert capstone.time_split(cut)["saves"] == 1


def test_checkpoints_named_as_the_cause_list_every_save_and_flag_a_first_save():
    first = _timed(0, _jitter(0.100, 58), [(15, 0.5), (30, 0.35), (45, 0.2)])
    second = _timed(0, _jitter(0.100, 28), [(45, 0.6)], start_step=30)
    sentence = capstone.process_speed_sentence(capstone.from_step(first, 32), second)
    assert "the checkpoints (+" in sentence and "account for it. Its saves took (ms), in the " \
        "steps compared: 600 after step 45 in the resumed run; 200 after step 45 in the " \
        "uninterrupted run; outside them: 500 after step 15, 350 after step 30 in the " \
        "uninterrupted run. In each run the process's first save took longest" in sentence, \
        sentence
    later = _timed(0, _jitter(0.100, 58), [(15, 0.2), (30, 0.35), (45, 0.2)])
    sentence = capstone.process_speed_sentence(capstone.from_step(later, 32), second)
    assert "Its saves took (ms)" in sentence and "first save took longest" not in sentence


def test_a_few_slow_steps_are_named_when_the_step_accounts_for_the_change():
    # the typical step is unchanged; 5 slow steps raise the mean by 20%
    first = _timed(0, _jitter(0.100, 50))
    second = _timed(0, _jitter(0.100, 45) + [0.3] * 5)
    sentence = capstone.process_speed_sentence(first, second)
    assert "the step (+20% on its own, margin 17%) accounts for it" in sentence
    assert "the typical step barely changed (+0%, within 5%), the change lies in a few slow " \
        "steps. The " \
        "slowest steps (ms): 300 at step 47, 300 at step 48, 300 at step 49 in the resumed " \
        "run" in sentence
    assert "first 6 after its compiling step" not in sentence


@pytest.mark.parametrize(("late", "said"), [
    # every step 20 ms slower and five at 400 ms: the median moves +20%, the mean +48%
    (0.12, "the typical step changed too (+20%), but by less than half as much as the mean: "
           "a few slow steps hold the rest"),
    # every step 4 ms faster and five at 400 ms: the median moves -4%, the mean +26%
    (0.096, "the typical step moved the other way (-4%), so the change lies in a few slow "
            "steps")])
def test_the_median_says_whether_every_step_or_a_few_moved(late, said):
    first = _timed(0, [0.1] * 50)
    second = _timed(0, [late] * 45 + [0.4] * 5)
    sentence = capstone.process_speed_sentence(first, second)
    assert "The step's median" in sentence and said in sentence


def test_slow_first_steps_after_the_resumed_compile_are_said_to_be_so():
    first = capstone.from_step(_timed(0, _jitter(0.100, 58)), 32)
    # six slow steps: fewer would stay inside the margin their own spread gives the mean
    slow = [0.3, 0.29, 0.28, 0.27, 0.26, 0.25]
    second = _timed(0, [*slow, *_jitter(0.100, 23)], start_step=30)
    sentence = capstone.process_speed_sentence(first, second)
    assert "Slower, beyond the margin (27%), by +36%: the step (+36% on its own, margin 27%) " \
        "accounts for it." in sentence
    assert "The slowest steps (ms): 300 at step 32, 290 at step 33, 280 at step 34 in the " \
        "resumed run" in sentence
    assert "the resumed run's slowest steps are among its first 6 after its compiling step " \
        "(step 31), while the uninterrupted run compiled at step 1, before the steps " \
        "compared." in sentence
    # the same slow steps, but both runs compiled at the same step: nothing to contrast
    alike = _timed(0, [*slow, *_jitter(0.100, 23)], start_step=30)
    assert "compiling step" not in capstone.process_speed_sentence(alike, second)


def test_a_cause_with_a_remainder_in_a_noisy_step_places_the_remainder():
    # the checkpoints add 19%; the other +39% is the step (+36% on its own, inside its 39%
    # margin) and the rest of the loop (+4%)
    first = _timed(0, [0.02, 0.18] * 14, [(45, 0.3)], start_step=30)
    second = _timed(0, [0.06, 0.22] * 14, [(45, 0.9)], start_step=30, rest=0.004)
    sentence = capstone.process_speed_sentence(first, second)
    assert "Slower, beyond the margin (39%), by +58%: the checkpoints (+19% on their own, " \
        "margin 5%) move it beyond the margin; the other +39% lies in the step (+36% on its own, " \
        "+40.0 ms per step), which is too noisy to tell on its own (a margin of 39%, from " \
        "its spread)" in sentence
    # a step too noisy to judge on its own gets no note on its median and slowest steps
    assert "cannot say" not in sentence and "The slowest steps" not in sentence
    assert "Its saves took (ms), in the steps compared: 900 after step 45 in the resumed " \
        "run; 300 after step 45 in the uninterrupted run." in sentence, sentence


def test_a_remainder_inside_a_margin_too_wide_to_tell_is_not_called_nothing():
    # 7 steps as in fast mode: the checkpoints add 72%; two slow steps give the step's mean
    # +31% and the time per step a margin of 40%, wider than 25%: the +31% is within it
    # but too noisy to call nothing, so the checkpoints do not account for it all
    first = _timed(0, _jitter(0.050, 7), [(12, 0.2)], start_step=8)
    second = _timed(0, [0.15, 0.12, *[0.05] * 5], [(12, 0.6)], start_step=8)
    sentence = capstone.process_speed_sentence(first, second)
    assert "Slower, beyond the margin (40%), by +103%: the checkpoints (+72% on their own, " \
        "margin 5%) move it beyond the margin; the other +31% lies in the step (+31% on its own, " \
        "+24.5 ms per step), which is too noisy to tell on its own (a margin of 40%, from " \
        "its spread). Its saves took" in sentence, sentence
    assert "account for it" not in sentence
    # inside that wide margin, a remainder under the 5% floor is nothing: +4% of step
    small = _timed(0, [0.13, *[0.04] * 6], [(12, 0.6)], start_step=8)
    sentence = capstone.process_speed_sentence(first, small)
    assert "Slower, beyond the margin (32%), by +76%: the checkpoints (+72% on their own, " \
        "margin 5%) account for it (the other +4% is under the course's 5% floor: inside a " \
        "margin wider than 25%, only that little is left to chance). Its saves took (ms), in " \
        "the steps compared: 600 after step 12" in sentence, sentence
    assert "The step's median" not in sentence


def test_a_cause_smaller_than_what_it_leaves_is_not_said_to_account_for_it():
    # the checkpoints add 9% beyond their 5% floor; the step's +13% stays inside its spread
    first = _timed(0, [0.03, 0.07] * 14, [(45, 0.3)], start_step=30)
    second = _timed(0, [0.038, 0.078] * 14, [(45, 0.45)], start_step=30)
    sentence = capstone.process_speed_sentence(first, second)
    assert "Slower, beyond the margin (18%), by +22%: of its parts, only the checkpoints (+9% " \
        "on their own, margin 5%) moved it beyond their own margin; the other +13%, nearly all " \
        "in the step (+13% on its own, margin 18%), lies within the 18% margin, so this run " \
        "names no other cause." in sentence, sentence
    assert "account for it" not in sentence


def test_a_cause_with_a_remainder_spread_over_parts_says_it_cannot_place_it():
    # the checkpoints add 13%; the step and the rest of the loop add about 4% each
    first = _timed(0, _jitter(0.100, 28), [(45, 0.3)], start_step=30)
    second = _timed(0, _jitter(0.104, 28), [(45, 0.72)], start_step=30, rest=0.004)
    sentence = capstone.process_speed_sentence(first, second)
    assert "the checkpoints (+13% on their own, margin 5%) move it beyond the margin; the " \
        "other +7% is spread over parts none of which moves beyond the margin alone, so this " \
        "run cannot " \
        "say where it went." in sentence
    assert "The slowest steps" not in sentence


def test_a_tie_with_slower_checkpoints_says_the_other_parts_went_the_other_way():
    first = _timed(0, _jitter(0.100, 28), [(45, 0.3)], start_step=30)
    second = _timed(0, _jitter(0.096, 28), [(45, 0.5)], start_step=30)
    sentence = capstone.process_speed_sentence(first, second)
    assert "The same within the margin (5%), at +3%, though on its own one part moved beyond " \
        "its own margin: the checkpoints by +6% (margin 5%); the other parts together: -4%. " \
        "Its saves took (ms), in the steps compared: 500 after step 45 in the resumed run; " \
        "300 after step 45 in the uninterrupted run." in sentence, sentence


def test_the_summary_says_which_records_each_process_reads_and_the_rules_weights():
    numbers = {"records": 10, "files": 2, "bytes_on_disk": 100, "global_rows": 16,
               "processes": 2, "row_length": 128, "record_share": [0.702, 0.7041],
               "weights": (233, 99), "fill": 0.9, "max_traces": 1, "tokens_per_second": 1e4,
               "idle": "", "killed_after": 37, "resumed_from": 30, "equal_steps": 30}
    lines = capstone.summary_lines(numbers)
    assert "each process reads every 2nd record of each corpus, from its own index" in lines[1]
    assert "the rule's 233:99 (70.18% docstrings); docstrings 70.20%, 70.41%" in lines[2]
    assert "every 3rd record" in capstone.summary_lines({**numbers, "processes": 3})[1]
    assert "every record" in capstone.summary_lines({**numbers, "processes": 1})[1]


def test_the_loss_sentence_says_what_the_unigram_entropy_is_computed_from():
    steps = [{**step, "real_tokens": 1000} for step in _steps([6.0] * 3 + [2.8] * 5,
                                                                list(range(8)))]
    plain = capstone.loss_sentence(steps, unigram_nats=3.0)
    assert "(the unigram entropy of both written corpora's bytes, each corpus weighted by its " \
        "share of the tokens the processes packed)" in plain, plain
    more = capstone.loss_sentence(steps, unigram_nats=3.0, corpus_bytes=136_000)
    assert "both written corpora's bytes, 136,000 bytes, 17x the 8,000 real tokens the steps " \
        "trained on, each corpus" in more, more
    alike = capstone.loss_sentence(steps, unigram_nats=3.0, corpus_bytes=8_100)
    assert "8,100 bytes, about as many as the 8,000 real tokens" in alike, alike
    fewer = capstone.loss_sentence(steps, unigram_nats=3.0, corpus_bytes=4_000)
    assert "4,000 bytes, fewer than the 8,000 real tokens the steps trained on (they read " \
        "the corpora more than once)" in fewer, fewer


def _span_steps():
    """Rank 0's log of 60 steps of 100 ms, with saves of 1 s after steps 15 and 30 and 0.5 s
    after step 45: the rate over steps 32-60 is higher than over steps 2-60."""
    times = [0.0]
    for step in range(2, 61):
        times.append(times[-1] + 0.1 + (1.0 if step - 1 in (15, 30) else 0) +
                     (0.5 if step - 1 == 45 else 0))
    return [{"step": i + 1, "real_tokens": 1000, "time": t} for i, t in enumerate(times)]


SPAN_SAVES = [(15, 1.0), (30, 1.0), (45, 0.5)]


def _span(reports) -> str:
    return capstone.span_sentence(_span_steps(), reports, 32)


def test_the_span_sentence_compares_two_spans_that_do_not_overlap():
    explained = _span([_timed(rank, _jitter(0.1, 59), SPAN_SAVES) for rank in range(2)])
    assert explained.startswith("The uninterrupted run's 8,530 real tokens per second over "
                                "steps 32-60 against its 7,020 over steps 2-60 (section 3) and "
                                "6,000 over steps 2-31. Each process's steps 32-60 against its "
                                "steps 2-31, which do not overlap"), explained
    assert "process 0, 1 save in steps 32-60 against 2 in steps 2-31: 118.2 ± 0.3 against " \
        "167.7 ± 0.3 ms per step (-30%, beyond its 5% margin), the saves' change alone -29% " \
        "(margin 5%), without the saves 100.9 ± 0.3 against 101.0 ± 0.3 ms (+0%, within its " \
        "5% margin); process 1" in explained, explained
    assert explained.endswith(". So in each process the saves account for the difference: "
                              "without them, the two spans take the same time per step within "
                              "their margins.")
    even = [{"step": i + 1, "real_tokens": 1000, "time": 0.1 * i} for i in range(60)]
    same = capstone.span_sentence(even, [_timed(rank, [0.1] * 59) for rank in range(2)], 32)
    assert same.endswith("over steps 2-31: steps 32-60 and steps 2-31 run at the same rate "
                         "within the 5% margin."), same


@pytest.mark.parametrize(("steps", "saves", "ending"), [
    # the later steps also compute 30% faster
    (_jitter(0.1, 30) + _jitter(0.07, 29), SPAN_SAVES,
     "So in each process the saves account for part of the difference, but without them the "
     "two spans still differ beyond the margin; this run does not measure what else does."),
    # no save moves anything: the faster steps alone
    (_jitter(0.1, 30) + _jitter(0.07, 29), (),
     "So the saves do not account for the difference: they did not move the time per step "
     "beyond their own margin, or moved it the other way; this run does not measure what "
     "does."),
    # saves 7% of the time per step, a faster step (-15%, inside its 21% margin) leaves more
    ([0.06, 0.14] * 15 + [0.045, 0.125] * 14 + [0.09], [(15, 0.15), (30, 0.15), (45, 0.075)],
     "In each process the saves moved the time per step beyond their own margin, but what "
     "they leave, though within the margin, is more than they moved, so this run does not say "
     "that the saves account for the difference."),
    # steps spread from 20 to 300 ms, as both spans: nothing to tell apart
    ([0.02, 0.3] * 29 + [0.02], (),
     "Each process's timings are too noisy to tell the two spans apart."),
    ([0.02, 0.3] * 15 + [0.02, 0.25] * 14 + [0.02], SPAN_SAVES,
     "In each process the saves moved the time per step beyond their own margin, but without "
     "them the times are too noisy to tell whether anything else did."),
    (_jitter(0.1, 59), (),
     "Each process's own timings give the two spans the same time per step within its "
     "margin: they do not confirm a difference in rate beyond the noise."),
])
def test_the_span_sentence_gives_one_conclusion_per_outcome(steps, saves, ending):
    sentence = _span([_timed(rank, steps, list(saves)) for rank in range(2)])
    assert sentence.endswith(ending), sentence


def test_the_span_sentence_draws_no_conclusion_when_the_processes_disagree():
    mixed = _span([_timed(0, _jitter(0.1, 59), SPAN_SAVES),
                   _timed(1, _jitter(0.1, 30) + _jitter(0.07, 29), SPAN_SAVES)])
    assert mixed.endswith("The processes do not agree (process 0: the saves account for it, "
                          "process 1: the saves and more), so this run cannot say whether the "
                          "saves account for the difference in rate."), mixed
    assert "So in each process" not in mixed


@pytest.mark.parametrize(("share", "text"), [(0.253, "25.3%"), (0.247, "24.7%"), (0.25, "25%"),
                                            (0.18, "18%"), (0.31, "31%")])
def test_a_margin_near_the_limit_shows_which_side_it_lies_on(share, text):
    assert capstone._margin(share) == text


def test_a_whole_margin_near_the_limit_prints_which_side_it_lies_on():
    # a margin just over 25%: the verdict line must not read "a margin of 25%, wider than 25%"
    spread = 0.04695  # steps of 100 ms +- 47 ms: a margin of 25.3%
    first = _timed(0, [0.1 - spread, 0.1 + spread] * 14, start_step=30)
    same, slower = (capstone.process_speed_sentence(first, _timed(
        0, [0.1 - spread + late, 0.1 + spread + late] * 14, start_step=30))
        for late in (0.0, 0.035))
    assert "Too noisy to tell (a margin of 25.3%, wider than 25%)" in same, same
    assert "Slower, beyond the margin (25.3%), by +35%: the step (+35% on its own, margin " \
        "25.3%) accounts for it." in slower, slower


def test_a_report_cut_between_two_steps_keeps_those_steps_and_their_saves():
    report = _timed(0, [0.1] * 59, [(15, 0.5), (45, 0.5)])  # steps 2..60
    early = capstone.between(report, 2, 31)
    assert len(early["step_spans"]) == 30 and early["step_spans"][-1] == report["step_spans"][29]
    assert capstone.time_split(early)["saves"] == 1


def test_the_resumed_runs_legend_names_the_steps_it_draws():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [{"step": i, "loss": 5.0 - 0.01 * i} for i in range(1, 61)]
    report = _timed(0, [0.1] * 29, [(45, 0.2)], start_step=30)
    figure = capstone.plot_run(steps, [report], resumed=steps[30:], killed_after=37,
                               run="resumed run", around=45)
    labels = [text.get_text() for text in figure.axes[0].get_legend().get_texts()]
    plt.close(figure)
    assert "resumed run, steps 31-60 (the killed run's steps not drawn)" in labels, labels
    assert "killed and resumed run" not in labels


def test_times_a_percent_is_computed_from_print_one_decimal_with_their_error():
    from course_lib.course.basics import Estimate

    assert capstone._pm1(Estimate(0.082, 0.0061, 29)) == "82.0 ± 6.1"
    assert capstone._pm1(Estimate(0.1, 0.0003, 29)) == "100.0 ± 0.3"
    assert capstone._pm1(Estimate.once(0.0075)) == "7.5"
