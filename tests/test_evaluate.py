"""Sampled evaluation (``evaluate(deterministic=False)``, ``rapidrl eval --stochastic``): repeatable, different from
the greedy one, and invisible to training (its random streams are restored)."""
import pytest
import torch

import rapidrl as rr
from rapidrl import cli

PPO_SMALL = dict(num_envs=4, num_steps=32, minibatch_size=64, update_epochs=2, hidden=(16, 16), seed=3)
DQN_SMALL = dict(num_envs=2, learning_starts=32, batch_size=16, buffer_size=1_000, train_freq=4, gradient_steps=1,
                 exploration_final_eps=0.5,
                 hidden=(16, 16), seed=3)
SAC_SMALL = dict(num_envs=2, learning_starts=32, batch_size=16, buffer_size=1_000, hidden=(16, 16), seed=3)

MODELS = {
    "ppo": lambda: rr.PPO("CartPole-v1", **PPO_SMALL),
    "dqn": lambda: rr.DQN("CartPole-v1", **DQN_SMALL),
    "sac": lambda: rr.SAC("Pendulum-v1", **SAC_SMALL),
    # its own evaluate (team returns of a multi-agent env) on the same seeded generators
    "mappo": lambda: rr.MAPPO("MPE/simple_spread-v3", num_envs=6, num_steps=16, minibatch_size=48, update_epochs=2,
                              hidden=(16, 16), seed=3),
}


def _state_tensors(state) -> list[torch.Tensor]:
    """Every tensor of ``Algorithm._state()`` (networks' state dicts; optimizer states skipped)."""
    out = []
    for name, value in state.items():
        if name == "optimizer":
            continue
        if isinstance(value, torch.Tensor):
            out.append(value)
        elif isinstance(value, dict):
            out += [v for v in value.values() if isinstance(v, torch.Tensor)]
    return out


@pytest.mark.parametrize("algo", sorted(MODELS))
def test_sampled_evaluation_is_repeatable_and_differs_from_greedy(algo):
    model = MODELS[algo]()
    model.learn(128, progress_bar=False)
    sampled = model.evaluate(6, deterministic=False)
    assert model.evaluate(6, deterministic=False) == sampled  # seeded by the eval seed: the same score again
    greedy = model.evaluate(6, deterministic=True)
    assert greedy != sampled  # an untrained policy is far from its mode (DQN: epsilon 0.5)


@pytest.mark.parametrize("algo", sorted(MODELS))
def test_sampled_evaluation_leaves_training_unchanged(algo):
    """Training, a sampled evaluation, more training == the same training without the evaluation, bit for bit
    (an evaluation drawing from training's generators would change every later sampled action)."""
    def train(evaluate: bool) -> list[torch.Tensor]:  # one model at a time: models share torch's global generator
        model = MODELS[algo]()
        model.learn(128, progress_bar=False)
        if evaluate:
            model.evaluate(4, deterministic=False)
        model.learn(128, progress_bar=False)
        return _state_tensors(model._state())

    for a, b in zip(train(evaluate=True), train(evaluate=False), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_cli_eval_stochastic(tmp_path, capsys):
    path = MODELS["ppo"]().learn(128, progress_bar=False).save(tmp_path / "model.pt")
    assert cli.main(["eval", str(path), "--episodes", "5", "--stochastic"]) == 0
    out = capsys.readouterr().out
    mean, std = rr.PPO.load(path).evaluate(5, deterministic=False)
    assert f"eval return {mean:.2f} ± {std:.2f} over 5 episodes (sampled actions)" in out, out
    assert cli.main(["eval", str(path), "--episodes", "5"]) == 0
    assert "(deterministic)" in capsys.readouterr().out


def test_cli_eval_of_a_model_file_keeps_its_env_settings(tmp_path, capsys):
    """A model file is evaluated on the env it was trained on (its saved env_kwargs: here 7-step episodes, so every
    return is 7), not on the env id's defaults (500-step CartPole)."""
    model = rr.PPO("CartPole-v1", env_kwargs={"max_episode_steps": 7}, **PPO_SMALL)
    path = model.learn(128, progress_bar=False).save(tmp_path / "model.pt")
    assert cli.main(["eval", str(path), "--episodes", "4"]) == 0
    assert "eval return 7.00 ± 0.00 over 4 episodes" in capsys.readouterr().out
