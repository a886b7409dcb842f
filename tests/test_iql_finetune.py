"""IQL offline-to-online: the switch's minibatches (issue 57, item 6).

With ``dataset_fraction="proportional"`` the dataset's share k of each online minibatch shrinks as the online
buffer grows, and a new dataset sampler of batch k is made whenever k changes. That sampler must go on with the
dataset's random stream where the last one stopped: each one used to restart it at draw 0, so the dataset rows of
the online phase were the first few minibatches of the stream over and over (every ~40 env steps on the
``iql_pendulum`` preset's 5,000-row dataset, ~128 times in its online phase; 4,328 distinct rows of 5,000).
"""

from __future__ import annotations

import numpy as np
import pytest

import rapidrl as rr
from rapidrl.algos.iql import IQL
from rapidrl.buffers.dataset import collect_episodes, write_dataset


def controller(obs: np.ndarray) -> np.ndarray:
    return np.clip(-2.0 * obs[:, 2:3], -2.0, 2.0).astype(np.float32)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("MINARI_DATASETS_PATH", str(tmp_path_factory.mktemp("datasets")))
    env = rr.make_vec("Pendulum-v1", 2, seed=0)
    write_dataset("test/pendulum/finetune-v0", collect_episodes(env, controller, 1000, seed=0),
                  env.single_observation_space, env.single_action_space, env_id="Pendulum-v1")
    yield "test/pendulum/finetune-v0"
    mp.undo()


def test_the_dataset_share_of_online_minibatches_is_one_stream(dataset):
    model = IQL(dataset=dataset, offline_steps=0, buffer_size=2000, batch_size=64, hidden=(16, 16), seed=0)
    model._online_now = True
    rng = np.random.default_rng(0)
    drawn, firsts, last_k = 0, [], None
    for _ in range(600):  # the online buffer grows a row per env step; k = round(64 * 1000 / (1000 + online))
        o = rng.normal(size=(1, 3)).astype(np.float32)
        model.buffer.add(o, rng.uniform(-2, 2, (1, 1)).astype(np.float32), np.zeros(1, np.float32), o,
                         np.zeros(1, bool), np.zeros(1, bool))
        batch = model._mixed_batch()
        k = model._mix_sampler.batch_size if model._mix_sampler is not None else 0
        if k:
            drawn += k
            if k != last_k:
                firsts.append(batch.obs[0].numpy().copy())
        last_k = k
    assert len(firsts) > 5  # k changed several times (64 -> 40)
    # one stream: every dataset row drawn online is a fresh draw of it, none a replay of earlier draws
    assert model._mix_sampler.draws == drawn
    assert len({f.tobytes() for f in firsts}) > len(firsts) // 2  # restarts would draw the same first row each time
