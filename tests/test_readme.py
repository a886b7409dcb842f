"""README.md's Python blocks run, in order, as one program (as the docs pages' examples do): the quickstart trains,
evaluates, saves, reloads and predicts; the second block steps a batched env and computes GAE."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_blocks_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the quickstart saves ppo_cartpole.pt in the working directory
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) == 2
    ns: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), ns)
    assert (tmp_path / "ppo_cartpole.pt").is_file()
    assert ns["actions"].shape == (4,) and 0 <= ns["mean"] <= 500
    assert ns["adv"].shape == ns["ret"].shape == (64, 512) and np.isfinite(ns["adv"]).all()
