"""The one vector-env core every family is written on (see ``rapidrl.envs``)."""
