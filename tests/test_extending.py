"""Adding an algorithm is one file: the docs/extending.md example, run as a module, is trained, saved, loaded,
exported and listed through the command line; the registry's rules and discovery."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import rapidrl as rr
from rapidrl import cli
from rapidrl.algos import registry
from rapidrl.export import export_policy
from rapidrl.train.config import ConfigError

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"


@pytest.fixture
def vpg(tmp_path):
    """The example algorithm module of docs/extending.md (its one python block), imported; unregistered after."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1, "docs/extending.md should hold exactly one python block: the example algorithm"
    path = tmp_path / "vpg_example.py"
    path.write_text(blocks[0])
    spec = importlib.util.spec_from_file_location("vpg_example", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["vpg_example"] = module
    spec.loader.exec_module(module)
    yield module
    registry._REGISTRY.pop("vpg", None)
    sys.modules.pop("vpg_example", None)
    vars(rr).pop("VPG", None)


def test_the_docs_example_is_an_algorithm_everywhere(vpg, tmp_path, capsys):
    assert registry.get_algorithm("vpg") is vpg.VPG and rr.VPG is vpg.VPG
    model = rr.VPG("CartPole-v1", num_envs=4, num_steps=32, seed=0)
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(4 * 32 * 3, progress_bar=False)
    assert model.num_updates == 3 and {"losses/policy_loss", "losses/value_loss"} <= set(model.history[-1])
    assert any(not torch.equal(a, b) for a, b in zip(before, model.policy.parameters()))
    loaded = rr.VPG.load(model.save(tmp_path / "vpg.pt"))
    obs = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True), model.predict(obs, deterministic=True))
    ts = torch.jit.load(str(export_policy(model, tmp_path / "vpg.ts", "torchscript")))
    np.testing.assert_array_equal(ts(torch.from_numpy(obs)).numpy(), model.predict(obs, deterministic=True))
    # the command line reads the same registry
    assert cli.main(["list", "algos"]) == 0
    assert "vpg    Vanilla policy gradient" in capsys.readouterr().out
    run = tmp_path / "run"
    assert cli.main(["train", "vpg", "CartPole-v1", "--timesteps", "256", "--run-dir", str(run), "--headless",
                     "--eval-episodes", "1", "--set", "algo.num_envs=4"]) == 0
    assert (run / "model.pt").is_file()
    assert cli.main(["eval", str(run), "--episodes", "1"]) == 0


def test_register_checks_what_it_is_given(vpg):
    with pytest.raises(TypeError, match=r"subclass of rapidrl\.train\.algorithm\.Algorithm"):
        registry.register(object)

    class Nameless(vpg.VPG):
        name = "Not A Name"

    with pytest.raises(ValueError, match="lowercase identifier"):
        registry.register(Nameless)

    class Imposter(vpg.VPG):
        name = "ppo"

    with pytest.raises(ValueError, match=r"'ppo' is already registered by rapidrl\.algos\.ppo\.PPO"):
        registry.register(Imposter)
    assert registry.register(vpg.VPG) is vpg.VPG  # registering the same class again is harmless
    with pytest.raises(ConfigError, match=r"unknown algorithm 'nope'; allowed: .*ppo"):
        registry.get_algorithm("nope")


def test_entry_point_modules_are_imported(monkeypatch, tmp_path):
    """Installed packages add algorithms through the rapidrl.algorithms entry-point group."""
    (tmp_path / "ep_algo.py").write_text("import rapidrl.algos.registry as r\nr.SEEN = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    class Entry:
        name, value = "ep", "ep_algo"

    monkeypatch.setattr(registry.importlib.metadata, "entry_points",
                        lambda group: [Entry()] if group == registry.ENTRY_POINT_GROUP else [])
    monkeypatch.setattr(registry, "_discovered", False)
    registry.algorithms()
    assert getattr(registry, "SEEN", False)
    monkeypatch.delattr(registry, "SEEN")
    Entry.value = "no_such_module_here"
    monkeypatch.setattr(registry, "_discovered", False)
    with pytest.raises(ImportError, match="entry point 'ep'"):
        registry.algorithms()
    monkeypatch.setattr(registry, "_discovered", True)


def test_every_shipped_algorithm_is_registered_and_exported_by_name():
    """``rapidrl.__all__``, ``dir(rapidrl)`` and ``rapidrl.algos.__all__`` list exactly the algorithms (and configs)
    this package registers, each name resolving to the registry's class, and the type checkers' imports name them."""
    import ast

    import rapidrl.algos as algos

    shipped = {cls.__name__: cls for cls in registry.algorithms().values() if cls.__module__.startswith("rapidrl.")}
    assert len(shipped) >= 17
    exported = {n for n in rr.__all__ if n[:1].isupper() and getattr(rr, n) in set(shipped.values())}
    assert exported == set(shipped), "rapidrl.__all__ must list every registered algorithm"
    assert set(shipped) <= set(dir(rr))
    for name, cls in shipped.items():
        assert getattr(rr, name) is cls is registry.get_algorithm(cls.name)
        assert getattr(algos, name) is cls and getattr(algos, cls.config_class.__name__) is cls.config_class
    configs = {cls.config_class.__name__ for cls in shipped.values()}
    assert set(algos.__all__) - {"ALGORITHMS"} == set(shipped) | configs
    assert set(dir(algos)) >= set(shipped) | configs
    for module in (rr, algos):  # IDE completion and type checkers read the TYPE_CHECKING imports
        tree = ast.parse(open(module.__file__).read())
        imported = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.If)
                    and getattr(node.test, "id", None) == "TYPE_CHECKING"
                    for stmt in node.body if isinstance(stmt, ast.ImportFrom) for a in stmt.names}
        assert set(shipped) <= imported, f"{module.__name__}: TYPE_CHECKING imports miss {set(shipped) - imported}"


def test_every_shipped_algorithm_defaults_to_one_torch_thread():
    """One torch thread unless the user asks for more: every core (0) loses up to 50x as soon as another process
    shares the cores (OpenMP's workers spin), and gains at most 1.9x alone (docs/BENCHMARKS.md, section threads)."""
    shipped = {name: cls for name, cls in registry.algorithms().items() if cls.__module__.startswith("rapidrl.")}
    assert {"sac", "td3", "ddpg", "tqc", "crossq", "td3_bc", "iql", "cql", "bc"} <= set(shipped)
    assert {name: cls.config_class().torch_threads for name, cls in shipped.items()} == dict.fromkeys(shipped, 1)


def test_with_defaults_changes_inherited_defaults_and_nothing_else():
    """``with_defaults`` (a config's own defaults for its base's fields, declared once there): the defaults change,
    the field order, types and TOML round trip stay the base's; a field the class declares itself, or one no base
    declares, is a TypeError."""
    import dataclasses

    from rapidrl.algos.offpolicy import OffPolicyConfig
    from rapidrl.algos.sac import SACConfig
    from rapidrl.train.config import config_from_dict, config_to_dict, with_defaults

    base, sac = OffPolicyConfig(), SACConfig()
    assert sac.learning_rate == 1e-3 != base.learning_rate and sac.buffer_size == base.buffer_size

    @dataclasses.dataclass
    @with_defaults(batch_size=8, hidden=(4,))
    class Small(OffPolicyConfig):
        extra: int = 1

    assert [f.name for f in dataclasses.fields(Small)] == [f.name for f in dataclasses.fields(OffPolicyConfig)] + [
        "extra"]
    assert (Small().batch_size, Small().hidden, Small(batch_size=3).batch_size) == (8, (4,), 3)
    assert config_from_dict(SACConfig, config_to_dict(SACConfig(hidden=(8,)))) == SACConfig(hidden=(8,))
    for bad in ({"no_such_field": 1}, {"extra": 2}):
        with pytest.raises(TypeError, match="needs a field that only a base declares"):
            @dataclasses.dataclass
            @with_defaults(**bad)
            class Broken(OffPolicyConfig):
                extra: int = 1
