"""The launcher runs real multi-process JAX jobs on this machine and never hangs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from course_lib.launch import LaunchError, LaunchResult, free_port, launch

SCRIPTS = Path(__file__).parent / "multiprocess"


def results(result: LaunchResult) -> list[dict]:
    """The JSON line each rank printed after 'RESULT ', in rank order."""
    found = []
    for rank in result.ranks:
        lines = [line for line in rank.output.splitlines() if line.startswith("RESULT ")]
        assert lines, f"rank {rank.rank} printed no RESULT line:\n{rank.output}"
        found.append(json.loads(lines[-1].removeprefix("RESULT ")))
    return found


def is_running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (a zombie is dead, only not reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_free_port_is_a_valid_tcp_port():
    assert 1024 <= free_port() < 65536


@pytest.mark.timeout(60)
def test_two_processes_join_one_jax_job():
    result = launch(SCRIPTS / "report_process.py", num_processes=2, devices_per_process=2,
                    timeout=45)
    assert result.ok and result.returncodes == [0, 0]
    reports = results(result)
    assert [r["process_index"] for r in reports] == [0, 1]
    assert all(r["process_count"] == 2 for r in reports)
    assert all(r["local_device_count"] == 2 and r["device_count"] == 4 for r in reports)


@pytest.mark.timeout(60)
def test_failing_rank_is_reported_and_its_peers_are_killed(tmp_path):
    result = launch(SCRIPTS / "misbehave.py", num_processes=2, timeout=45,
                    args=["--fail-rank", "1", "--pid-dir", str(tmp_path)], check=False)
    assert not result.ok
    assert result.failed_ranks == [1] and result.killed_ranks == [0]
    assert not result.timed_out
    assert "rank 1 fails on purpose" in result.ranks[1].output
    assert "rank(s) [1] failed" in result.summary()
    assert result.elapsed < 30, "the launcher waited for the surviving rank instead of killing it"
    # Rank 0 and the child it started are gone: the whole process group was killed.
    pids = [int(pid) for pid in (tmp_path / "rank0.pids").read_text().split()]
    deadline = time.monotonic() + 5
    while any(is_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(is_running(pid) for pid in pids)


@pytest.mark.timeout(60)
def test_failure_raises_launch_error_with_the_result(tmp_path):
    with pytest.raises(LaunchError, match=r"rank\(s\) \[1\] failed") as caught:
        launch(SCRIPTS / "misbehave.py", num_processes=2, timeout=45,
               args=["--fail-rank", "1", "--pid-dir", str(tmp_path)])
    assert caught.value.result.failed_ranks == [1]


@pytest.mark.timeout(30)
def test_rank_still_running_at_the_deadline_is_killed_and_reported_stuck():
    start = time.monotonic()
    result = launch(SCRIPTS / "misbehave.py", num_processes=2, timeout=1.5,
                    args=["--hang-rank", "1"], check=False)
    assert time.monotonic() - start < 10
    assert result.timed_out and result.stuck_ranks == [1]
    assert result.ranks[0].status == "ok" and result.ranks[1].returncode != 0
    assert "sleeping forever" in result.ranks[1].tail()
    assert "deadline" in result.summary()
    # It never called initialize_from_env, so it was not asked for its stacks.
    assert result.ranks[1].stacks == "" and "waiting here" not in result.summary()


@pytest.mark.timeout(60)
def test_ranks_end_when_their_launcher_is_killed(tmp_path):
    # A notebook kernel killed mid-launch cannot stop its ranks: they must notice and end.
    launcher = subprocess.Popen(
        [sys.executable, "-c", "import sys; from course_lib.launch import launch; "
         "launch(sys.argv[1], num_processes=2, timeout=50, args=sys.argv[2:])",
         str(SCRIPTS / "outlive_launcher.py"), "--pid-dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        files = [tmp_path / f"rank{rank}.pids" for rank in range(2)]
        deadline = time.monotonic() + 40
        while not all(path.exists() for path in files) and time.monotonic() < deadline:
            assert launcher.poll() is None, "the launcher ended before its ranks started"
            time.sleep(0.05)
        pids = [int(pid) for path in files for pid in path.read_text().split()]
        assert all(is_running(pid) for pid in pids)
        launcher.kill()
        launcher.wait()
        deadline = time.monotonic() + 5
        while any(is_running(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [pid for pid in pids if is_running(pid)]
        assert not left, f"processes {left} (ranks and their children) outlived the launcher"
    finally:
        launcher.kill()
        for path in tmp_path.glob("rank*.pids"):  # whatever a failing run left behind
            for pid in map(int, path.read_text().split()):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("drop_remainder", [False, True])
def test_shard_by_jax_process_gives_disjoint_shards(drop_remainder):
    num_records, batch_size = 11, 2
    result = launch(SCRIPTS / "shard_keys.py", num_processes=2, timeout=45,
                    args=[str(num_records), str(batch_size), str(int(drop_remainder))])
    shards = results(result)
    assert [s["shard_index"] for s in shards] == [0, 1]
    keys = [set(s["keys"]) for s in shards]
    assert all(len(k) == len(s["keys"]) for k, s in zip(keys, shards, strict=True))
    assert not keys[0] & keys[1], "two processes read the same record"
    if drop_remainder:
        assert len(keys[0]) == len(keys[1]) == num_records // 2
        assert shards[0]["all_steps"] == shards[1]["all_steps"] == [2, 2]
    else:
        assert keys[0] | keys[1] == set(range(num_records)), "a record was lost"


@pytest.mark.timeout(60)
def test_unequal_shards_give_unequal_step_counts():
    # Why drop_remainder=True matters: with 11 records and batches of 1, one process would
    # run a step its peer never runs, and a collective in that step would wait forever.
    result = launch(SCRIPTS / "shard_keys.py", num_processes=2, timeout=45,
                    args=["11", "1", "0"])
    # The first shard takes the remainder, as in Grain.
    assert results(result)[0]["all_steps"] == [6, 5]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"num_processes": 0}, ValueError, "num_processes=0 must be positive"),
        ({"devices_per_process": 1.5}, TypeError, "devices_per_process=1.5"),
        ({"timeout": 0}, ValueError, "timeout=0 must be a positive number"),
        ({"args": "--steps 3"}, TypeError, "args='--steps 3' must be a sequence of strings"),
        ({"env": {"SEED": 0}}, TypeError, "env=.* must map strings to strings"),
    ],
)
def test_bad_arguments_are_named_in_the_error(kwargs, error, message):
    with pytest.raises(error, match=message):
        launch(SCRIPTS / "report_process.py", **kwargs)


def test_missing_script_is_reported(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a file"):
        launch(tmp_path / "nope.py")


def test_initialize_from_env_outside_a_launch_explains_the_fix(monkeypatch):
    from course_lib.launch import initialize_from_env

    monkeypatch.delenv("FTB_NUM_PROCESSES", raising=False)
    with pytest.raises(RuntimeError, match=r"python -m course_lib\.launch"):
        initialize_from_env()
    assert initialize_from_env(required=False).num_processes == 1


@pytest.mark.timeout(30)
def test_command_line_exit_code_reflects_failure(tmp_path, capsys):
    from course_lib.launch import main

    assert main(["-n", "2", "--timeout", "1", str(SCRIPTS / "misbehave.py"),
                 "--hang-rank", "0"]) == 124
    assert main(["-n", "2", "--timeout", "30", str(SCRIPTS / "misbehave.py"),
                 "--fail-rank", "0", "--pid-dir", str(tmp_path)]) == 1
    assert "[rank 0]" in capsys.readouterr().out


def test_main_thread_stack_is_picked_out_of_a_faulthandler_dump():
    from course_lib.launch import RankResult

    stacks = (
        "main thread 0x00007f98207c6b80\n"
        "Thread 0x00007f9800000001 (most recent call first):\n"
        '  File "threading.py", line 320 in wait\n'
        "\n"
        "Current thread 0x00007f98207c6b80 (most recent call first):\n"
        '  File "jax/_src/distributed.py", line 199 in shutdown\n'
        '  File "train.py", line 40 in <module>\n'
        "\n"
        "Thread 0x00007f9800000002 (most recent call first):\n"
        '  File "reader.py", line 7 in read\n')
    rank = RankResult(rank=1, status="stuck", returncode=-9, output="", elapsed=1.0,
                      stacks=stacks)
    assert rank.main_stack.splitlines() == [
        '  File "jax/_src/distributed.py", line 199 in shutdown',
        '  File "train.py", line 40 in <module>']
    assert RankResult(rank=0, status="ok", returncode=0, output="", elapsed=1.0).main_stack == ""
