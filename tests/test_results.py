"""The results pipeline (tools/results, `python -m tools.results`): a row trains its seeds from the CLI, appends them
to its CSVs, draws its curve and the results page; recorded seeds are kept, not re-run; every shipped row resolves."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import pytest

from rapidrl.runs.config import parse_set, read_toml, resolve
from rapidrl.runs.layout import read_csv_metrics
from tools import results
from tools.results import ROWS, Published, Row


def test_every_row_resolves_to_a_valid_run_configuration():
    for row in ROWS.values():
        for quick in (False, True):
            argv = row.train_argv(row.quick_timesteps if quick else row.timesteps, quick)
            layer = {"run": {"algo": argv[0], "env": argv[1], "timesteps": int(argv[3])}, "algo": {}, "env": {}}
            layers = []
            for flag, value in zip(argv[4::2], argv[5::2]):
                if flag == "--config":  # a preset variant (Row.config), below the command line's values
                    layers.append(("variant", read_toml(value)))
                    continue
                assert flag == "--set", argv
                section, key, value = parse_set(value)  # as the CLI reads --set
                layer[section][key] = value
            config = resolve([*layers, ("row", layer)])
            assert config.run.timesteps == (row.quick_timesteps if quick else row.timesteps)
        assert row.seeds and row.timesteps > row.quick_timesteps


def test_a_row_runs_records_draws_and_keeps_recorded_seeds(tmp_path, monkeypatch, capsys):
    row = Row("ppo-cartpole-test", "Classic control (test)", "ppo", "CartPole-v1", 1024, (0, 1),
              (Published(500, "Gymnasium", "the maximum return"),), 512, sets=("run.eval_episodes=2",))
    monkeypatch.setattr(results, "ROWS", {row.name: row})
    out = tmp_path / "docs" / "results"
    results.run_row(row, (0,), out, tmp_path / "runs")
    with open(out / "ppo-cartpole-test.csv") as f:
        recorded = list(csv.DictReader(f))
    assert [r["seed"] for r in recorded] == ["0"] and int(recorded[0]["timesteps"]) == 1024
    assert float(recorded[0]["eval_mean"]) >= 8 and int(recorded[0]["eval_episodes"]) == 2
    assert (out / "ppo-cartpole-test-curve.csv").is_file() and (out / "ppo-cartpole-test.png").is_file()
    capsys.readouterr()
    results.run_row(row, (0, 1), out, tmp_path / "runs")  # seed 0 is kept, seed 1 is trained
    assert "seed 0: already recorded" in capsys.readouterr().out
    with open(out / "ppo-cartpole-test.csv") as f:
        assert [r["seed"] for r in csv.DictReader(f)] == ["0", "1"]
    page = results.write_page(out).read_text()
    assert "## Classic control (test)" in page and "`ppo-cartpole-test`" in page
    assert "500 (the maximum return)" in page and "![ppo-cartpole-test](results/ppo-cartpole-test.png)" in page


def test_a_seed_is_recorded_with_its_rows_curve_metric_and_the_carried_training_time(tmp_path):
    """``Row.curve_metric`` picks the curve and train column (MAPPO: the team return); the wall-clock is the
    summary's training time, which a resumed run carries over from its checkpoint."""
    import json

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("global_step,charts/episodic_return,charts/team_return\n100,-10,-30\n200,-9,-27\n")
    summary = {"status": "finished", "timesteps": 200, "eval_mean": -25.0, "eval_std": 1.0, "eval_episodes": 4,
               "wall_time_s": 4.0, "train_time_s": 8.0, "sps": 50.0}
    (run / "summary.json").write_text(json.dumps(summary))
    team = Row("team-test", "Multi-agent (test)", "mappo", "MPE/simple_spread-v3", 200, (0,),
               curve_metric="charts/team_return")
    recorded = results.record_seed(team, 0, run, tmp_path / "team")
    assert (recorded["train_return"], recorded["wall_s"], recorded["sps"]) == (-27, 8.0, 25.0)
    with open(tmp_path / "team" / "team-test-curve.csv") as f:
        assert [float(r["episodic_return"]) for r in csv.DictReader(f)] == [-30, -27]
    # the default metric; a summary from before train_time_s existed gives this process's wall-clock
    (run / "summary.json").write_text(json.dumps({k: v for k, v in summary.items() if k != "train_time_s"}))
    agent = Row("agent-test", "Multi-agent (test)", "mappo", "MPE/simple_spread-v3", 200, (0,))
    recorded = results.record_seed(agent, 0, run, tmp_path / "agent")
    assert (recorded["train_return"], recorded["wall_s"], recorded["sps"]) == (-9, 4.0, 50.0)


def test_command_line_lists_rows_and_rejects_unknown_ones(capsys):
    assert results.main(["list"]) == 0
    assert "ppo-hopper" in capsys.readouterr().out
    assert results.main(["no-such-row"]) == 2
    assert "unknown: no-such-row" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        results.main(["--no-such-flag"])


def test_solve_summary_finds_the_first_and_the_lasting_solve():
    evals = [(256, 100.0, 1.0), (512, 500.0, 2.5), (768, 400.0, 3.0), (1024, 480.0, 4.0), (1280, 490.0, 5.0)]
    assert results.solve_summary(evals, 475) == {"solve_step": 512, "solve_wall_s": 2.5, "stable_step": 1024}
    assert results.solve_summary(evals[:3], 475) == {"solve_step": 512, "solve_wall_s": 2.5, "stable_step": ""}
    assert results.solve_summary(evals[:1], 475) == {"solve_step": "", "solve_wall_s": "", "stable_step": ""}


def test_a_row_with_a_solve_criterion_records_steps_and_wall_clock_to_solve(tmp_path, monkeypatch):
    """Every checkpoint is evaluated after training; the CSV gains the solve columns, <row>-evals.csv every
    evaluation, and the page a per-seed table with the peer's runs beside (CartPole's every episode earns >= 8)."""
    row = Row("ppo-cartpole-solve", "Classic control (test)", "ppo", "CartPole-v1", 1024, (0,), (), 512,
              sets=("run.eval_episodes=2",), solve=8.0, eval_every=256, peer="peer-test")
    monkeypatch.setattr(results, "ROWS", {row.name: row})
    out = tmp_path / "docs" / "results"
    out.mkdir(parents=True)
    (out / "peer-test.csv").write_text(
        "library,task,seed,timesteps,solve_step,solve_wall_s,stable_step,eval_mean,wall_s,setting\n"
        "sb3-contrib 0,CartPole,1,2048,1024,9.5,,20.0,30.0,its setting\n")
    results.run_row(row, (0,), out, tmp_path / "runs")
    with open(out / "ppo-cartpole-solve.csv") as f:
        (recorded,) = list(csv.DictReader(f))
    assert (recorded["solve_step"], recorded["stable_step"]) == ("256", "256") and float(recorded["solve_wall_s"]) > 0
    with open(out / "ppo-cartpole-solve-evals.csv") as f:
        assert [int(r["step"]) for r in csv.DictReader(f)] == [256, 512, 768, 1024]
    page = results.write_page(out).read_text()
    assert "### `ppo-cartpole-solve`: steps and wall-clock to solve" in page
    assert "| sb3-contrib 0 | CartPole | 1 | 2,048 | 1,024 | 9.5 s | not at the end | 20.0 | 30 s |" in page
    assert "peer-test: its setting" in page


def test_an_offline_row_evaluates_its_checkpoints_and_gives_the_normalised_score(tmp_path, monkeypatch):
    """An offline run has no training episodes: its curve is its checkpoints' evaluations (eval_every without a solve
    criterion), and the eval column adds D4RL's normalised score from the row's reference returns."""
    import numpy as np

    import rapidrl as rr
    from rapidrl.buffers.dataset import collect_episodes, write_dataset

    env = rr.make_vec("Pendulum-v1", 2, seed=0)
    data = write_dataset("test/pendulum/zero-v0", collect_episodes(env, lambda o: np.zeros((len(o), 1), np.float32),
                                                                    400), env.single_observation_space,
                         env.single_action_space, env_id="Pendulum-v1", root=tmp_path / "datasets")
    row = Row("bc-pendulum-test", "Offline (test)", "bc", "Pendulum-v1", 64, (0,), (Published(50, "X", "a score"),),
              32, sets=("run.eval_episodes=2", f"algo.dataset={data}", "algo.hidden=[16, 16]",
                        "algo.batch_size=32"), eval_every=32, normalize=(-1500.0, -150.0))
    monkeypatch.setattr(results, "ROWS", {row.name: row})
    out = tmp_path / "docs" / "results"
    results.run_row(row, (0,), out, tmp_path / "runs")
    with open(out / "bc-pendulum-test-evals.csv") as f:
        assert [int(r["step"]) for r in csv.DictReader(f)] == [32, 64]
    with open(out / "bc-pendulum-test.csv") as f:
        (recorded,) = list(csv.DictReader(f))
    assert "solve_step" not in recorded and recorded["train_return"] == ""
    score = 100 * (float(recorded["eval_mean"]) + 1500.0) / 1350.0
    page = results.write_page(out).read_text()
    assert f"{float(recorded['eval_mean']):.1f}<br>score {score:.1f} |" in page
    assert (out / "bc-pendulum-test.png").is_file() and "steps and wall-clock to solve" not in page
    (drawn,) = results.plot_series(row, out)  # no training curve: the evaluations are the curve, on the score scale
    assert (drawn["kind"], drawn["xs"]) == ("evals", [32.0, 64.0]) and drawn["ys"][-1] == pytest.approx(score)


def test_an_offline_to_online_row_trains_its_variant_and_marks_the_switch_on_its_curve():
    row = ROWS["iql-hopper-finetune"]
    argv = row.train_argv(row.timesteps, False)
    assert argv[4:6] == ["--config", str(row.config_path())] and row.config_path().is_file()
    assert results._offline_steps(row) == read_toml(row.config_path())["algo"]["offline_steps"] == 10_000
    pendulum = Row("iql-pendulum-test", "Offline (test)", "iql", "Pendulum-v1", 64, (0,))
    assert results._offline_steps(pendulum) == 20_000  # iql_pendulum.toml's
    assert results._offline_steps(Row(**{**vars(pendulum), "sets": ("algo.offline_steps=7",)})) == 7
    assert results._offline_steps(ROWS["iql-hopper-medium-replay"]) == 0  # offline only


def test_a_pending_row_says_why_until_it_has_results(tmp_path, monkeypatch):
    row = Row("ppo-cartpole-pending", "Classic control (test)", "ppo", "CartPole-v1", 1024, (0,),
              pending="not run yet: it needs a week here.")
    monkeypatch.setattr(results, "ROWS", {row.name: row})
    out = tmp_path / "docs" / "results"
    out.mkdir(parents=True)
    page = results.write_page(out).read_text()
    assert "| not run yet |" in page and "- `ppo-cartpole-pending`: not run yet: it needs a week here." in page
    (out / f"{row.name}.csv").write_text(
        "seed,timesteps,eval_mean,eval_std,eval_episodes,train_return,wall_s,sps,date_utc,commit\n"
        "0,1024,500.0,0.0,10,480.0,12.0,85,2026-11-26,abc1234\n")
    page = results.write_page(out).read_text()
    assert "it needs a week here" not in page and "| 500.0 |" in page


def test_an_interrupted_seed_resumes_and_a_finished_one_is_recorded_without_training(tmp_path, monkeypatch, capsys):
    """A session that ends mid-run loses at most the steps since the last checkpoint: the next `bench results`
    resumes the seed's run; a run that finished but was not recorded is recorded as it is; a run of another
    setting (the preset changed) is trained afresh."""
    import json

    row = Row("ppo-cartpole-resume", "Classic control (test)", "ppo", "CartPole-v1", 2048, (0,), (), 512,
              sets=("run.eval_episodes=2", "run.checkpoint_every=512", "run.checkpoint_keep=10"))
    monkeypatch.setattr(results, "ROWS", {row.name: row})
    out, runs = tmp_path / "docs" / "results", tmp_path / "runs"
    results.run_row(row, (0,), out, runs)
    run_dir = results.seed_run_dir(runs, row.name, 0)
    assert run_dir == runs / "full" / row.name / "seed-0"
    assert results.run_state(run_dir, row, row.timesteps, 0) == "finished"
    assert results.run_state(run_dir, row, row.timesteps, 1) == ""
    with open(out / f"{row.name}.csv") as f:
        uninterrupted = next(csv.DictReader(f))

    # finished, not recorded (the session ended while recording): recorded without training again
    (out / f"{row.name}.csv").unlink()
    metrics = (run_dir / "metrics.csv").read_text()
    capsys.readouterr()
    results.run_row(row, (0,), out, runs)
    assert "finished training but was not recorded" in capsys.readouterr().out
    assert (run_dir / "metrics.csv").read_text() == metrics and (out / f"{row.name}.csv").is_file()

    # interrupted after its checkpoint at 1,024 steps: resumed from there, to the full budget
    (out / f"{row.name}.csv").unlink()
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps(summary | {"status": "stopped"}))
    from rapidrl.train.checkpoint import list_checkpoints

    for step, path in list_checkpoints(run_dir / "checkpoints"):
        if step > 1024:
            path.unlink()
    assert results.run_state(run_dir, row, row.timesteps, 0) == "resumable"
    assert results.resume_step(row, run_dir) == 1024
    first_part = results._wall_at_steps(read_csv_metrics(run_dir / "metrics.csv"))[1024]
    results.run_row(row, (0,), out, runs)
    assert "resuming the interrupted run" in capsys.readouterr().out
    resumed = json.loads((run_dir / "summary.json").read_text())
    assert resumed["resumed"] and resumed["status"] == "finished"
    with open(out / f"{row.name}.csv") as f:
        record = next(csv.DictReader(f))
    assert int(record["timesteps"]) == 2048 and first_part > 0
    # both parts' training: the checkpoint carried the clock, so the second part's times continue the first's
    assert float(record["wall_s"]) == round(resumed["train_time_s"], 1) and resumed["train_time_s"] > first_part
    walls = results._wall_at_steps(read_csv_metrics(run_dir / "metrics.csv"))
    assert all(wall > first_part for step, wall in walls.items() if step > 1024)
    # an exact resume (built-in env: its state and the RNGs are in the checkpoint): the same final policy
    assert (record["eval_mean"], record["train_return"]) == (uninterrupted["eval_mean"], uninterrupted["train_return"])

    # the row's own settings differ from the saved run's (here its checkpoint interval): trained afresh too
    assert results.run_state(run_dir, row, row.timesteps, 0) == "finished"
    other = Row(row.name, row.family, row.algo, row.env, row.timesteps, row.seeds, (), 512,
                sets=("run.eval_episodes=2", "run.checkpoint_every=256", "run.checkpoint_keep=10"))
    assert results.run_state(run_dir, other, row.timesteps, 0) == ""
    # the preset's setting differs from the saved run's: that run is not this row's, so it is trained afresh
    saved = (run_dir / "config.toml").read_text().replace("learning_rate = 0.001", "learning_rate = 0.5")
    (run_dir / "config.toml").write_text(saved)
    assert results.run_state(run_dir, row, row.timesteps, 0) == ""


def test_a_row_passes_sigterm_on_to_its_training_process_and_leaves_ctrl_c_to_it(tmp_path):
    """`kill` of `python -m tools.results` reaches the training process, which then stops at a checkpoint (instead of
    the parent dying and leaving it running); Ctrl-C, which the terminal sends to both, is left to the child."""
    import os
    import signal
    import sys
    import threading
    import time

    ready, received = tmp_path / "ready", tmp_path / "received"
    child = ("import pathlib, signal, sys, time\n"
             f"def stop(signum, frame):\n    pathlib.Path({str(received)!r}).write_text(signal.Signals(signum).name)\n"
             "    sys.exit(130)\n"
             "signal.signal(signal.SIGTERM, stop)\n"
             f"pathlib.Path({str(ready)!r}).write_text('up')\n"
             "time.sleep(60)\n")

    def signal_the_parent():
        end = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < end:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)  # ignored by the parent while its child trains
        os.kill(os.getpid(), signal.SIGTERM)  # passed on to the child

    before = signal.getsignal(signal.SIGTERM)
    threading.Thread(target=signal_the_parent, daemon=True).start()
    assert results.run_training_process([sys.executable, "-c", child]) == 130
    assert received.read_text() == "SIGTERM" and signal.getsignal(signal.SIGTERM) == before


def test_a_stopped_seed_ends_the_command_with_a_line_saying_how_to_continue(tmp_path, monkeypatch, capsys):
    row = Row("ppo-cartpole-stopped", "Classic control (test)", "ppo", "CartPole-v1", 2048, (0,))
    monkeypatch.setattr(results, "ROWS", {row.name: row})
    for code, word, exit_code in ((130, "stopped", 130), (1, "error", 1)):
        monkeypatch.setattr(results, "run_training_process", lambda argv, code=code: code)
        assert results.main([row.name, "--out", str(tmp_path / "out"), "--runs-root", str(tmp_path)]) == exit_code
        err = capsys.readouterr().err
        assert err.startswith(f"rapidrl: {word}: ppo-cartpole-stopped seed 0 ") and "run the row again" in err
        assert f"`python -m tools.results {row.name} --runs-root {tmp_path.as_posix()}`" in err


def test_the_command_that_continues_a_run_names_its_runs_root_unless_it_is_the_default():
    assert results.continue_command("ppo-pong", "runs/results/full/ppo-pong/seed-0") == \
        "python -m tools.results ppo-pong"
    assert results.continue_command("ppo-pong", "runs-in-progress/full/ppo-pong/seed-0") == \
        "python -m tools.results ppo-pong --runs-root runs-in-progress"
    assert results.continue_command("ppo-pong", "runs/results/quick/ppo-pong/seed-0") == \
        "python -m tools.results ppo-pong --quick"  # a quick run continues only with --quick (its own budget)
    assert results.continue_command("ppo-pong", None) == results.continue_command("ppo-pong", "") == \
        "python -m tools.results ppo-pong"  # progress recorded before the run directory was kept
    assert results.continue_command("ppo-pong", "full/ppo-pong/seed-0") == \
        "python -m tools.results ppo-pong --runs-root ."


@pytest.mark.parametrize("run_dir", ["seed-0", "ppo-pong/seed-0", "runs/results/ppo-pong/seed-0",
                                     "runs/results/full/ppo-breakout/seed-0", "runs/results/full/ppo-pong/run-0"])
def test_a_run_directory_of_another_shape_is_a_clear_error(run_dir):
    """The progress CSV's run_dir comes from ``python -m tools.results``; a hand-edited one gets an error naming it,
    not an IndexError or a command that would continue another run."""
    with pytest.raises(results.RunDirError, match=f"run directory '{run_dir}' of row 'ppo-pong' is not "
                                         r"<runs root>/\{full,quick\}/ppo-pong/seed-<n>"):
        results.continue_command("ppo-pong", run_dir)


def test_an_unfinished_seed_shows_its_progress_until_it_is_recorded(tmp_path, monkeypatch, capsys):
    """A seed stopped mid-run (or read with --progress while it runs) puts the steps it reached, its training return,
    wall-clock and curve so far on the page in place of the row's 'not run yet'; recording it when it finishes
    replaces them. A half-written last line of a live metrics.csv is not read."""
    import json

    row = Row("ppo-cartpole-long", "Classic control (test)", "ppo", "CartPole-v1", 10_000, (0,),
              pending="not run yet: it needs a week here.")
    monkeypatch.setattr(results, "ROWS", {row.name: row})
    out, runs = tmp_path / "docs" / "results", tmp_path / "runs"
    run_dir = runs / "full" / row.name / "seed-0"

    def stopped_at_2048(argv):  # a training process stopped by a signal after logging two updates
        assert argv[argv.index("--run-dir") + 1] == str(run_dir)
        run_dir.mkdir(parents=True)
        (run_dir / "metrics.csv").write_text("global_step,charts/episodic_return,time/total\n"
                                             "1024,20.5,3.0\n2048,31.25,6.5\n30")  # the last line is half written
        return 130

    monkeypatch.setattr(results, "run_training_process", stopped_at_2048)
    assert results.main([row.name, "--out", str(out), "--runs-root", str(runs)]) == 130
    with open(out / f"{row.name}-progress.csv") as f:
        progress = list(csv.DictReader(f))
    assert [(r["seed"], r["steps"], r["budget"], r["train_return"], r["wall_s"]) for r in progress] == \
        [("0", "2048", "10000", "31.25", "6.5")]
    with open(out / f"{row.name}-curve.csv") as f:
        assert [(r["step"], r["episodic_return"]) for r in csv.DictReader(f)] == [("1024", "20.5"), ("2048", "31.25")]
    page = (out.parent / results.RESULTS_MD).read_text()
    assert "| 0 (in progress) |" in page and "it needs a week here" not in page
    assert "seed 0: **in progress**: 2,048 of 10,000 steps after 6 s of training, training return 31.2" in page
    # the run is not under the default root: the page says how to reach it
    assert f"`python -m tools.results {row.name} --runs-root {runs.as_posix()}` continues it" in page
    assert f"![{row.name}](results/{row.name}.png)" in page and (out / f"{row.name}.png").is_file()

    # --progress trains nothing and reads the run as it stands (here: resumable, further on)
    monkeypatch.setattr(results, "run_training_process", lambda argv: pytest.fail("--progress trained"))
    assert results.run_state(run_dir, row, row.timesteps, 0) == ""  # no config.toml: not this row's run
    capsys.readouterr()
    monkeypatch.setattr(results, "run_state", lambda *args: "resumable")
    with open(run_dir / "metrics.csv", "a") as f:
        f.write("72,40.0,9.0\n")  # the half-written line completed: step 3072
    assert results.main([row.name, "--progress", "--out", str(out), "--runs-root", str(runs)]) == 0
    assert "seed 0: at 3,072 of 10,000 steps, train return 40.0, 9.0 s of training" in capsys.readouterr().out
    assert "3,072 of 10,000 steps" in (out.parent / results.RESULTS_MD).read_text()

    # a hand-edited run directory in the progress CSV: a one-line error naming it and the file, no traceback
    progress_csv = out / f"{row.name}-progress.csv"
    kept = progress_csv.read_text()
    progress_csv.write_text(kept.replace(f"/full/{row.name}/", f"/{row.name}/"))
    monkeypatch.setattr(results, "run_state", lambda *args: "")  # nothing re-recorded: the page reads the edit
    capsys.readouterr()
    assert results.main([row.name, "--progress", "--out", str(out), "--runs-root", str(runs)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rapidrl: error: run directory '{(runs / row.name / 'seed-0').as_posix()}' of row "
                          f"'{row.name}' is not <runs root>/{{full,quick}}/{row.name}/seed-<n>") and \
        f"the run_dir column of {progress_csv}" in err and "Traceback" not in err
    progress_csv.write_text(kept)

    # finished and recorded: the progress and its note are gone, the finished curve replaces the partial one
    (run_dir / "metrics.csv").write_text("global_step,charts/episodic_return,time/total\n5000,50,10\n10000,80,20\n")
    (run_dir / "summary.json").write_text(json.dumps({"status": "finished", "timesteps": 10_000, "eval_mean": 90.0,
                                                      "eval_std": 1.0, "eval_episodes": 10, "wall_time_s": 20.0}))
    results.record_seed(row, 0, run_dir, out)
    assert not (out / f"{row.name}-progress.csv").exists()
    with open(out / f"{row.name}-curve.csv") as f:
        assert [r["step"] for r in csv.DictReader(f)] == ["5000", "10000"]
    page = results.write_page(out).read_text()
    assert "(in progress) |" not in page and "**in progress**" not in page and "| 0 | 90.0 | 80.0 |" in page


def test_the_shipped_results_page_is_what_its_csvs_and_rows_give(tmp_path):
    """docs/RESULTS.md is generated: regenerating it from docs/results/*.csv and ROWS changes nothing (after editing
    a row, run ``python -c "from tools import results as r; r.write_page(r.DOCS / 'results')"``)."""
    import shutil

    shutil.copytree(results.DOCS / "results", tmp_path / "results")
    page = results.write_page(tmp_path / "results").read_text()
    assert page == (results.DOCS / results.RESULTS_MD).read_text()


def test_rapidrl_bench_results_points_to_the_repository_tool(capsys):
    """The results bookkeeping left the package: `rapidrl bench results ...` says where it went, exit 2."""
    from rapidrl.benchmarks.run import main as bench_main

    assert bench_main(["results", "ppo-hopper", "--progress"]) == 2
    err = capsys.readouterr().err
    assert "repository tooling" in err and "`python -m tools.results ppo-hopper --progress`" in err


def test_rows_are_read_from_toml_with_shared_texts_and_clear_errors(tmp_path):
    """rows.toml: ``{key}`` in a row's text is the [texts] entry, ``{name}`` the row's name; a misspelt field, an
    unknown text, a missing field or a repeated name is an error naming the file and the row."""
    path = tmp_path / "rows.toml"
    head = '[texts]\nwhy = "run `{name}` for a week"\nsrc = "a paper"\n'
    row = ('[[row]]\nname = "r"\nfamily = "F"\nalgo = "ppo"\nenv = "CartPole-v1"\ntimesteps = 1000\nseeds = [0, 1]\n'
           'pending = "{why}."\npublished = [{ value = 5, spread = 1, source = "S", setting = "{src}, 3 seeds" }]\n')
    path.write_text(head + row)
    (loaded,) = results.load_rows(path).values()
    assert loaded == Row("r", "F", "ppo", "CartPole-v1", 1000, (0, 1), (Published(5, "S", "a paper, 3 seeds", 1),),
                         pending="run `r` for a week.")
    for text, message in ((row + "seed = 3\n", r"row 'r': unknown field\(s\) seed"),
                          (row.replace("{why}", "{wyh}"), r"row 'r': '\{wyh\}\.'\.\.\.: no text 'wyh'"),
                          (row.replace('timesteps = 1000\n', ''), "row 'r': .*timesteps"),
                          (row + row, "row 'r': a second row of that name")):
        path.write_text(head + text)
        with pytest.raises(ValueError, match=f"{path.name}: {message}"):
            results.load_rows(path)


def test_wall_clock_at_a_checkpoint_between_logged_steps_is_interpolated():
    """Off-policy runs log every log_every_steps env steps, which need not fall on a checkpoint's step (R2D2's 8 envs:
    30,720 between the logged 30,704 and 30,800)."""
    wall = {30_704: 100.0, 30_800: 106.0, 31_000: 120.0}
    assert results._wall_at(wall, 30_800) == 106.0
    assert results._wall_at(wall, 30_720) == pytest.approx(101.0)
    assert math.isnan(results._wall_at(wall, 40_000)) and math.isnan(results._wall_at(wall, 100))


def test_an_unfinished_on_policy_seed_continues_bit_for_bit_from_its_committed_checkpoint(tmp_path, monkeypatch,
                                                                                         capsys):
    """Issue 61 item 2: a stopped seed's newest checkpoint (a PPO one holds no replay: small) is copied to
    ``resume/``, which git tracks; on a fresh clone (config.toml, metrics.csv and resume/ only) running the row again
    continues from it to exactly the result of an uninterrupted run. Checkpoints with a replay buffer or over 2 MiB
    are not kept, saying why."""
    import subprocess

    row = Row("ppo-cartpole-committed", "Classic control (test)", "ppo", "CartPole-v1", 2048, (0,), (), 512,
              sets=("run.eval_episodes=2", "run.checkpoint_every=512", "run.checkpoint_keep=10"))
    monkeypatch.setattr(results, "ROWS", {row.name: row})
    out = tmp_path / "uninterrupted"
    results.run_row(row, (0,), out, tmp_path / "runs-a")
    with open(out / f"{row.name}.csv") as f:
        uninterrupted = next(csv.DictReader(f))

    # machine 1: stopped after its checkpoint at 1,024 steps (as StopOnSignal leaves it), its progress recorded
    out, runs = tmp_path / "docs", tmp_path / "runs-in-progress"
    run_dir = results.seed_run_dir(runs, row.name, 0)
    results.run_row(row, (0,), out, runs)
    (out / f"{row.name}.csv").unlink()
    from rapidrl.train.checkpoint import list_checkpoints

    for step, path in list_checkpoints(run_dir / "checkpoints"):
        if step > 1024:
            path.unlink()
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps(summary | {"status": "stopped"}))
    capsys.readouterr()
    results.record_progress(row, 0, run_dir, out, row.timesteps)
    kept = run_dir / "resume" / "step_000000001024.pt"
    assert kept.is_file() and f"{kept.as_posix()} (" in capsys.readouterr().out
    assert kept.stat().st_size < results.MAX_COMMITTED_BYTES
    repo = Path(__file__).resolve().parent.parent  # git tracks it under runs-in-progress/, not the checkpoints/
    inside = f"runs-in-progress/full/{row.name}/seed-0"
    paths = [f"{inside}/resume/{kept.name}", f"{inside}/checkpoints/{kept.name}"]
    ignored = subprocess.run(["git", "check-ignore", *paths], cwd=repo, capture_output=True, text=True).stdout.split()
    assert ignored == [f"{inside}/checkpoints/{kept.name}"]

    # machine 2: a fresh clone has what git holds; the row continues from the committed checkpoint
    for path in run_dir.iterdir():
        if path.name not in ("config.toml", "metrics.csv", "resume"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    assert results.run_state(run_dir, row, row.timesteps, 0) == "resumable"
    assert results.resume_step(row, run_dir) == 1024
    assert results.main([row.name, "--out", str(out), "--runs-root", str(runs)]) == 0
    assert "resuming the interrupted run" in capsys.readouterr().out
    with open(out / f"{row.name}.csv") as f:
        resumed = next(csv.DictReader(f))
    assert (resumed["eval_mean"], resumed["train_return"]) == (uninterrupted["eval_mean"],
                                                               uninterrupted["train_return"])
    assert not (run_dir / "resume").exists()  # recorded: the committed checkpoint is spent

    # what git cannot hold is not kept, and the line says why
    monkeypatch.setattr(results, "MAX_COMMITTED_BYTES", 1000)
    assert "over 0 MiB: not for git" in results.keep_for_git(results.seed_run_dir(tmp_path / "runs-a", row.name, 0))
