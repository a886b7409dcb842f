"""Networks: actor-critic policies (feed-forward and recurrent), critic ensembles, running normalizers."""

from rapidrl.nn.normalize import ObsNormalizer, RewardScaler, RunningMeanStd
from rapidrl.nn.policies import ActorCritic, mlp, orthogonal_init
from rapidrl.nn.recurrent import RecurrentActorCritic

__all__ = ["ActorCritic", "ObsNormalizer", "RecurrentActorCritic", "RewardScaler", "RunningMeanStd", "mlp",
           "orthogonal_init"]
