"""The updates of DDPG, TD3 and TD3+BC as written out (``rapidrl.algos.td3``, ``ddpg``, ``td3_bc``): the critics step
every gradient step, the actor and every target only every ``policy_delay``-th, on both gradient backends; TD3+BC's
Q weight under its own name (issue 56: not SAC's temperature alpha), the old name upgraded with a warning."""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch

from rapidrl.algos.ddpg import DDPG
from rapidrl.algos.registry import get_algorithm
from rapidrl.algos.td3 import TD3, critic_step
from rapidrl.algos.td3_bc import TD3BC, TD3BCConfig
from rapidrl.buffers.dataset import collect_episodes, load_dataset, write_dataset
from rapidrl.envs import make_vec
from rapidrl.nn.optim import adam
from rapidrl.nn.qnets import CriticEnsemble
from rapidrl.train.config import ConfigError, config_from_dict

SMALL = dict(hidden=(8, 8), batch_size=16, learning_starts=10_000, buffer_size=500, seed=1)


@pytest.fixture(scope="module")
def pendulum_data(tmp_path_factory):
    """400 uniform-random Pendulum steps (an ``OfflineDataset``)."""
    env = make_vec("Pendulum-v1", 2, seed=0)
    space = env.single_action_space
    space.seed(0)
    path = write_dataset("det/pendulum/random-v0", collect_episodes(env, lambda o: [space.sample() for _ in o], 400),
                         env.single_observation_space, space, env_id="Pendulum-v1",
                         root=tmp_path_factory.mktemp("datasets"))
    return load_dataset(path)


def _snapshot(model):
    return {name: [p.detach().clone() for p in getattr(model, name).parameters()]
            for name in ("actor", "critic", "actor_target", "critic_target")}


def _moved(before, after):
    return {name: any(not torch.equal(a, b) for a, b in zip(before[name], after[name])) for name in before}


@pytest.mark.filterwarnings("ignore:.*warm-up")  # the buffer is filled with random actions, no update
@pytest.mark.parametrize("make", [
    lambda data: TD3("Pendulum-v1", policy_delay=3, **SMALL),
    lambda data: TD3("Pendulum-v1", policy_delay=3, gradient_backend="torch", **SMALL),
    lambda data: DDPG("Pendulum-v1", policy_delay=3, **SMALL),
    lambda data: DDPG("Pendulum-v1", policy_delay=3, gradient_backend="torch", **SMALL),
    lambda data: TD3BC(dataset=data, policy_delay=3, hidden=(8, 8), batch_size=16, seed=1),
], ids=["td3", "td3_torch", "ddpg", "ddpg_torch", "td3_bc"])
def test_critics_step_every_step_actor_and_targets_every_policy_delay_th(make, pendulum_data):
    model = make(pendulum_data)
    if isinstance(model, TD3BC):
        sample = model._sample_batch
    else:
        model.learn(100, progress_bar=False)  # random actions only: fills the buffer, no update
        sample = lambda: model.buffer.sample(16, as_torch=True)  # noqa: E731
    last_actor_loss = model._last_actor_loss.clone()
    for step in range(6):  # num_gradient_steps counts the steps before this one: steps 2 and 5 move the actor
        before = _snapshot(model)
        stats = model._update_step(sample()).clone()
        model.num_gradient_steps += 1
        actor_step = (step + 1) % 3 == 0
        assert _moved(before, _snapshot(model)) == dict(critic=True, actor=actor_step, actor_target=actor_step,
                                                        critic_target=actor_step)
        assert stats.shape == (3,) and torch.isfinite(stats).all()
        assert torch.equal(stats[2], last_actor_loss) != actor_step  # actor_loss: the latest actor step's
        last_actor_loss = stats[2].clone()


def test_critic_step_hand_computed():
    """Critics whose output bias alone is non-zero: Q(s, a) = b = 1, Q'(s', a') = b' = 2. Targets r + discount * b' =
    (2 + 0.5 * 2, 3 + 0) = (3, 3); critic_loss 0.5 * mean (1 - 3)^2 = 2; d loss / d b = mean (b - target) = -2;
    Adam's first step moves b by lr against the gradient's sign."""
    critic, critic_target = CriticEnsemble(1, 1, 1, (2,)), CriticEnsemble(1, 1, 1, (2,))
    with torch.no_grad():
        for net, bias in ((critic, 1.0), (critic_target, 2.0)):
            for p in net.parameters():
                p.zero_()
            net.biases[-1].fill_(bias)
    batch = SimpleNamespace(obs=torch.zeros(2, 1), actions=torch.zeros(2, 1), next_obs=torch.zeros(2, 1),
                            rewards=torch.tensor([2.0, 3.0]), discounts=torch.tensor([0.5, 0.0]))
    loss, q = critic_step(critic, critic_target, adam(critic.parameters(), lr=0.1), batch, torch.zeros(2, 1),
                          nullcontext)
    torch.testing.assert_close(q, torch.ones(1, 2))  # the values before the step, detached
    assert loss.item() == pytest.approx(2.0) and not loss.requires_grad
    assert critic.biases[-1].grad.item() == pytest.approx(-2.0)
    assert critic.biases[-1].item() == pytest.approx(1.1)
    assert critic_target.biases[-1].item() == 2.0  # targets move only in the actor step (Polyak)


def test_td3_bc_has_the_torch_backend_only(pendulum_data):
    with pytest.raises(ConfigError, match="no handwritten backend"):
        TD3BC(dataset=pendulum_data, gradient_backend="handwritten", hidden=(8,))


def test_td3_bc_alpha_is_upgraded_to_q_weight(pendulum_data, tmp_path):
    """Issue 56's one meaning per name: TD3+BC's Q weight (the paper's and CORL's alpha) is not SAC's temperature.
    The old name still works, with a DeprecationWarning: as a keyword, from a dict (a checkpoint) and in a config
    file."""
    from rapidrl.runs.config import resolve

    assert TD3BCConfig().q_weight == 2.5 and not hasattr(TD3BCConfig(), "alpha")
    with pytest.warns(DeprecationWarning, match="alpha replaced by q_weight=2.0"):
        model = TD3BC(dataset=pendulum_data, hidden=(8,), alpha=2.0)
    assert model.config.q_weight == 2.0
    with pytest.warns(DeprecationWarning, match="alpha replaced by q_weight=3.0"):
        assert config_from_dict(get_algorithm("td3_bc").config_class, {"alpha": 3.0}).q_weight == 3.0
    with pytest.warns(DeprecationWarning, match="alpha replaced by q_weight=1.5"):
        run = resolve([("test.toml", {"run": {"algo": "td3_bc", "env": "Pendulum-v1"}, "algo": {"alpha": 1.5}})])
    assert run.algo_config.q_weight == 1.5
