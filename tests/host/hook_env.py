"""The environment the host's hook tests start programs with."""

from __future__ import annotations

import os


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without PMM_* and LD_PRELOAD, plus extra."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PMM_") and k != "LD_PRELOAD"}
    env.update(extra)
    return env
