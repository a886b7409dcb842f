"""Metric sinks: CSV (growing header, resume truncation), TensorBoard (read back), text, optional W&B, and
the monitor publisher fed by a real training run."""

from __future__ import annotations

import io
import math
import time

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import rapidrl as rr
from rapidrl.monitor.metrics_file import MetricsReader
from rapidrl.monitor.publisher import MonitorPublisher
from rapidrl.runs.config import resolve
from rapidrl.runs.layout import read_csv_metrics
from rapidrl.train.config import ConfigError
from rapidrl.train.loggers import CSVLogger, TensorBoardLogger, TextLogger, wandb_available


def test_csv_header_grows_and_old_rows_keep_their_values(tmp_path):
    log = CSVLogger(tmp_path / "m.csv")
    log.log({"charts/SPS": 10.0}, 100)
    log.log({"charts/SPS": 11.0, "eval/mean_return": 5.0}, 200)
    log.log({"charts/SPS": 12.0}, 300)
    log.close()
    cols = read_csv_metrics(tmp_path / "m.csv")
    assert list(cols) == ["global_step", "charts/SPS", "eval/mean_return"]
    assert cols["global_step"] == [100.0, 200.0, 300.0] and cols["charts/SPS"] == [10.0, 11.0, 12.0]
    assert math.isnan(cols["eval/mean_return"][0]) and cols["eval/mean_return"][1] == 5.0


def test_csv_resume_drops_rows_after_the_checkpoint(tmp_path):
    log = CSVLogger(tmp_path / "m.csv")
    for step in (100, 200, 300):
        log.log({"x": float(step)}, step)
    log.close()
    log = CSVLogger(tmp_path / "m.csv", resume_step=200)
    log.log({"x": 300.5}, 300)
    log.close()
    cols = read_csv_metrics(tmp_path / "m.csv")
    assert cols["global_step"] == [100.0, 200.0, 300.0] and cols["x"] == [100.0, 200.0, 300.5]


def test_tensorboard_scalars_read_back_and_resume_purges(tmp_path):
    tb = TensorBoardLogger(tmp_path)
    for step in (1, 2, 3):
        tb.log({"charts/SPS": float(step), "global_step": step}, step)
    tb.close()
    # The worst case for TensorBoard's name-ordered reading: the first file's second is not yet past (a resume
    # in the same second whose counter sorts first, e.g. .10 before .9). The resumed file must still sort after.
    (first,) = tmp_path.glob("events.out.tfevents.*")
    parts = first.name.split(".")
    parts[3] = f"{int(time.time()) + 1:010d}"
    first.rename(tmp_path / ".".join(parts))
    tb = TensorBoardLogger(tmp_path, resume_step=2)
    tb.log({"charts/SPS": 30.0}, 3)
    tb.close()
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert "global_step" not in acc.Tags()["scalars"]
    assert [(e.step, e.value) for e in acc.Scalars("charts/SPS")] == [(1, 1.0), (2, 2.0), (3, 30.0)]


def test_text_logger_throttles(tmp_path):
    out = io.StringIO()
    log = TextLogger(1000, out, every_s=3600)
    log.log({"charts/SPS": 5000.0, "charts/episodic_return": 21.5}, 10)
    log.log({"charts/SPS": 5000.0}, 20)  # within the interval: skipped
    log.log({"charts/SPS": 4000.0}, 1000)  # the last step always prints
    assert out.getvalue().splitlines() == ["step 10/1,000  SPS 5,000  return 21.5",
                                           "step 1,000/1,000  SPS 4,000  return -"]


def test_wandb_is_optional():
    layer = {"run": {"algo": "ppo", "env": "CartPole-v1", "wandb": True}}
    if wandb_available():
        assert resolve([("test", layer)]).run.wandb
    else:
        with pytest.raises(ConfigError, match=r"needs the wandb package \(pip install wandb\)"):
            resolve([("test", layer)])


def test_monitor_publisher_follows_a_training_run(tmp_path):
    model = rr.PPO("CartPole-v1", num_envs=4, num_steps=64, minibatch_size=128, update_epochs=1, seed=0)
    pub = MonitorPublisher(model, tmp_path / "m.bin", run_name="t", total_steps=1024)
    model.loggers.append(pub)
    model.learn(1024, progress_bar=False)
    snap = MetricsReader(tmp_path / "m.bin").snapshot()
    assert snap.values["global_step"] == 1024 and snap.values["updates"] == 4
    assert snap.values["episodes"] == model.num_episodes > 0
    assert 0 < snap.episodes_pushed <= model.num_episodes  # at most 100 (the algorithm's window) per update
    assert snap.values["losses/value_loss"] == model.metrics["losses/value_loss"]
    assert list(snap.returns[-5:]) == model.recent_returns(5)
    pub.close("finished")
    assert MetricsReader(tmp_path / "m.bin").snapshot().status == "finished"
