"""Checkpoint/resume: a SIGKILLed run resumes and completes; checkpoint files always load; resuming at a
checkpoint boundary reproduces the uninterrupted run exactly; corrupt files and non-finite losses end with
clear messages and keep the last good checkpoint."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from checkpoint_checks import kill_when, python_rapidrl, same

import rapidrl as rr
from rapidrl import cli
from rapidrl.runs.layout import read_csv_metrics, read_summary
from rapidrl.train.algorithm import NonFiniteError
from rapidrl.train.callbacks import Callback
from rapidrl.train.checkpoint import Checkpointer, latest_checkpoint, list_checkpoints, load_checkpoint
from rapidrl.train.loggers import CSVLogger

SMALL = ["--set", "algo.num_envs=4", "--set", "algo.num_steps=64", "--set", "algo.minibatch_size=128",
         "--set", "algo.update_epochs=2"]


def _load_all(directory: Path) -> int:
    """Load every checkpoint file present; a file pruned between listing and loading is fine."""
    loaded = 0
    for _, path in list_checkpoints(directory):
        try:
            load_checkpoint(path)
        except FileNotFoundError:
            continue
        loaded += 1
    return loaded


def test_sigkill_mid_run_then_resume_completes(tmp_path, capsys):
    run = tmp_path / "run"
    total = 256 * 120  # long enough that the run is still going when the third checkpoint appears
    argv = [*python_rapidrl("train", "ppo", "CartPole-v1"), "--timesteps", str(total), "--run-dir",
            str(run), "--headless", "--eval-episodes", "2", *SMALL, "--set", "algo.update_epochs=4",
            "--set", "algo.minibatch_size=64", "--set", "run.checkpoint_every=256", "--set", "run.checkpoint_keep=2"]
    loads = [0]

    def third_checkpoint() -> bool:
        loads[0] += _load_all(run / "checkpoints")  # every file that ever appears loads (atomic writes)
        found = list_checkpoints(run / "checkpoints")
        return bool(found) and found[-1][0] >= 256 * 3

    kill_when(argv, third_checkpoint, poll=0.01)
    loads = loads[0]
    assert loads > 0
    killed_at = list_checkpoints(run / "checkpoints")[-1][0]
    assert _load_all(run / "checkpoints") == len(list_checkpoints(run / "checkpoints")) <= 2  # keep-last-2
    assert killed_at < total and read_summary(run) is None
    assert cli.main(["train", "--resume", str(run), "--headless"]) == 0
    out = capsys.readouterr().out
    assert f"resuming from {run / 'checkpoints'}" in out and "eval return" in out
    # the closing line says which steps this process trained (not all of them in this process's seconds)
    assert f"trained steps {killed_at:,} to {total:,} in " in out and f"all {total:,} steps in " in out, out
    summary = read_summary(run)
    assert summary["status"] == "finished" and summary["timesteps"] == total and summary["resumed"]
    steps = read_csv_metrics(run / "metrics.csv")["global_step"]
    assert steps == [256.0 * i for i in range(1, total // 256 + 1)]  # rows written after the checkpoint were replaced
    # the checkpoint carries the training clock: time/total runs on across the kill instead of starting again at 0,
    # and the summary's training time holds both parts (this process's wall-clock only the second)
    times = read_csv_metrics(run / "metrics.csv")["time/total"]
    assert all(later >= earlier for earlier, later in zip(times, times[1:])), times
    assert summary["train_time_s"] >= times[-1] and summary["train_time_s"] > summary["wall_time_s"]
    again = cli.main(["train", "--resume", str(run)])
    assert again == 0  # nothing left to do


def test_sigterm_stops_after_the_update_and_the_resume_loses_nothing(tmp_path):
    """`kill PID` (as Ctrl-C): the run stops at the end of its update, checkpoints that step although no periodic
    checkpoint is due, exits 130 with status "stopped"; resumed, it ends bitwise where the uninterrupted run ends."""
    import signal

    total = 256 * 200
    common = ["--timesteps", str(total), "--headless", "--eval-episodes", "0", *SMALL,
              "--set", "run.checkpoint_every=1000000"]  # no periodic checkpoint before the end
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    assert cli.main(["train", "ppo", "CartPole-v1", "--run-dir", str(whole), *common]) == 0

    def logged_twice() -> bool:
        metrics = stopped / "metrics.csv"
        return metrics.is_file() and len(metrics.read_text().splitlines()) >= 3

    argv = [*python_rapidrl("train", "ppo", "CartPole-v1"), "--run-dir", str(stopped), *common]
    code, output = kill_when(argv, logged_twice, sig=signal.SIGTERM)
    summary = read_summary(stopped)
    assert code == 130 and summary["status"] == "stopped", output
    assert "SIGTERM: stopping at the end of this update" in output and "continue with: rapidrl train --resume" in output
    assert 0 < summary["timesteps"] < total and summary["timesteps"] % 256 == 0  # a whole update
    assert [step for step, _ in list_checkpoints(stopped / "checkpoints")] == [summary["timesteps"]]
    assert cli.main(["train", "--resume", str(stopped), "--headless"]) == 0
    end_whole, end_stopped = load_checkpoint(whole / "model.pt"), load_checkpoint(stopped / "model.pt")
    assert end_stopped["num_timesteps"] == total
    assert same(end_whole["state"], end_stopped["state"]), "the resumed run differs from the uninterrupted one"


def test_a_second_signal_stops_at_once_and_the_handlers_are_restored():
    import signal
    import threading

    from rapidrl.train.callbacks import StopOnSignal

    before = signal.getsignal(signal.SIGTERM)
    stop = StopOnSignal()
    with stop.installed():
        assert signal.getsignal(signal.SIGTERM) == stop._handle and signal.getsignal(signal.SIGINT) == stop._handle
        assert stop.on_update_end(None)
        stop._handle(signal.SIGINT, None)
        assert stop.requested == "SIGINT" and not stop.on_update_end(None)
        with pytest.raises(KeyboardInterrupt):
            stop._handle(signal.SIGTERM, None)
    assert signal.getsignal(signal.SIGTERM) == before and stop.requested == "SIGINT"
    # outside the main thread Python runs no signal handlers: nothing is installed, training is unaffected
    seen = []

    def in_a_thread():
        with stop.installed() as installed:
            seen.append((installed.requested, signal.getsignal(signal.SIGTERM)))

    worker = threading.Thread(target=in_a_thread)
    worker.start()
    worker.join()
    assert seen == [(None, before)] and signal.getsignal(signal.SIGTERM) == before


def test_a_distributed_rank_stops_at_once_on_sigterm_and_the_handler_is_restored():
    """A distributed rank cannot stop at an update of its own (the others would wait in the all-reduce): there
    SIGTERM is Ctrl-C, and ``run_training`` ends the rank as an interrupted run."""
    import os
    import signal
    import time

    before = signal.getsignal(signal.SIGTERM)
    from rapidrl.training import sigterm_as_ctrl_c

    with pytest.raises(KeyboardInterrupt), sigterm_as_ctrl_c():
        assert signal.getsignal(signal.SIGTERM) != before
        os.kill(os.getpid(), signal.SIGTERM)  # Python runs the handler as os.kill returns
        time.sleep(1)
    assert signal.getsignal(signal.SIGTERM) == before


TINY_DQN = ["--set", "algo.hidden=[32]", "--set", "algo.learning_starts=64", "--set", "algo.batch_size=32",
            "--set", "algo.buffer_size=2000", "--set", "algo.train_freq=4", "--set", "algo.gradient_steps=2",
            "--set", "algo.target_update_interval=50", "--set", "algo.log_every_steps=2"]


@pytest.mark.parametrize("algo, settings", [
    ("ppo", [*SMALL, "--set", "algo.collection=fused"]),
    ("ppo", [*SMALL, "--set", "algo.collection=step"]),
    ("dqn", TINY_DQN),
    ("rainbow", [*TINY_DQN, "--set", "algo.n_atoms=11"]),  # noise, prioritized 3-step replay
    ("iqn", [*TINY_DQN, "--set", "algo.num_tau_samples=8", "--set", "algo.num_tau_prime_samples=8",
             "--set", "algo.train_freq=8"]),  # IQN's fraction draws continue from the checkpoint's torch_rng
    ("ppo", [*SMALL, "--set", "algo.recurrent=lstm", "--set", "algo.recurrent_size=16"]),
    ("ppo", [*SMALL, "--set", "algo.recurrent=lstm", "--set", "algo.recurrent_size=16",
             "--set", "algo.critic_recurrent=true", "--set", "algo.head_hidden=[16]"]),
    # overlapped collection: the checkpoint holds the rollout that was in flight (finished before writing)
    ("impala", ["--set", "algo.num_envs=4", "--set", "algo.num_steps=64"]),
    ("ppo", [*SMALL, "--set", "algo.async_collect=true", "--set", "algo.collection=step",
             "--set", "algo.normalize_obs=true", "--set", "algo.normalize_reward=true"]),
], ids=["ppo-fused", "ppo-per-step", "dqn", "rainbow", "iqn", "ppo-lstm", "ppo-lstm-critic-core", "impala-async",
        "ppo-async-per-step-normalized"])
def test_resume_at_a_checkpoint_boundary_equals_the_uninterrupted_run(tmp_path, algo, settings):
    """Run A trains 2048 steps; run B starts from A's 1024-step checkpoint (as if killed right after it)."""
    a, b = tmp_path / "a", tmp_path / "b"
    assert cli.main(["train", algo, "CartPole-v1", "--timesteps", "2048", "--run-dir", str(a), "--headless",
                     "--eval-episodes", "0", *settings, "--set", "run.checkpoint_every=1024",
                     "--set", "run.checkpoint_keep=5"]) == 0
    (b / "checkpoints").mkdir(parents=True)
    shutil.copy(a / "config.toml", b / "config.toml")
    for item in (a / "checkpoints").glob("step_000000001024.pt*"):  # the model file (+ replay buffer)
        (shutil.copytree if item.is_dir() else shutil.copy)(item, b / "checkpoints" / item.name)
    assert cli.main(["train", "--resume", str(b), "--headless"]) == 0
    sa, sb = load_checkpoint(a / "model.pt"), load_checkpoint(b / "model.pt")
    assert sa["num_timesteps"] == sb["num_timesteps"] == 2048
    assert same(sa["state"], sb["state"]), "parameters or optimizer state differ after resume"
    ca, cb = read_csv_metrics(a / "metrics.csv"), read_csv_metrics(b / "metrics.csv")
    after = [i for i, step in enumerate(ca["global_step"]) if step > 1024]
    assert cb["global_step"] == [ca["global_step"][i] for i in after]
    for key in [k for k in ca if k.startswith("losses/")] + ["charts/episodic_return"]:
        assert cb[key] == [ca[key][i] for i in after], key


def test_corrupt_and_foreign_checkpoints_are_clear_errors(tmp_path, capsys):
    run = tmp_path / "run"
    assert cli.main(["train", "ppo", "CartPole-v1", "--timesteps", "512", "--run-dir", str(run), "--headless",
                     "--eval-episodes", "0", *SMALL, "--set", "run.checkpoint_every=256"]) == 0
    (run / "summary.json").unlink()
    latest = latest_checkpoint(run / "checkpoints")
    # a corrupt newest checkpoint is skipped for an older one that loads (tests/test_nothing_silent.py); when none
    # loads, the resume is refused in one line naming each file and why
    for _, path in list_checkpoints(run / "checkpoints"):
        path.write_bytes(b"\x00garbage" * 100)
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("rapidrl: error: cannot resume") and "none of its 2 checkpoints loads" in err[-1]
    assert f"{latest} is not a readable rapidrl model file" in err[-1]
    assert not any("Traceback" in line for line in err)
    for _, path in list_checkpoints(run / "checkpoints"):
        torch.save({"weights": torch.zeros(2)}, path)
    assert cli.main(["train", "--resume", str(run)]) == 2
    assert f"{latest} is not a rapidrl model file" in capsys.readouterr().err.strip().splitlines()[-1]


def test_a_checkpoint_pruned_while_it_is_read_is_missing_not_corrupt(tmp_path, monkeypatch):
    """keep-last-N may delete a file between the loader's existence check and its read: that is FileNotFoundError
    (what a reader of a live run skips), never ModelFileError (which says the file is damaged)."""
    path = tmp_path / "step_000000000512.pt"
    path.write_bytes(b"placeholder")
    real_load = torch.load

    def pruned_then_load(f, *args, **kwargs):
        Path(f).unlink()  # the run's pruner wins the race
        return real_load(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", pruned_then_load)
    with pytest.raises(FileNotFoundError, match="no model file at"):
        load_checkpoint(path)


def test_non_finite_loss_from_the_cli_names_the_step(tmp_path, capsys):
    run = tmp_path / "run"
    code = cli.main(["train", "ppo", "CartPole-v1", "--timesteps", "1024", "--run-dir", str(run), "--headless",
                     *SMALL, "--set", "algo.learning_rate=1e30", "--set", "algo.max_grad_norm=0"])
    assert code == 1
    err = capsys.readouterr().err
    assert "rapidrl: error: losses/" in err and " at step " in err and "Last good checkpoint" in err
    assert read_summary(run)["status"] == "failed" and not (run / "model.pt").exists()
    for _, path in list_checkpoints(run / "checkpoints"):
        assert _finite(load_checkpoint(path)["state"])


class _Poison(Callback):
    """Makes the update that reaches ``at`` steps report a NaN loss."""

    def __init__(self, at: int):
        self.at = at

    def on_update_end(self, algo) -> bool:
        if algo.num_timesteps == self.at:
            algo.record({"losses/value_loss": float("nan")})
        return True


def test_non_finite_training_keeps_the_last_good_checkpoint(tmp_path):
    model = rr.PPO("CartPole-v1", num_envs=4, num_steps=64, minibatch_size=128, update_epochs=1, seed=0)
    ckpt = Checkpointer(tmp_path, every=256, keep=2)
    with pytest.raises(NonFiniteError, match="losses/value_loss is nan at step 768"):
        model.learn(4096, callback=[_Poison(768), ckpt], progress_bar=False)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [256, 512]  # 768 was poisoned: never written
    assert ckpt.save(model) is None and ckpt.skipped_non_finite == 768  # nor is it when asked directly
    assert [s for s, _ in list_checkpoints(tmp_path)] == [256, 512]
    assert ckpt.last_good == latest_checkpoint(tmp_path)
    resumed = rr.PPO.load(ckpt.last_good)
    assert resumed.num_timesteps == 512 and _finite(load_checkpoint(ckpt.last_good)["state"])


def test_checkpointer_keeps_the_newest_and_always_writes_the_final(tmp_path):
    model = rr.PPO("CartPole-v1", num_envs=4, num_steps=64, minibatch_size=128, update_epochs=1, seed=0)
    ckpt = Checkpointer(tmp_path, every=512, keep=2)
    model.learn(256 * 7, callback=ckpt, progress_bar=False)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [1536, 1792]  # 512, 1024 pruned; 1792 is the final
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def _finite(obj) -> bool:
    if isinstance(obj, torch.Tensor):
        return not obj.is_floating_point() or bool(torch.isfinite(obj).all())
    if isinstance(obj, dict):
        return all(_finite(v) for v in obj.values())
    return all(_finite(v) for v in obj) if isinstance(obj, (list, tuple)) else True


class _RowsAtSave(Checkpointer):
    """Records, at every save, the last global_step the CSV logger had written to disk."""

    def __init__(self, directory, csv_path, **kw):
        super().__init__(directory, **kw)
        self.csv_path, self.seen = csv_path, []

    def save(self, algo):
        self.seen.append((algo.num_timesteps, read_csv_metrics(self.csv_path)["global_step"][-1]))
        return super().save(algo)


def test_checkpoints_are_written_after_the_metrics_row_of_their_step(tmp_path):
    """A run killed right after a checkpoint must find that step's metrics row on disk (CI caught the old
    order: checkpoint first, row second, so a resume skipped one row)."""
    model = rr.PPO("CartPole-v1", num_envs=4, num_steps=64, minibatch_size=128, update_epochs=1, seed=0)
    model.config.log_every_steps = 256
    model.loggers.append(CSVLogger(tmp_path / "metrics.csv"))
    ckpt = _RowsAtSave(tmp_path / "ckpt", tmp_path / "metrics.csv", every=512, keep=2)
    model.learn(256 * 6, callback=ckpt, progress_bar=False)
    assert ckpt.seen == [(512, 512.0), (1024, 1024.0), (1536, 1536.0)]


def test_the_training_clock_carries_over_a_checkpoint():
    """``PhaseTimer.state`` / ``restore``: a resumed run's clock starts where the saved one stood, phases included."""
    from rapidrl.train.timing import PhaseTimer

    saved = PhaseTimer()
    saved.start_ns -= 5_000_000_000  # 5 s into training, 2 of them stepping envs
    saved.add("env", 2_000_000_000)
    resumed = PhaseTimer()
    resumed.restore(saved.state())
    report = resumed.report(100)
    assert 5.0 <= report["time/total"] < 6.0 and report["time/phase_env"] == 2.0
    assert 0.33 < report["time/frac_env"] <= 0.4 and 100 / 6.0 < report["sps"] <= 20.0
