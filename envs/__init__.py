"""sandgym environments: sandboxes, images, tasks, the env core and the task families.

Importing this package registers the Gymnasium ids ``sandgym/<Family>-v0``.
"""

import gymnasium as _gymnasium

_GYM_IDS = {"sandgym/SWE-v0": "swe"}

for _env_id, _family in _GYM_IDS.items():
    if _env_id not in _gymnasium.registry:
        _gymnasium.register(
            id=_env_id,
            entry_point="sandgym.envs.core.gym_env:SandgymEnv",
            kwargs={"family": _family},
            disable_env_checker=True,
        )
