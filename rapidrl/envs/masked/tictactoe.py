"""TicTacToe-v3: PettingZoo classic's ``tictactoe_v3`` against a fixed opponent, as an env written as Numba functions.

The agent plays one side of PettingZoo's Tic-Tac-Toe (``pettingzoo/classic/tictactoe``: the board, the observation,
the action mask and the rewards are PettingZoo's, tested move by move against it in ``tests/test_masks.py``); the
opponent's move follows the agent's within the same step. Per episode the agent plays first (``player_1``, X) with
probability ``agent_first`` and meets the one-step-lookahead player with probability ``lookahead``, else the random
player:

- random: a uniform legal move;
- one-step lookahead: a move that wins at once if there is one, else one that blocks the agent's immediate win, else
  a uniform legal move (the lowest square first when several win or block).

Observation float32 [18]: PettingZoo's ``observation`` [3, 3, 2] flattened (plane 0: the agent's marks, plane 1: the
opponent's; square k of the board at row k // 3, column k % 3). Actions Discrete(9): the square to mark; the mask is
PettingZoo's ``action_mask`` (the empty squares while it is the agent's turn; none at the end of a game the agent's
move ended). Rewards +1 win, -1 loss, 0 draw, at the game's end; an illegal move (an occupied square) loses: -1 and
the game ends (PettingZoo's ``TerminateIllegalWrapper``, which ``tictactoe_v3.env()`` applies).

State int64 [N, 12]: squares 0-8 (0 empty, 1 player_1's mark, 2 player_2's), the agent's player index (0 or 1), the
player to move (PettingZoo's ``agent_selection``), the opponent (0 random, 1 lookahead).
"""

from __future__ import annotations

import gymnasium as gym
import numba
import numpy as np

from rapidrl.envs.core.numba_env import NumbaEnv
from rapidrl.kernels.rng import next_uniform

__all__ = ["LINES", "TICTACTOE"]

LINES = np.array([[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 3, 6], [1, 4, 7], [2, 5, 8], [0, 4, 8], [2, 4, 6]])
"""The winning lines (PettingZoo's ``Board.winning_combinations``)."""
ME, TURN, OPPONENT = 9, 10, 11  # state columns after the squares
NOT_OVER, TIE = -2, -1  # game status, else the winner's player index


@numba.njit(cache=True)
def status(state, i):
    """The winner's player index, TIE or NOT_OVER (PettingZoo's ``Board.game_status``)."""
    for line in range(LINES.shape[0]):
        a, b, c = state[i, LINES[line, 0]], state[i, LINES[line, 1]], state[i, LINES[line, 2]]
        if a != 0 and a == b and b == c:
            return a - 1
    for k in range(9):
        if state[i, k] == 0:
            return NOT_OVER
    return TIE


@numba.njit(cache=True)
def _wins_with(state, i, k, mark):
    """Whether putting ``mark`` on empty square k completes a line."""
    for line in range(LINES.shape[0]):
        hit, count = False, 0
        for j in range(3):
            s = LINES[line, j]
            if s == k:
                hit = True
                count += 1
            elif state[i, s] == mark:
                count += 1
        if hit and count == 3:
            return True
    return False


@numba.njit(cache=True)
def opponent_move(state, i, lookahead, u):
    """The opponent's square: the lookahead player's win or block if any, else the empty square a uniform draw u
    picks."""
    me = state[i, ME]
    if lookahead:
        for mark in (2 - me, 1 + me):  # the opponent's own win first, then the agent's to block
            for k in range(9):
                if state[i, k] == 0 and _wins_with(state, i, k, mark):
                    return k
    empty = 0
    for k in range(9):
        empty += state[i, k] == 0
    pick = min(int(u * empty), empty - 1)
    for k in range(9):
        if state[i, k] == 0:
            if pick == 0:
                return k
            pick -= 1
    return -1


@numba.njit(cache=True)
def _opponent_plays(state, i, rng_key, rng_counter):
    u = next_uniform(rng_key, rng_counter, i)
    state[i, opponent_move(state, i, state[i, OPPONENT] == 1, u)] = 2 - state[i, ME]
    state[i, TURN] = state[i, ME]


@numba.njit(cache=True)
def reset(state, i, params, rng_key, rng_counter):
    for k in range(9):
        state[i, k] = 0
    state[i, ME] = 0 if next_uniform(rng_key, rng_counter, i) < params[2] else 1
    state[i, OPPONENT] = 1 if next_uniform(rng_key, rng_counter, i) < params[1] else 0
    state[i, TURN] = 0
    if state[i, ME] == 1:
        _opponent_plays(state, i, rng_key, rng_counter)


@numba.njit(cache=True)
def step(state, i, actions, params, elapsed, rng_key, rng_counter):
    a, me = actions[i], state[i, ME]
    if state[i, a] != 0:  # illegal: the game ends, lost
        return -1.0, True
    state[i, a] = me + 1
    state[i, TURN] = 1 - me
    s = status(state, i)
    if s != NOT_OVER:
        return (1.0 if s == me else 0.0), True
    _opponent_plays(state, i, rng_key, rng_counter)
    s = status(state, i)
    if s != NOT_OVER:
        return (-1.0 if s != TIE else 0.0), True
    return 0.0, False


@numba.njit(cache=True)
def observe(state, i, obs):
    me = state[i, ME]
    for k in range(9):
        obs[i, 2 * k] = state[i, k] == me + 1
        obs[i, 2 * k + 1] = state[i, k] == 2 - me


@numba.njit(cache=True)
def mask(state, i, mask_out):
    turn = state[i, TURN] == state[i, ME]
    for k in range(9):
        mask_out[i, k] = turn and state[i, k] == 0


def _check_params(params: np.ndarray) -> None:
    for name, p in (("lookahead", params[1]), ("agent_first", params[2])):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"TicTacToe-v3: {name} must be a probability in [0, 1], got {p}")


TICTACTOE = NumbaEnv(
    id="TicTacToe-v3", observation_space=gym.spaces.Box(0.0, 1.0, (18,), np.float32),
    action_space=gym.spaces.Discrete(9), state_shape=(None, 12), state_dtype=np.int64, reset=reset, step=step,
    observe=observe, mask=mask, params={"lookahead": 0.0, "agent_first": 0.5}, check_params=_check_params,
    reward_threshold=1.0)
"""Tic-Tac-Toe against the random player by default (``lookahead=1.0``: the one-step-lookahead player)."""
