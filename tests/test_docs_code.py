"""Code shown in the docs is the code: every block after a marker ``<!-- code: rapidrl.module.Class.method -->`` in
docs/*.md must equal that object's source, line for line (dedented), so an update printed on an algorithm's page
cannot drift from the update that runs (``python -m tools.docs_code`` rewrites stale blocks)."""

from __future__ import annotations

import pytest

from tools.docs_code import shown_blocks, source

UPDATES = ("rapidrl.algos.td3.TD3._update_step", "rapidrl.algos.td3.td3_steps", "rapidrl.algos.ddpg.DDPG._update_step",
           "rapidrl.algos.td3_bc.TD3BC._update_step", "rapidrl.algos.sac.SAC._autograd_step",
           "rapidrl.algos.tqc.TQC._update_step", "rapidrl.algos.crossq.CrossQ._update_step",
           "rapidrl.algos.crossq.CrossQ._actor_update", "rapidrl.algos.cql.CQL._update_step",
           "rapidrl.algos.cql.DiscreteCQL._update_step", "rapidrl.algos.iql.IQL._update_step",
           "rapidrl.algos.dqn.DQN._autograd_step", "rapidrl.algos.bc.BC._update_step",
           "rapidrl.algos.qrdqn.QRDQN._autograd_step", "rapidrl.algos.iqn.IQN._update_step",
           "rapidrl.algos.c51.C51._autograd_step", "rapidrl.algos.sac_discrete.SACDiscrete._update_step")


def test_the_docs_show_the_update_of_every_off_policy_actor_critic_and_offline_algorithm():
    names = {name for _, name, _ in shown_blocks()}
    assert [u for u in UPDATES if u not in names] == []


@pytest.mark.parametrize("page, name, shown", shown_blocks(), ids=lambda v: v if "\n" not in str(v) else "")
def test_a_block_shown_in_the_docs_is_the_code(page, name, shown):
    assert shown == source(name), f"docs/{page}: the block of {name} is not the code (python -m tools.docs_code)"
