"""The MinAtar env ids rapidrl runs built in (no imports: ``rapidrl.envs.registry`` lists them).

The ids and action sets are the ``minatar`` package's Gymnasium registration (``minatar.gym``):
``MinAtar/<Game>-v0`` has all 6 actions, ``MinAtar/<Game>-v1`` the game's minimal action set.
"""

# game module name -> the name in the env id; the order gives the game codes of ``vec.py``
GAME_NAMES = {"breakout": "Breakout", "space_invaders": "SpaceInvaders", "freeway": "Freeway", "asterix": "Asterix",
              "seaquest": "Seaquest"}

MINATAR_ENVS = tuple(f"MinAtar/{name}-{v}" for name in GAME_NAMES.values() for v in ("v0", "v1"))
