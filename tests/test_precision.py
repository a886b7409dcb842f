"""The ``precision`` path setting (``rapidrl.train.precision``): resolution next to the gradient backend, its report
(``model.paths``, config.toml, summary.json), its refusals, native-bf16 detection on any OS, and every algorithm
training under bf16 autocast with float32 parameters, optimizer state and storage.

The code that runs on CUDA is the code tested here on ``device="cpu"``: the autocast device type comes from the
model's device, never a hard-coded "cuda" or "cpu".
"""

from __future__ import annotations

import builtins
import json
import warnings

import numpy as np
import pytest
import torch

import rapidrl as rr
from rapidrl import cli
from rapidrl._system import cpu_flags
from rapidrl.train import precision as precision_mod
from rapidrl.train.config import ConfigError

SMALL_ON = dict(num_envs=4, num_steps=16, minibatch_size=32, update_epochs=1, seed=0)
SMALL_OFF = dict(learning_starts=32, batch_size=16, buffer_size=500, log_every_steps=4, seed=0)


@pytest.fixture
def native(monkeypatch):
    """Set what the CPU is said to support: ``native(True)`` / ``native(False)``."""
    def set_native(value: bool):
        monkeypatch.setattr(precision_mod, "cpu_native_bf16", lambda: value)
    return set_native


def test_default_is_fp32_and_reported():
    model = rr.PPO("CartPole-v1", **SMALL_ON)
    assert model.config.precision == "fp32" and model.precision == "fp32"
    assert model.paths["precision"].as_dict() == {"value": "fp32", "reason": "precision='fp32'"}


@pytest.mark.parametrize("make", [
    lambda: rr.PPO("CartPole-v1", precision="bf16", gradient_backend="handwritten", **SMALL_ON),
    lambda: rr.DQN("CartPole-v1", precision="bf16", gradient_backend="handwritten", **SMALL_OFF),
    lambda: rr.SAC("Pendulum-v1", precision="bf16", gradient_backend="handwritten", **SMALL_OFF),
])
def test_bf16_with_the_compiled_backend_is_an_error_naming_the_torch_backend(make):
    with pytest.raises(ConfigError, match=r"precision='bf16' needs gradient_backend='torch'"):
        make()


@pytest.mark.parametrize("make", [
    lambda **kw: rr.PPO("CartPole-v1", hidden=(256, 256), **SMALL_ON, **kw),
    lambda **kw: rr.DQN("CartPole-v1", hidden=(256, 256), **SMALL_OFF, **kw),
    lambda **kw: rr.SAC("Pendulum-v1", hidden=(64, 64), **SMALL_OFF, **kw),
])
def test_explicit_bf16_moves_auto_backend_to_torch_and_auto_keeps_the_compiled_fp32_path(make, native):
    native(True)
    bf16 = make(precision="bf16")
    assert bf16.gradient_backend == "torch" and bf16.precision == "bf16"
    assert "precision='bf16' needs gradient_backend='torch'" in bf16.paths["gradient_backend"].reason
    auto = make(precision="auto")  # the handwritten float32 backend applies: it stays, and so does fp32
    assert auto.gradient_backend == "handwritten" and auto.precision == "fp32"
    assert "handwritten gradient backend runs in float32" in auto.paths["precision"].reason


def test_sac_auto_takes_torch_and_bf16_over_the_handwritten_backend_where_measured_faster(native):
    """SAC's 256x256 update measured faster in bf16 on the torch backend than on the handwritten float32 one
    (rapidrl bench precision), so "auto" for both settings gives torch + bf16 there, and only there."""
    native(True)
    big = {**SMALL_OFF, "batch_size": 256}
    sac = rr.SAC("Pendulum-v1", precision="auto", **big)  # hidden (256, 256), the default
    assert (sac.gradient_backend, sac.precision) == ("torch", "bf16")
    assert "measured faster than the handwritten float32" in sac.paths["gradient_backend"].reason
    fixed = rr.SAC("Pendulum-v1", precision="auto", gradient_backend="handwritten", **big)
    assert (fixed.gradient_backend, fixed.precision) == ("handwritten", "fp32")  # an explicit backend is kept
    assert rr.SAC("Pendulum-v1", **big).gradient_backend == "handwritten"  # precision "fp32", the default
    assert rr.SAC("Pendulum-v1", precision="auto", **SMALL_OFF).gradient_backend == "handwritten"  # batch 16
    native(False)
    sac = rr.SAC("Pendulum-v1", precision="auto", **big)
    assert (sac.gradient_backend, sac.precision) == ("handwritten", "fp32")


def test_auto_takes_bf16_only_where_every_condition_holds(native):
    heavy = dict(hidden=(256, 256), gradient_backend="torch", precision="auto", **{**SMALL_ON, "num_steps": 64,
                                                                                  "minibatch_size": 256})
    native(True)
    model = rr.PPO("CartPole-v1", **heavy)
    assert model.precision == "bf16" and model.paths["precision"].reason == "auto: the first that applies"
    small = rr.PPO("CartPole-v1", **{**heavy, "hidden": (64, 64)})
    assert small.precision == "fp32" and "small networks" in small.paths["precision"].reason
    rows = rr.PPO("CartPole-v1", **{**heavy, "minibatch_size": 64})  # 256x256 at 64 rows: measured no faster
    assert rows.precision == "fp32" and "MLP updates of 64 rows" in rows.paths["precision"].reason
    minatar = rr.PPO("MinAtar/Breakout-v1", **{**heavy, "hidden": (64, 64)})  # every CNN: measured faster
    assert minatar.precision == "bf16"
    untested = rr.A2C("CartPole-v1", hidden=(256, 256), precision="auto", num_envs=64, seed=0)
    assert untested.precision == "fp32" and "no bf16 learning test" in untested.paths["precision"].reason
    native(False)
    plain = rr.PPO("CartPole-v1", **heavy)
    assert plain.precision == "fp32" and "no native bfloat16" in plain.paths["precision"].reason
    # explicit bf16 runs without native support (PyTorch emulates it), as asked, with a warning that it is slow
    with pytest.warns(RuntimeWarning, match=r"no native bfloat16.*emulates precision='bf16'.*~11x"):
        assert rr.PPO("CartPole-v1", **{**heavy, "precision": "bf16"}).precision == "bf16"


def test_explicit_bf16_warns_only_where_emulated(native, recwarn):
    native(True)
    rr.PPO("CartPole-v1", precision="bf16", gradient_backend="torch", **SMALL_ON)
    native(False)
    rr.PPO("CartPole-v1", precision="auto", gradient_backend="torch", **SMALL_ON)
    rr.PPO("CartPole-v1", precision="fp32", **SMALL_ON)
    assert not [w for w in recwarn if "emulates" in str(w.message)]


def test_auto_keeps_fp32_on_cuda_where_bf16_measured_slower_and_explicit_bf16_is_kept(native):
    """The rule itself (a pure function, so it runs without a GPU): on a CUDA device "auto" is fp32 for every
    network, heavy or not, native bf16 or not; tests/test_cuda.py checks it through a model on a real GPU."""
    native(True)
    cuda = torch.device("cuda", 0)
    auto = precision_mod.resolve_precision("auto", device=cuda, backend_autocasts=True, tested=True, heavy=None)
    assert auto.value == "fp32" and precision_mod.CUDA_AUTO_FP32 in auto.reason
    cpu = precision_mod.resolve_precision("auto", device=torch.device("cpu"), backend_autocasts=True, tested=True,
                                          heavy=None)
    assert cpu.value == "bf16"


def test_auto_picks_bf16_for_a_nature_cnn(native):
    native(True)
    model = rr.PPO("ALE/Breakout-v5", num_envs=2, num_steps=8, minibatch_size=16, seed=0, precision="auto")
    assert model.policy.encoder_kind == "nature" and model.precision == "bf16"
    model.env.close()


def test_bad_values_and_recurrent_policies_are_refused():
    with pytest.raises(ConfigError, match="precision must be one of"):
        rr.PPO("CartPole-v1", precision="fp16")
    with pytest.raises(ConfigError, match="precision='bf16' is not supported with a recurrent policy"):
        rr.PPO("CartPoleNoVel-v1", recurrent="gru", precision="bf16", **SMALL_ON)
    auto = rr.PPO("CartPoleNoVel-v1", recurrent="gru", precision="auto", gradient_backend="torch", **SMALL_ON)
    assert auto.precision == "fp32" and "recurrent" in auto.paths["precision"].reason


def test_legacy_bf16_update_is_precision_bf16():
    with pytest.warns(DeprecationWarning, match="bf16_update replaced by precision='bf16'"):
        model = rr.PPO("CartPole-v1", bf16_update=True, **SMALL_ON)
    assert model.precision == "bf16" and model.gradient_backend == "torch"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert rr.PPO("CartPole-v1", bf16_update=False, **SMALL_ON).precision == "fp32"


def test_native_detection_never_raises_without_linux(monkeypatch):
    """No /proc/cpuinfo (macOS, Windows) and no torch query: "unknown" is "not native", never an error."""
    real_open = builtins.open

    def no_proc(path, *args, **kwargs):
        if str(path).startswith("/proc/"):
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", no_proc)
    assert cpu_flags() == frozenset()
    monkeypatch.setattr(precision_mod, "cpu_bf16_support", lambda: None)
    precision_mod.cpu_native_bf16.cache_clear()
    try:
        assert precision_mod.cpu_native_bf16() is False
        assert precision_mod.native_bf16(torch.device("cpu")) is not None
    finally:
        precision_mod.cpu_native_bf16.cache_clear()
    assert precision_mod.native_bf16(torch.device("meta")) is not None  # neither cpu nor cuda


def test_autocast_device_type_comes_from_the_model_device():
    model = rr.PPO("CartPole-v1", precision="bf16", **SMALL_ON)
    ctx = model._autocast()
    assert isinstance(ctx, torch.autocast) and ctx.device == "cpu" and ctx.fast_dtype == torch.bfloat16
    with ctx:
        x = torch.ones(2, 4)
        out, values = model.policy._heads(x)
        assert torch.nn.Linear(4, 4)(x).dtype == torch.bfloat16  # the layers compute in bf16
    assert out.dtype == values.dtype == torch.float32  # the heads hand float32 to the distribution maths


def _check_bf16_training(model, steps):
    model.learn(steps, progress_bar=False)
    assert model.precision == "bf16" and model.gradient_backend == "torch"
    for module in model.trainable_modules():
        assert all(p.dtype == torch.float32 for p in module.parameters())
    optimizers = [v for v in vars(model).values() if isinstance(v, torch.optim.Optimizer)]
    assert optimizers and all(t.dtype == torch.float32 for opt in optimizers for state in opt.state.values()
                              for k, t in state.items() if k != "step")
    losses = {k: v for k, v in model.metrics.items() if k.startswith("losses/")}
    assert losses, "no losses logged: it did not train"
    return model


@pytest.mark.parametrize("make, steps", [
    (lambda: rr.PPO("CartPole-v1", precision="bf16", **SMALL_ON), 128),
    (lambda: rr.PPO("Pendulum-v1", precision="bf16", squash="tanh", collection="step", **SMALL_ON), 128),
    (lambda: rr.PPO("MinAtar/Breakout-v1", precision="bf16", **SMALL_ON), 128),
    (lambda: rr.A2C("CartPole-v1", precision="bf16", num_envs=4, seed=0), 100),
    (lambda: rr.IMPALA("CartPole-v1", precision="bf16", num_envs=4, num_steps=16, seed=0), 128),
    (lambda: rr.MAPPO("MPE/simple_spread-v3", precision="bf16", num_envs=6, num_steps=8, minibatch_size=24,
                      seed=0), 96),
    (lambda: rr.DQN("MinAtar/Breakout-v1", precision="bf16", train_freq=4, gradient_steps=2, **SMALL_OFF), 128),
    (lambda: rr.DQN("CartPole-v1", precision="bf16", dueling=True, **SMALL_OFF), 128),
    (lambda: rr.SAC("Pendulum-v1", precision="bf16", **SMALL_OFF), 128),
    (lambda: rr.TD3("Pendulum-v1", precision="bf16", **SMALL_OFF), 128),
    (lambda: rr.Rainbow("MinAtar/Breakout-v1", precision="bf16", train_freq=4, gradient_steps=2, n_atoms=11,
                        **SMALL_OFF), 128),
    (lambda: rr.QRDQN("MinAtar/Breakout-v1", precision="bf16", train_freq=4, gradient_steps=2, n_quantiles=8,
                      **SMALL_OFF), 128),
    (lambda: rr.IQN("CartPole-v1", precision="bf16", num_tau_samples=8, num_tau_prime_samples=8, **SMALL_OFF), 128),
    (lambda: rr.SACDiscrete("MinAtar/Breakout-v1", precision="bf16", train_freq=4, gradient_steps=2, **SMALL_OFF),
     128),
], ids=["ppo", "ppo_gaussian", "ppo_cnn", "a2c", "impala", "mappo", "dqn_cnn", "dqn_dueling", "sac", "td3",
        "rainbow_cnn", "qrdqn_cnn", "iqn", "sac_discrete_cnn"])
def test_every_algorithm_trains_in_bf16_with_float32_state(make, steps):
    model = _check_bf16_training(make(), steps)
    obs = np.zeros((2, *model.observation_space.shape), model.observation_space.dtype)
    actions = model.predict(obs, deterministic=True)  # predict runs float32, on float32 weights
    assert np.asarray(actions).dtype in (np.int64, np.float32)


def test_bf16_changes_the_arithmetic_not_the_storage():
    runs = {p: rr.PPO("CartPole-v1", precision=p, gradient_backend="torch", **SMALL_ON).learn(128, progress_bar=False)
            for p in ("fp32", "bf16")}
    assert runs["bf16"].buffer.values.dtype == runs["fp32"].buffer.values.dtype == np.float32
    a, b = (list(m.policy.parameters()) for m in runs.values())
    assert any(not torch.equal(x, y) for x, y in zip(a, b))


def test_the_cli_prints_and_records_the_precision(tmp_path, capsys):
    run = tmp_path / "run"
    code = cli.main(["train", "ppo", "CartPole-v1", "--timesteps", "256", "--run-dir", str(run), "--eval-episodes",
                     "1", "--headless", "--set", "algo.num_envs=4", "--set", "algo.num_steps=32",
                     "--set", "algo.minibatch_size=64", "--set", "algo.precision=bf16"])
    assert code == 0
    assert "precision=bf16 (precision='bf16')" in capsys.readouterr().out
    summary = json.loads((run / "summary.json").read_text())
    assert summary["paths"]["precision"] == {"value": "bf16", "reason": "precision='bf16'"}
    assert summary["paths"]["gradient_backend"]["value"] == "torch"
    assert 'value = "bf16"' in (run / "config.toml").read_text()


def test_docs_example_runs():
    """The python block of docs/precision.md runs and says what it prints."""
    import re
    from pathlib import Path

    src = (Path(__file__).resolve().parents[1] / "docs" / "precision.md").read_text()
    (block,) = re.findall(r"```python\n(.*?)```", src, re.S)
    ns: dict = {}
    exec(compile(block, "docs/precision.md", "exec"), ns)
    assert ns["model"].precision == "bf16" and ns["auto"].precision == "fp32"
    assert ns["auto"].gradient_backend == "handwritten"


# -- value heads in float32 (issue 61: IQL's advantages under bf16) ---------------------------------------------------
def test_a_float32_linear_is_a_linear_whose_product_stays_float32_under_bf16_autocast():
    from rapidrl.nn.dtypes import Float32Linear

    torch.manual_seed(0)
    plain, head = torch.nn.Linear(64, 1), Float32Linear(64, 1)
    head.load_state_dict(plain.state_dict())  # the same parameters and state dict keys
    x = torch.randn(256, 64, requires_grad=True)
    assert torch.equal(head(x), plain(x))  # no autocast: nn.Linear exactly
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = torch.relu(x @ torch.eye(64))  # a bf16 hidden layer
        assert h.dtype == torch.bfloat16 and plain(h).dtype == torch.bfloat16
        out = head(h)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.nn.functional.linear(h.detach().float(), plain.weight, plain.bias),
                               rtol=0, atol=0)
    out.sum().backward()
    assert head.weight.grad is not None and x.grad is not None


def test_critics_with_a_float32_output_layer_round_their_values_far_less_under_bf16():
    """Critic outputs near 100 (a converged IQL critic's scale): bf16 rounds the output itself to multiples of 0.5;
    with the output layer in float32 only the hidden layers' rounding is left."""
    from rapidrl.nn.qnets import CriticEnsemble

    torch.manual_seed(0)
    critics = CriticEnsemble(2, 11, 3, (256, 256), float32_output=True)
    with torch.no_grad():
        critics.biases[-1].fill_(100.0)
    obs, act = torch.randn(1024, 11), torch.rand(1024, 3) * 2 - 1
    exact = critics(obs, act)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        head32 = critics(obs, act)
    critics.float32_output = False
    with torch.autocast("cpu", dtype=torch.bfloat16):
        rounded = critics(obs, act)
    assert head32.dtype == rounded.dtype == torch.float32
    err32, err16 = (head32 - exact).abs().mean(), (rounded - exact).abs().mean()
    assert err16 > 0.05 and err32 < err16 / 4, (err32, err16)  # bf16 spacing at 64-128 is 0.5
