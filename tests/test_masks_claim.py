"""docs/masks.md names exactly the algorithms that act on action masks (``supports_action_masks``), and names the
discrete ones that do not."""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import pytest

from rapidrl.algos import registry

DOC = Path(__file__).resolve().parents[1] / "docs" / "masks.md"


def _paragraph() -> str:
    text = DOC.read_text()
    return " ".join(text.split("\n\n")[1].split())


def test_the_masks_doc_lists_the_algorithms_that_take_masks_and_those_that_do_not():
    first = _paragraph()
    taking, _, rest = first.partition("The offline discrete algorithms")
    shipped = {cls.__name__: cls for cls in registry.algorithms().values() if cls.__module__.startswith("rapidrl.")}
    named = {n for n in shipped if re.search(rf"\b{n}\b", taking)}
    assert named == {n for n, cls in shipped.items() if cls.supports_action_masks}
    refused = {n for n in shipped if re.search(rf"\b{n}\b", rest)}
    assert refused == {"DiscreteCQL", "BC"}
    assert not any(shipped[n].supports_action_masks for n in refused)


@pytest.mark.parametrize("algo", ["DiscreteCQL", "BC"])
def test_an_algorithm_without_masks_refuses_an_env_that_states_them(algo):
    import rapidrl as rr
    from rapidrl.train.config import ConfigError

    env = rr.make_vec("InvalidActionDiscrete-v0", 1, seed=0, dim=8, n_invalid_actions=3)
    assert isinstance(env.single_action_space, gym.spaces.Discrete) and env.action_mask_size
    with pytest.raises(ConfigError, match="does not use action masks") as refused:
        getattr(rr, algo)(env, dataset="none/none-v0")
    takers = [cls.__name__ for cls in registry.algorithms().values()
              if cls.supports_action_masks and cls.__module__.startswith("rapidrl.")]
    named = {n for n in takers if re.search(rf"\b{n}\b", str(refused.value))}
    assert named == set(takers), "the refusal names every algorithm that takes masks"
