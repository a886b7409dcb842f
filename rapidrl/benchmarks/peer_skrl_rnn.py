"""skrl's recurrent SAC (``SAC_RNN``) or TD3 (``TD3_RNN``) on PendulumNoVel at the settings of skrl's own examples
(``torch_gymnasium_pendulumnovel_{sac,td3}_lstm.py``): an LSTM of 400 units on the observation for the policy and
for each critic and target (skrl's TD3 also has a target policy), MLP heads of 400 and 300, sequences of 20 steps,
batch 100 sequences, gamma 0.98, learning from step 100 (TD3's example: 1,000; the timed window needs learning),
replay of 15,000 (TD3's example: 20,000). SAC: a tanh mean scaled to the bounds with a state-independent log std,
automatic entropy. TD3: a deterministic 2 tanh(.) policy, exploration noise N(0, 0.1), target smoothing N(0, 0.2)
clipped at 0.5, the policy every 2nd update, weights initialised N(0, 0.1) as the example does. Written here against
skrl's public API for ``rapidrl.benchmarks.bench_memory``; run in skrl's own interpreter:

    python -m rapidrl.benchmarks.peer_skrl_rnn --algo td3 --steps 2000 --seed 0 --threads 1

Prints one JSON line: {"lib": "skrl", "warmup_s", "timed_steps", "timed_s", "sps"} (the timed window: the steps from
step 200 on, each with one update; learning starts at 100).
"""

from __future__ import annotations

import argparse
import json
import time

HIDDEN, SEQUENCE = 400, 20
REPLAY = {"sac": 15_000, "td3": 20_000}
"""The replay sizes of skrl's two examples (the algorithms this module runs)."""


def build(seed: int, algo: str = "sac"):
    import gymnasium as gym
    import numpy as np
    import torch
    from skrl.agents.torch.sac import SAC_CFG, SAC_RNN
    from skrl.agents.torch.td3 import TD3_CFG, TD3_RNN
    from skrl.envs.wrappers.torch import wrap_env
    from skrl.memories.torch import RandomMemory
    from skrl.models.torch import DeterministicMixin, GaussianMixin, Model
    from skrl.resources.noises.torch import GaussianNoise
    from skrl.utils import set_seed
    from torch import nn

    set_seed(seed)

    def lstm_over(model, observations, states, terminated, start_index=0):
        """skrl's training-time LSTM pass over [N * L] rows: the sequence's first stored state, reset after ends."""
        h, c = states
        if not model.training and start_index == 0 and observations.shape[0] == model.num_envs:
            out, (h, c) = model.lstm(observations.view(-1, 1, observations.shape[-1]), (h, c))
            return out.flatten(0, 1), (h, c)
        x = observations.view(-1, SEQUENCE, observations.shape[-1])
        h = h.view(1, -1, SEQUENCE, h.shape[-1])[:, :, start_index, :].contiguous()
        c = c.view(1, -1, SEQUENCE, c.shape[-1])[:, :, start_index, :].contiguous()
        if terminated is not None and torch.any(terminated):
            terminated = terminated.view(-1, SEQUENCE)
            cuts = [0, *(terminated[:, :-1].any(0).nonzero(as_tuple=True)[0] + 1).tolist(), SEQUENCE]
            outs = []
            for i0, i1 in zip(cuts[:-1], cuts[1:]):
                out, (h, c) = model.lstm(x[:, i0:i1], (h, c))
                h[:, terminated[:, i1 - 1], :] = 0
                c[:, terminated[:, i1 - 1], :] = 0
                outs.append(out)
            out = torch.cat(outs, 1)
        else:
            out, (h, c) = model.lstm(x, (h, c))
        return out.flatten(0, 1), (h, c)

    def spec(model):
        size = (1, model.num_envs, HIDDEN)
        return {"rnn": {"sequence_length": SEQUENCE, "sizes": [size, size]}}

    def lstm_model(model, observation_space, state_space, action_space, device, num_envs, critic: bool):
        """skrl's example networks: an LSTM on the observation, then 400-300 ReLU layers to the actions (through a
        tanh) or, for a critic, from [h, a] to one value."""
        Model.__init__(model, observation_space=observation_space, state_space=state_space,
                       action_space=action_space, device=device)
        model.num_envs = num_envs
        model.lstm = nn.LSTM(model.num_observations, HIDDEN, batch_first=True)
        n_in, n_out = (HIDDEN + model.num_actions, 1) if critic else (HIDDEN, model.num_actions)
        layers = [nn.Linear(n_in, 400), nn.ReLU(), nn.Linear(400, 300), nn.ReLU(), nn.Linear(300, n_out)]
        model.net = nn.Sequential(*layers) if critic else nn.Sequential(*layers, nn.Tanh())

    class Actor(GaussianMixin, Model):
        def __init__(self, *spaces_device_envs):
            lstm_model(self, *spaces_device_envs, critic=False)
            GaussianMixin.__init__(self, clip_actions=False, clip_log_std=True, min_log_std=-20, max_log_std=2,
                                   reduction="sum")
            self.log_std_parameter = nn.Parameter(torch.zeros(self.num_actions))

        get_specification = spec

        def compute(self, inputs, role):
            out, (h, c) = lstm_over(self, inputs["observations"], inputs["rnn"], inputs.get("terminated"))
            return 2.0 * self.net(out), {"log_std": self.log_std_parameter, "rnn": [h, c]}

    class DeterministicActor(DeterministicMixin, Model):
        def __init__(self, *spaces_device_envs):
            lstm_model(self, *spaces_device_envs, critic=False)
            DeterministicMixin.__init__(self)

        get_specification = spec

        def compute(self, inputs, role):
            start = 1 if role == "target_policy" else 0  # the target acts on the next state
            out, (h, c) = lstm_over(self, inputs["observations"], inputs["rnn"], inputs.get("terminated"), start)
            return 2.0 * self.net(out), {"rnn": [h, c]}

    class Critic(DeterministicMixin, Model):
        def __init__(self, *spaces_device_envs):
            lstm_model(self, *spaces_device_envs, critic=True)
            DeterministicMixin.__init__(self)

        get_specification = spec

        def compute(self, inputs, role):
            start = 1 if role in ("target_critic_1", "target_critic_2") else 0  # targets act on the next state
            out, (h, c) = lstm_over(self, inputs["observations"], inputs["rnn"], inputs.get("terminated"), start)
            return self.net(torch.cat([out, inputs["taken_actions"]], 1)), {"rnn": [h, c]}

    class NoVelocity(gym.ObservationWrapper):
        """skrl's example masks the velocity by zeroing it (three observations, the last always 0)."""

        def observation(self, observation):
            return observation * np.array([1, 1, 0], dtype=observation.dtype)

    env = wrap_env(NoVelocity(gym.make("Pendulum-v1")))
    device = env.device
    memory = RandomMemory(memory_size=REPLAY[algo], num_envs=env.num_envs, device=device, replacement=False)
    args = (env.observation_space, env.state_space, env.action_space, device, env.num_envs)
    critics = {k: Critic(*args) for k in ("critic_1", "critic_2", "target_critic_1", "target_critic_2")}
    spaces = dict(observation_space=env.observation_space, state_space=env.state_space,
                  action_space=env.action_space, device=device)
    if algo == "sac":
        cfg = SAC_CFG()
        cfg.learn_entropy = True
        models = {"policy": Actor(*args), **critics}
        agent_class = SAC_RNN
    else:
        cfg = TD3_CFG()
        cfg.exploration_noise, cfg.exploration_noise_kwargs = GaussianNoise, {"mean": 0.0, "std": 0.1, "device": device}
        cfg.smooth_regularization_noise = GaussianNoise
        cfg.smooth_regularization_noise_kwargs = {"mean": 0.0, "std": 0.2, "device": device}
        cfg.smooth_regularization_clip = 0.5
        models = {"policy": DeterministicActor(*args), "target_policy": DeterministicActor(*args), **critics}
        for model in models.values():
            model.init_parameters(method_name="normal_", mean=0.0, std=0.1)
        agent_class = TD3_RNN
    cfg.discount_factor, cfg.batch_size, cfg.random_timesteps, cfg.learning_starts = 0.98, 100, 0, 100
    cfg.experiment.write_interval = 0
    cfg.experiment.checkpoint_interval = 0
    agent = agent_class(models=models, memory=memory, cfg=cfg, **spaces)
    return env, agent


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--algo", choices=sorted(REPLAY), default="sac")
    p.add_argument("--steps", type=int, default=2_000, help="total env steps (the first 200 are the warm-up)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    import torch
    from skrl.trainers.torch import SequentialTrainer

    torch.set_num_threads(a.threads)
    env, agent = build(a.seed, a.algo)
    warmup, marks = 200, {}
    post_interaction = agent.post_interaction

    def timed(*, timestep: int, timesteps: int) -> None:  # the trainer calls it after every step
        if timestep == warmup:
            marks["timed_from"] = time.perf_counter()
        post_interaction(timestep=timestep, timesteps=timesteps)

    agent.post_interaction = timed
    t0 = time.perf_counter()
    SequentialTrainer(cfg={"timesteps": a.steps, "headless": True, "disable_progressbar": True}, env=env,
                      agents=agent).train()
    t2 = time.perf_counter()
    t1 = marks["timed_from"]
    print(json.dumps({"lib": "skrl", "warmup_s": round(t1 - t0, 2), "timed_steps": a.steps - warmup,
                      "timed_s": round(t2 - t1, 2), "sps": round((a.steps - warmup) / (t2 - t1), 2)}), flush=True)

if __name__ == "__main__":
    main()
