"""Git for push_results.py: no secrets in its environment, hooks and fsmonitor off, the token for fetch and push alone.

The token reaches git as an auth header in the environment (GIT_CONFIG_*), never on a command line.
"""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

# Settings every git call gets: no repository hooks, no fsmonitor command, no pager or prompt.
SAFE_GIT = {
    "core.hooksPath": "/dev/null",
    "core.fsmonitor": "false",
    "core.pager": "cat",
}
# Never passed to a git call that does not need the network, nor to check-results.
SECRETS = ("GH_TOKEN", "GITHUB_TOKEN", "ACTIONS_RUNTIME_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_TOKEN")


def clean_env(token: str | None = None) -> dict[str, str]:
    """The environment for a git or check-results call: no secrets, safe git settings, and the
    token's auth header only when TOKEN is given (for fetch and push)."""
    env = {
        k: v for k, v in os.environ.items() if k not in SECRETS and not k.startswith("GIT_CONFIG_")
    }
    settings = dict(SAFE_GIT)
    if token:
        auth = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        settings["http.https://github.com/.extraheader"] = f"AUTHORIZATION: basic {auth}"
    env["GIT_CONFIG_COUNT"] = str(len(settings))
    for i, (key, value) in enumerate(settings.items()):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    env["GIT_TERMINAL_PROMPT"] = "0"
    return env


def git(repo: Path, *args: str, token: str | None = None, check: bool = True):
    """Runs git in REPO with the safe settings (and the token for fetch and push only)."""
    assert token is None or args[0] in ("fetch", "push"), "the token is for fetch and push only"
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        env=clean_env(token),
        check=check,
        capture_output=True,
        text=True,
    )
