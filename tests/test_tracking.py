"""Experiment tracking: a run logs to Weights & Biases (offline) and MLflow (sqlite store), and the test reads
back what was logged from what each tool wrote."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from rapidrl import cli
from rapidrl.runs.layout import read_csv_metrics

TRAIN = ["train", "ppo", "CartPole-v1", "--timesteps", "2048", "--eval-episodes", "0", "--headless",
         "--set", "algo.num_steps=64"]


def read_wandb_history(path: Path) -> list[dict]:
    """The history records of an offline W&B run file (LevelDB-style log of protobuf ``Record``s: a 7-byte
    header, then 32 KiB blocks of chunks [crc32 u32, length u16, type u8, data])."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, out, pending = 7, 32768, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # block trailer
            pos += left
            continue
        _crc, length, kind = struct.unpack_from("<IHB", data, pos)
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST chunk: a whole record
            record = pb.Record()
            record.ParseFromString(pending)
            pending = b""
            if record.WhichOneof("record_type") == "history":
                out.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
    return out


def test_wandb_offline_run_holds_the_logged_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = tmp_path / "run"
    assert cli.main([*TRAIN, "--run-dir", str(run), "--set", "run.wandb=true"]) == 0
    (wandb_file,) = run.glob("wandb/offline-run-*/run-*.wandb")
    history = read_wandb_history(wandb_file)
    csv = read_csv_metrics(run / "metrics.csv")
    logged = [h for h in history if "charts/SPS" in h]
    assert len(logged) == len(csv["global_step"]) > 0
    assert [h["_step"] for h in logged] == [int(s) for s in csv["global_step"]]
    assert [h["losses/value_loss"] for h in logged] == pytest.approx(csv["losses/value_loss"], rel=1e-6)


def test_mlflow_store_holds_params_and_metrics(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    from mlflow.tracking import MlflowClient

    run = tmp_path / "run"
    assert cli.main([*TRAIN, "--run-dir", str(run), "--set", "run.mlflow=true"]) == 0
    client = MlflowClient(tracking_uri=f"sqlite:///{run / 'mlflow.db'}")
    (found,) = client.search_runs([client.get_experiment_by_name("rapidrl").experiment_id])
    assert found.info.run_name == "run" and found.info.status == "FINISHED"
    assert found.data.params["algo.num_steps"] == "64" and found.data.params["run.env"] == "CartPole-v1"
    csv = read_csv_metrics(run / "metrics.csv")
    history = client.get_metric_history(found.info.run_id, "losses/value_loss")
    assert [m.step for m in history] == [int(s) for s in csv["global_step"]]
    assert [m.value for m in history] == pytest.approx(csv["losses/value_loss"], rel=1e-6)
