"""Networks: actor-critic policies, critic ensembles, running normalizers."""

from rapidrl.nn.normalize import ObsNormalizer, RewardScaler, RunningMeanStd
from rapidrl.nn.policies import ActorCritic, mlp, orthogonal_init

__all__ = ["ActorCritic", "ObsNormalizer", "RewardScaler", "RunningMeanStd", "mlp", "orthogonal_init"]
