"""What every recurrent off-policy algorithm (R2D2, recurrent SAC) shares that is not its update: the sequence replay,
each env's recurrent state while collecting (stored with every step), burn-in, acting with a state (``predict``,
evaluation, videos) and the state in checkpoints.

``RecurrentOffPolicy`` is a mixin placed before ``OffPolicyAlgorithm``. A subclass provides:
- ``_advance(x [N, O], entering [N, S]) -> (output, state after [N, S])``: one step of all its recurrent networks for
  the N envs (R2D2: the Q network, output Q; recurrent SAC: actor and critic, output the actor's features);
- ``_acting_policy()``: the module that acts with a state (``act``, ``initial_state``, ``check_state``,
  ``to_env_action``: the recurrent-policy interface of ``rapidrl.train.recurrent.predict_with_state``);
- ``_explore_from(output, obs, action_masks)``: training actions from ``_advance``'s output.

The state of the N envs while collecting is one tensor [N, S] (``_hidden``); the replay stores the state each step was
entered with (zero where an episode starts), so a sequence can be replayed from the state the policy had.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rapidrl.algos.offpolicy import check_replay_fits
from rapidrl.buffers.sequence import SequenceReplayBuffer
from rapidrl.nn.deploy import RecurrentMode
from rapidrl.nn.recurrent import CELLS
from rapidrl.train.config import ConfigError, check_hidden, check_positive, require
from rapidrl.train.recurrent import RecurrentActor, predict_with_state

__all__ = ["RecurrentActorCritic", "RecurrentActorCriticConfig", "RecurrentOffPolicy", "SequenceConfig", "burn_in"]


@dataclass
class SequenceConfig:
    """The memory's and the sequences' fields of every recurrent off-policy config (a dataclass mixin; each algorithm
    sets its defaults with ``with_defaults``)."""

    cell: str = "lstm"
    """The recurrent layer(s): "lstm" or "gru"."""
    recurrent_size: int = 128
    """Units of each recurrent layer."""
    sequence_length: int = 40
    """Steps of one replayed sequence, burn-in included."""
    burn_in: int = 10
    """First steps of a sequence that only warm the states up from the stored ones, no loss."""

    def validate_sequences(self) -> None:
        require(self.cell in CELLS, f"cell must be one of {CELLS}, got {self.cell!r}")
        check_positive(self, "recurrent_size", "sequence_length")
        check_positive(self, "burn_in", allow_zero=True)
        require(self.burn_in < self.sequence_length,
                f"burn_in={self.burn_in} must be below sequence_length={self.sequence_length} (steps must remain to "
                "train on)")


def burn_in(encoders, obs: torch.Tensor, states, starts: torch.Tensor) -> list[torch.Tensor]:
    """The states after running each of ``encoders`` (``RecurrentEncoder``s) over obs [K, B, *obs] from its state in
    ``states`` ([B, S_i] each) without gradients: R2D2's burn-in. K = 0 returns the states as they are."""
    if obs.shape[0] == 0:
        return list(states)
    with torch.no_grad():
        return [enc.state_after(obs, s, starts) for enc, s in zip(encoders, states)]


@dataclass
class RecurrentActorCriticConfig(SequenceConfig):
    """The fields recurrent SAC and recurrent TD3 add to ``SequenceConfig`` (a dataclass mixin)."""

    head_hidden: tuple[int, ...] = (256, 256)
    """Hidden sizes of each critic's MLP on [h, a]."""

    def validate_recurrent_actor_critic(self, name: str) -> None:
        self.validate_sequences()
        check_hidden(self.head_hidden)
        require(self.n_step == 1, f"{name} trains on one-step targets (n_step=1), got n_step={self.n_step}")


class RecurrentOffPolicy:
    """The mixin of the module docstring."""

    recurrent = True
    """``predict`` takes and returns a state (as a recurrent PPO policy's)."""

    # -- to be supplied ----------------------------------------------------------------------------
    def _advance(self, x: torch.Tensor, entering: torch.Tensor):
        raise NotImplementedError

    def _acting_policy(self) -> torch.nn.Module:
        raise NotImplementedError

    def _explore_from(self, output, obs: np.ndarray, action_masks: np.ndarray | None) -> np.ndarray:
        raise NotImplementedError

    # -- replay and collection state ----------------------------------------------------------------
    def _sequence_buffer(self, state_size: int, *, prioritized: bool = False, alpha: float = 0.9, beta: float = 0.6,
                         eps: float = 1e-6) -> SequenceReplayBuffer:
        """The sequence replay of ``buffer_size`` steps and ``sequence_length``, checked to fit in memory (sets the
        collection state ``_hidden`` [N, state_size] and ``_starts`` [N] too)."""
        c = self.config
        if c.her:
            raise ConfigError(f"{self.name.upper()} replays sequences; her=True relabels transitions")
        if c.replay_storage != "memory":
            raise ConfigError(f"{self.name.upper()}'s sequence replay is kept in memory (replay_storage='memory')")
        shape = self._stored_obs_shape()
        action_shape = () if self.discrete else self.action_space.shape
        frame_stack = self._sequence_frame_stack()
        check_replay_fits(SequenceReplayBuffer.storage_bytes(c.buffer_size, shape, state_size, action_shape,
                                                             obs_dtype=self._obs_dtype, frame_stack=frame_stack,
                                                             num_envs=c.num_envs),
                          c.buffer_size, "memory", None)
        self._hidden = torch.zeros(c.num_envs, state_size, device=self.device)  # entering each env's next step
        self._starts = np.ones(c.num_envs, bool)  # the next step begins an episode
        return SequenceReplayBuffer(c.buffer_size, c.num_envs, shape, state_size, c.sequence_length,
                                    action_shape=action_shape, obs_dtype=self._obs_dtype,
                                    action_dtype=np.int64 if self.discrete else np.float32,
                                    seed=c.seed, prioritized=prioritized, alpha=alpha, beta=beta, eps=eps,
                                    frame_stack=frame_stack, device=c.device)

    def _sequence_frame_stack(self) -> int:
        """The frames per observation the sequence replay stores one by one: the env's ``frame_stack`` for uint8
        stacks with ``frame_replay`` on (R2D2 on Atari), else 1 (whole observations)."""
        stack = int(getattr(self.env, "frame_stack", 1))
        if getattr(self.config, "frame_replay", False) and stack > 1 and self._obs_dtype == np.uint8:
            return stack
        return 1

    def _train(self) -> None:
        """The core's update phase, once a whole sequence is stored."""
        if self.buffer.can_sample():
            super()._train()

    def _rollout(self) -> int:
        if self._needs_reset:  # a (re)started env: every env begins an episode
            self._starts[:] = True
        return super()._rollout()

    def _step_state(self, obs: np.ndarray):
        """Advance each env's state over its observation (reset where an episode starts); keeps the state entering
        the step for the replay (``_entering``); returns ``_advance``'s output."""
        starts = torch.from_numpy(self._starts).to(self.device)
        self._entering = self._hidden * (~starts).unsqueeze(-1).to(self._hidden.dtype)
        x = torch.from_numpy(self._network_input(obs)).to(self.device)
        with torch.no_grad():
            output, self._hidden = self._advance(x, self._entering)
        return output

    def _network_input(self, obs: np.ndarray) -> np.ndarray:
        """Observations [B, *obs_shape] as the acting network takes them: flat float32 rows [B, O], or images as they
        are (uint8 [B, C, H, W]: the CNN scales them) for a network with a CNN."""
        if self._acting_policy().encoder.image_input:
            return np.ascontiguousarray(obs)
        return np.ascontiguousarray(obs.reshape(obs.shape[0], -1), dtype=np.float32)

    def _random_actions(self) -> np.ndarray:
        self._step_state(self._split_rows(self._obs)[0])  # the stored states stay those of the acting networks
        return super()._random_actions()

    def _explore_actions(self, obs: np.ndarray, action_masks: np.ndarray | None = None) -> np.ndarray:
        return self._explore_from(self._step_state(obs), obs, action_masks)

    def _add_to_replay(self, actions, rewards, terminated, truncated) -> None:
        self.buffer.add(self._obs, actions, rewards, self._next_obs, terminated, truncated,
                        self._entering.cpu().numpy(), self._starts.copy())
        self._starts = np.logical_or(terminated, truncated)

    def _update_batch(self) -> int:
        """Trained samples of one update: the sequences' steps after the burn-in."""
        c = self.config
        return c.batch_size * (c.sequence_length - c.burn_in)

    def _sample_batch(self):
        return self.buffer.sample(self.config.batch_size)

    # -- acting with a state ------------------------------------------------------------------------
    def predict(self, obs, state=None, episode_start=None, deterministic: bool = False, action_masks=None):
        """``(actions, state)`` for ``obs`` ([B, *obs_shape] or one observation), as recurrent PPO's ``predict``
        (sb3-contrib's convention): state is the float32 array [B, S] of the previous call (None: fresh episodes),
        episode_start [B] bool marks observations that begin an episode; among the valid actions of
        ``action_masks`` when given."""
        batch, single = self._observation_batch(obs)
        masks = None if action_masks is None else self.check_action_masks(action_masks, batch.shape[0], single)
        x = self._network_input(batch)
        actions, state = predict_with_state(self._acting_policy(), x, state, episode_start, deterministic,
                                            self.device, masks, generator=self.torch_rng)
        actions = self._predicted(actions, deterministic, masks)
        return (actions[0], state) if single else (actions, state)

    def _predicted(self, actions: np.ndarray, deterministic: bool, masks: np.ndarray | None) -> np.ndarray:
        """``predict``'s actions from the acting policy's (R2D2 adds epsilon-greedy exploration when not
        deterministic)."""
        return actions

    def episode_actor(self, n: int, deterministic: bool = True):
        """Acting that carries each evaluation env's state (``RecurrentActor``)."""
        actor = RecurrentActor(self._acting_policy(), n, self.device, deterministic, self.torch_rng)
        policy = self._acting_policy()

        def act(obs: np.ndarray, starts: np.ndarray, action_masks: np.ndarray | None = None) -> np.ndarray:
            x = torch.from_numpy(self._network_input(obs))
            masks = None if action_masks is None else torch.from_numpy(np.ascontiguousarray(action_masks))
            raw = actor(x.to(self.device), torch.from_numpy(np.asarray(starts, bool)).to(self.device),
                        None if masks is None else masks.to(self.device))
            return policy.to_env_action(raw).cpu().numpy()

        return act

    def _policy_actions(self, obs: np.ndarray, deterministic: bool, action_masks: np.ndarray | None = None):
        """One step from fresh states (a recurrent policy's actions depend on its state: ``predict`` with a state,
        or evaluation, which carries it)."""
        return self.predict(obs, None, None, deterministic, action_masks)[0]

    def deterministic_module(self) -> torch.nn.Module:
        """The acting policy's greedy or deterministic step, taking and returning the state (``RecurrentMode``;
        ``predict`` gives it the observations as they are, so no normalisation is folded in)."""
        return RecurrentMode(self._acting_policy())

    # -- persistence ----------------------------------------------------------------------------------
    def _extra_training_state(self) -> dict:
        return {**super()._extra_training_state(), "recurrent_state": self._hidden.detach().cpu().clone(),
                "starts": torch.from_numpy(self._starts.copy())}

    def _load_extra_training_state(self, state: dict) -> None:
        super()._load_extra_training_state(state)
        self._hidden = state["recurrent_state"].to(self.device).clone()
        self._starts = state["starts"].numpy().copy()


class RecurrentActorCritic(RecurrentOffPolicy):
    """Recurrent SAC and TD3: an ``actor`` and a ``critic`` with a ``RecurrentEncoder`` each, whose states the replay
    stores side by side ([actor | critic]); the actor acts with its own state."""

    box_actions_only = True

    def _state_sizes(self) -> tuple[int, int]:
        """(the actor's, the critic's) state widths (one layer of ``cell`` and ``recurrent_size`` each)."""
        c = self.config
        one = (2 if c.cell == "lstm" else 1) * c.recurrent_size
        return one, one

    def _make_buffer(self):
        return self._sequence_buffer(sum(self._state_sizes()))

    def _advance(self, x: torch.Tensor, entering: torch.Tensor):
        """Both encoders one step: (the actor's features [N, size], the state after [N, S_actor + S_critic])."""
        sa = self._state_sizes()[0]
        h, state_a = self.actor.encoder.step(x, entering[:, :sa])
        _, state_c = self.critic.encoder.step(x, entering[:, sa:])
        return h, torch.cat([state_a, state_c], -1)

    def _acting_policy(self) -> torch.nn.Module:
        return self.actor
