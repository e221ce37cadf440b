"""The launcher's summary shows what the scripts printed; the runtime's log is behind a flag."""

from __future__ import annotations

from course_lib.launch import LaunchResult, RankResult, is_runtime_log

GLOO = "[Gloo] Rank 1 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1"
NOTIFIER = ("W1201 10:11:28.830253   31948 preemption_notifier.cc:90] SIGTERM caught at "
            "2026-12-01T10:11:28.830251616+00:00")


def _stuck_job() -> LaunchResult:
    output = "\n".join(["rank 1: step 0 waits", GLOO, "rank 1: step 1 waits", NOTIFIER, ""])
    ranks = [RankResult(0, "ok", 0, "rank 0: finished\n", 1.0),
             RankResult(1, "stuck", -9, output, 15.0)]
    return LaunchResult(script="job.py", ranks=ranks, elapsed=15.0, timeout=15.0)


def test_runtime_log_lines_are_recognised_and_script_lines_are_not():
    assert is_runtime_log(GLOO) and is_runtime_log(NOTIFIER)
    assert is_runtime_log("I1201 10:11:28.000001   123 cpu_client.cc:12] ready")
    assert not is_runtime_log("rank 1: step 0 waits")
    assert not is_runtime_log("W: a line the script printed")


def test_summary_hides_the_runtime_log_and_says_how_to_see_it():
    summary = _stuck_job().summary()
    assert "rank 1: step 0 waits" in summary and "rank 1: step 1 waits" in summary
    assert "[Gloo]" not in summary and "preemption_notifier" not in summary
    assert "(2 lines of JAX and Gloo log hidden; summary(logs=True) shows them)" in summary


def test_summary_with_logs_shows_every_line():
    summary = _stuck_job().summary(logs=True)
    assert GLOO in summary and NOTIFIER in summary and "hidden" not in summary
