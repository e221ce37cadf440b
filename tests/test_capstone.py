"""The capstone script as a real two-process job, at toy size.

The whole promise of lesson 12 is tested here: a job whose process dies is stopped and
named, never left hanging; the same command resumes from the last checkpoint, and every
step after it sees the same global batch and computes the same loss, bit for bit, as a run
that was never interrupted, without tracing its step twice. And the same script can join
a job that a scheduler started (SLURM's environment, no course launcher).
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from course_lib.course import capstone
from course_lib.launch import free_port, initialize_from_env, launch

HERE = Path(__file__).resolve().parent
TOY = ["--steps", "6", "--batch-size", "2", "--row-length", "32", "--features", "16"]


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("capstone-data")
    capstone.write_corpora(data, row_length=32, num_shards=3,
                           limits={"docstrings": 60, "code": 2})
    return data


def _train(data: Path, out: Path, *extra: str, check: bool = True):
    return launch(capstone.SCRIPT, num_processes=2, timeout=90, check=check,
                  args=["--data", str(data), "--out", str(out), *TOY, *extra])


@pytest.mark.timeout(300)
def test_a_killed_job_resumes_with_the_same_batches_losses_and_weights(toy_data, tmp_path):
    reference, crashed = tmp_path / "reference", tmp_path / "crashed"
    control = tmp_path / "control"
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # the two first runs side by side
        uninterrupted = pool.submit(_train, toy_data, reference, "--checkpoint-every", "100")
        killed = pool.submit(_train, toy_data, crashed, "--checkpoint-every", "3",
                             "--kill-rank", "1", "--kill-at-step", "5", check=False).result()
        uninterrupted.result()
    assert killed.failed_ranks == [1] and killed.ranks[1].signal_name == "SIGKILL"
    assert killed.ranks[0].status == "killed"
    assert "rank 1 was killed by SIGKILL" in killed.summary()
    assert [step["step"] for step in capstone.read_steps(crashed)] == [1, 2, 3, 4, 5]
    shutil.copytree(crashed, control)

    resumed = _train(toy_data, crashed, "--checkpoint-every", "3")
    assert all("resumed from the checkpoint of step 3" in rank.output for rank in resumed.ranks)
    steps = capstone.read_steps(crashed)
    assert [step["step"] for step in steps] == [1, 2, 3, 4, 5, 4, 5, 6]
    after = capstone.resumed_lines(steps, 3)
    assert after == steps[5:]
    ref_steps = capstone.read_steps(reference)
    comparison = capstone.compare_runs(ref_steps, after, from_step=3)
    assert comparison == {"steps": 3, "missing": [], "same_batches": [4, 5, 6],
                          "same_segments": [4, 5, 6], "same_positions": [4, 5, 6],
                          "same_losses": [4, 5, 6]}
    # The steps before the kill agree too, and the batches change from step to step.
    assert steps[:5] == [{**s, "time": steps[i]["time"]} for i, s in enumerate(ref_steps[:5])]
    assert len({step["checksum"] for step in steps[:5]}) == 5
    reports = capstone.read_reports(crashed)
    assert [(r["start_step"], r["steps"], r["traces"]) for r in reports] == [(3, 6, 1)] * 2
    ref_reports = capstone.read_reports(reference)
    assert {r["fingerprint"] for r in reports} == {ref_reports[0]["fingerprint"]}

    # The broken resume (weights and optimizer, not the data position) must be caught.
    _train(toy_data, control, "--checkpoint-every", "3", "--ignore-data-position")
    broken = capstone.compare_runs(ref_steps, capstone.resumed_lines(
        capstone.read_steps(control), 3), from_step=3)
    assert broken["steps"] == 3 and broken["same_batches"] == []
    assert broken["same_losses"] == []
    assert capstone.read_reports(control)[0]["fingerprint"] != ref_reports[0]["fingerprint"]


@pytest.mark.timeout(120)
def test_the_global_batch_is_measured_as_both_local_batches_in_rank_order(toy_data, tmp_path):
    _train(toy_data, tmp_path / "run", "--checkpoint-every", "2")
    steps, reports = capstone.read_steps(tmp_path / "run"), capstone.read_reports(tmp_path / "run")
    check = capstone.global_batch_check(steps, reports)
    assert check == {"global_shape": [4, 32], "local_shapes": [[2, 32], [2, 32]],
                     "steps": 6, "matching": 6, "counted": [6, 6]}
    # The two processes' local batches differ, so matching them to the halves means something.
    assert all(a != b for a, b in zip(*(r["local_checksums"] for r in reports), strict=True))
    assert [step for step, _, _ in reports[0]["save_spans"]] == [2, 4, 6]
    times = capstone.step_times(reports[0])  # steps 3-6 timed end to end (2 compiles)
    assert sorted(times) == [3, 4, 5, 6] and all(seconds > 0 for seconds in times.values())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("stage", ["before", "during", "after"])
def test_a_process_killed_near_a_collective_stops_the_job_and_is_named(stage):
    result = launch(HERE / "multiprocess" / "die_near_collective.py", num_processes=2,
                    timeout=60, args=[stage], check=False)
    assert result.failed_ranks == [1] and result.ranks[1].signal_name == "SIGKILL"
    assert result.ranks[0].status == "killed", result.summary()
    assert not result.timed_out and result.elapsed < 45
    assert f"SIGKILL {stage} the collective" in result.ranks[1].output
    assert "rank 1 was killed by SIGKILL" in result.summary()


def _slurm_env(rank: int, port: int) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("FTB_")}
    # What `srun -n 2` sets for the tasks of a one-node step (the variables JAX's
    # SlurmCluster reads), on 127.0.0.1; the coordinator port is JAX's override.
    env.update(SLURM_JOB_ID="4242", SLURM_STEP_NODELIST="127.0.0.1", SLURM_NTASKS="2",
               SLURM_STEP_NUM_NODES="1", SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank),
               JAX_COORDINATOR_PORT=str(port), JAX_PLATFORMS="cpu",
               PYTHONPATH=str(HERE.parent))
    return env


@pytest.mark.timeout(120)
def test_two_processes_with_a_slurm_step_environment_form_one_job():
    import json

    port = free_port()
    processes = [subprocess.Popen(
        [sys.executable, str(HERE / "multiprocess" / "slurm_step.py")],
        env=_slurm_env(rank, port), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True) for rank in range(2)]
    try:
        outputs = [process.communicate(timeout=90)[0] for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, 9)
                process.wait()
    reports = [json.loads(line.removeprefix("RESULT ")) for output in outputs
               for line in output.splitlines() if line.startswith("RESULT ")]
    assert [process.returncode for process in processes] == [0, 0], outputs
    assert [report["cluster"] for report in reports] == ["slurm", "slurm"]
    assert [report["info"] for report in reports] == [[0, 2, f"127.0.0.1:{port}"],
                                                      [1, 2, f"127.0.0.1:{port}"]]
    assert all(report["global_shape"] == [8] for report in reports)
    assert all(report["rows"] == [0, 1, 2, 3, 100, 101, 102, 103] for report in reports)


def _without_launchers(monkeypatch):
    for name in list(os.environ):
        if name.startswith(("FTB_", "SLURM_", "OMPI_", "KUBERNETES_", "PMI_")):
            monkeypatch.delenv(name)


def test_outside_the_launcher_and_any_cluster_the_error_names_both_ways(monkeypatch):
    _without_launchers(monkeypatch)
    with pytest.raises(RuntimeError, match=r"course_lib.launch -n 2.*srun"):
        initialize_from_env()
    assert initialize_from_env(required=False) == (0, 1, None)


@pytest.mark.parametrize(("variables", "named"), [
    ({"PMI_SIZE": "2", "PMI_RANK": "1"}, "PMI_SIZE=2"),
    ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"}, "not started by srun"),
    ({"OMPI_COMM_WORLD_SIZE": "2"}, "OMPI_COMM_WORLD_SIZE=2"),
])
def test_copies_from_a_launcher_jax_does_not_detect_are_refused_even_alone(
        monkeypatch, variables, named):
    _without_launchers(monkeypatch)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(RuntimeError, match=f"{named}.*rank 0 of 1"):
        initialize_from_env(required=False)


def test_the_script_started_by_nothing_refuses_before_writing(monkeypatch, tmp_path):
    from course_lib.scripts import train_lm

    _without_launchers(monkeypatch)
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="pass --single-process"):
        train_lm.main(["--data", str(tmp_path), "--out", str(out)])
    assert not out.exists()
    monkeypatch.setenv("PMI_SIZE", "2")  # MPICH's mpirun started two copies
    with pytest.raises(RuntimeError, match="PMI_SIZE=2"):
        train_lm.main(["--data", str(tmp_path), "--out", str(out), "--single-process"])
    assert not out.exists()


def test_the_script_refuses_bad_arguments_with_the_rule(capsys):
    from course_lib.scripts import train_lm

    with pytest.raises(SystemExit):
        train_lm.parse_args(["--data", "d", "--out", "o", "--steps", "0"])
    with pytest.raises(SystemExit):
        train_lm.parse_args(["--data", "d", "--out", "o", "--kill-rank", "1"])
    for url in (["--data", "d", "--out", "gs://bucket/run"],
                ["--data", "gs://bucket/data", "--out", "o"]):
        with pytest.raises(SystemExit):
            train_lm.parse_args(url)
        assert "local or shared file systems only" in capsys.readouterr().err
    args = train_lm.parse_args(["--data", "d", "--out", "o"])
    assert (args.steps, args.kill_rank, args.single_process) == (60, None, False)


def test_the_notebook_shows_the_scripts_own_loader_and_resume():
    from course_lib.scripts import train_lm

    text = capstone.SCRIPT.read_text()
    for name in ("make_dataset", "resume"):
        source = capstone.script_function(name)
        assert source in text and source.startswith(f"def {name}(")
    assert "restore_training" in capstone.script_function("resume")
    chain = capstone.script_function("make_dataset")
    for step in ("MapDataset.source", "[process_index::process_count]", ".shuffle(",
                 ".repeat()", "MapDataset.mix", "FirstFitPackIterDataset", ".batch("):
        assert step in chain
    outline = capstone.script_outline()
    assert "save_training" in outline and "make_global_batch" in outline
    assert "log.write" not in outline and "# bookkeeping" in outline
    with pytest.raises(ValueError, match="make_dataset"):
        capstone.script_function("nothing")
    assert callable(train_lm.fingerprint)


def _args(data: Path, *extra: str):
    from course_lib.scripts import train_lm

    return train_lm.parse_args(["--data", str(data), "--out", "o", "--batch-size", "2",
                                "--row-length", "32", *extra])


def _batches(data: Path, count: int, *extra: str, state=None, process=(0, 1)):
    from course_lib.scripts import train_lm

    with iter(train_lm.make_dataset(data, _args(data, *extra), *process)) as batches:
        if state is not None:
            batches.set_state(state)
        taken = [next(batches) for _ in range(count)]
        return taken, batches.get_state()


def test_records_longer_than_the_row_stop_the_chain_instead_of_losing_their_tail(toy_data):
    from course_lib.scripts import train_lm

    [batch], _ = _batches(toy_data, 1)
    assert batch["tokens"].shape == batch["tokens_segment_ids"].shape == (2, 32)
    too_short = _args(toy_data, "--row-length", "16")  # the toy data was cut at 32 bytes
    with (iter(train_lm.make_dataset(toy_data, too_short, 0, 1)) as batches,
          pytest.raises(ValueError, match="longer than its row of 16")):
        next(batches)


@pytest.mark.parametrize("mix", ["0.7", "0.25"])
def test_every_prefix_of_the_chain_holds_the_mix_of_records(toy_data, mix):
    from course_lib.mixing import integer_weights
    from course_lib.scripts import train_lm

    batches, _ = _batches(toy_data, 40, "--mix", mix)
    counts = np.cumsum([train_lm.mixture(batch)[:2] for batch in batches], axis=0)
    weights = integer_weights([float(mix), 1 - float(mix)], 2)
    for docstrings, code in counts:  # packing takes a prefix of the mixed stream per batch
        records = docstrings + code
        assert code == records * weights[1] // sum(weights)
    # the rule's whole numbers, not the floats: 0.7 and 1 - 0.7 give 233:99 (70.18%)
    assert weights == {"0.7": (233, 99), "0.25": (100, 300)}[mix]


def test_the_mixture_counts_records_and_tokens_of_each_corpus():
    from course_lib.scripts import train_lm

    batch = {"tokens_positions": np.array([[0, 1, 2, 0, 1, 0], [0, 1, 0, 0, 0, 0]]),
             "corpus": np.array([[1, 1, 1, 2, 2, 0], [2, 2, 1, 0, 0, 0]])}
    assert train_lm.mixture(batch) == [2, 2, 4, 4]


def test_the_chain_resumes_mid_run_with_the_same_batches(toy_data):
    whole, _ = _batches(toy_data, 12)
    first, state = _batches(toy_data, 5)
    rest, _ = _batches(toy_data, 7, state=state)
    for expected, got in zip(whole, first + rest, strict=True):
        assert expected.keys() == got.keys()
        assert all(np.array_equal(expected[key], got[key]) for key in expected)
    assert not np.array_equal(whole[5]["tokens"], whole[0]["tokens"])


def test_the_processes_read_disjoint_records_of_both_corpora(toy_data):
    from course_lib.scripts import train_lm

    rows = []
    for process in (0, 1):
        batches, _ = _batches(toy_data, 6, process=(process, 2))
        rows.append({bytes(row[segments == 1].astype(np.uint8)) for batch in batches
                     for row, segments in zip(batch["tokens"], batch["tokens_segment_ids"],
                                              strict=True)})
    assert rows[0] and rows[1] and not rows[0] & rows[1]
    assert train_lm.CORPORA == capstone.CORPORA


@pytest.mark.timeout(180)
@pytest.mark.parametrize("workers", ["1", "2"])
def test_worker_processes_do_not_change_a_batch(toy_data, workers):
    alone, _ = _batches(toy_data, 6)
    with_workers, _ = _batches(toy_data, 6, "--workers", workers)
    for expected, got in zip(alone, with_workers, strict=True):
        assert all(np.array_equal(expected[key], got[key]) for key in expected)


def test_each_corpus_is_shuffled_with_its_own_seed_from_the_runs_seed(tmp_path):
    """Two corpora holding the same records: shuffled with one seed, the code records drawn
    would be a prefix of the docstrings' order (Grain asks for one seed per component)."""
    from course_lib.array_record import write_array_record_shards
    from course_lib.scripts import train_lm

    pieces = [f"record {number:03d}".encode() for number in range(64)]
    for name in train_lm.CORPORA:
        write_array_record_shards(pieces, tmp_path, 2, prefix=name)

    def drawn(seed: str) -> list[list[bytes]]:
        batches, _ = _batches(tmp_path, 24, "--seed", seed, "--row-length", "16")
        found = [[], []]
        for batch in batches:
            for tokens, corpus, segments in zip(batch["tokens"], batch["corpus"],
                                                batch["tokens_segment_ids"], strict=True):
                for segment in range(1, segments.max() + 1):
                    inside = segments == segment
                    found[corpus[inside][0] - 1].append(bytes(tokens[inside].astype(np.uint8)))
        return found

    docstrings, code = drawn("0")
    assert len(code) >= 8 and len(set(docstrings)) == len(docstrings)
    assert set(code) - set(docstrings)  # not the same order: one corpus's records are not
    assert drawn("0") == [docstrings, code]  # the other's prefix; and a seed fixes both
    assert drawn("1") != [docstrings, code]
    seeds = {train_lm.shuffle_seed(seed, process, corpus)
             for seed in (0, 1) for process in (0, 1) for corpus in (1, 2)}
    assert len(seeds) == 8
