"""Decides whether a pull request's regression was accepted on purpose: a label a code owner set.

The label counts only when the account that last added it (the issue events API) owns the gate's
judging files in the default branch's CODEOWNERS: named there as a user, or a member of a team
named there. It must have been added after the pr run of the judged head was created, so an
acceptance covers the head its owner saw, not a later push. Team membership needs an
organisation permission the workflow token lacks, so a team is honoured through the repository
role instead: admin or maintain (the role such a team holds on a repository it guards). Everyone
else's label is refused, with the reason.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from github_api import ApiError, GitHub

LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._:-]{0,49}")
LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})")
# The files whose owners may accept a regression: what judges a pull request.
JUDGED_BY = "/thresholds.toml"
ROLES = ("admin", "maintain")


@dataclass(frozen=True)
class Acceptance:
    """Who accepted (a validated login), why they count, and with which label."""

    login: str
    why: str
    label: str


def owners(codeowners: str, path: str = JUDGED_BY) -> list[str]:
    """The owners CODEOWNERS gives PATH ("/thresholds.toml"): the last matching line wins."""
    found: list[str] = []
    for line in codeowners.splitlines():
        parts = line.split("#", 1)[0].split()
        if not parts:
            continue
        pattern, names = parts[0], parts[1:]
        anchored = pattern.startswith("/")
        pattern = pattern.lstrip("/")
        target = path.lstrip("/")
        if pattern.endswith("/"):
            hit = target.startswith(pattern) if anchored else f"/{pattern}" in f"/{target}"
        elif anchored or "/" in pattern:
            hit = fnmatch.fnmatchcase(target, pattern) or target.startswith(pattern + "/")
        else:
            hit = any(fnmatch.fnmatchcase(part, pattern) for part in target.split("/"))
        if hit:
            found = names
    return found


def label_event(events: list, label: str) -> dict | None:
    """The event that last added LABEL, if the label is still on (GET .../issues/N/events)."""
    last = None
    for event in events:
        if ((event.get("label") or {}).get("name")) != label:
            continue
        if event.get("event") == "labeled":
            last = event
        elif event.get("event") == "unlabeled":
            last = None
    login = ((last or {}).get("actor") or {}).get("login")
    return last if isinstance(login, str) and LOGIN.fullmatch(login) else None


def label_setter(events: list, label: str) -> str | None:
    """The login that last added LABEL, if the label is still on."""
    event = label_event(events, label)
    return event["actor"]["login"] if event else None


def when(stamp) -> datetime | None:
    """An ISO 8601 time as GitHub writes it ("2026-12-01T15:31:14Z"), or None."""
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return None


def owner_reason(api: GitHub, login: str, names: list[str]) -> str | None:
    """Why LOGIN counts as an owner among NAMES (CODEOWNERS entries), or None."""
    for name in names:
        if name.lower() == f"@{login}".lower():
            return "named in CODEOWNERS"
    teams = [n for n in names if n.startswith("@") and "/" in n]
    if not teams:
        return None
    try:
        answer = api.request("GET", api.repo_path(f"/collaborators/{login}/permission"))
    except ApiError:
        return None
    role = (answer or {}).get("role_name") or (answer or {}).get("permission")
    if role in ROLES:
        return f"{role} of the repository, for {teams[0]} in CODEOWNERS"
    return None


def check(
    api: GitHub, pr: int, label: str, codeowners: Path, since: datetime | None = None
) -> Acceptance | None:
    """The acceptance of pull request PR, or None (printing why a label did not count).

    With SINCE (when the pr run of the head being judged was created), a label added before it
    does not count: an acceptance covers the head its owner saw, not a later push.
    """
    events = api.list(api.repo_path(f"/issues/{pr}/events"))
    event = label_event(events, label)
    if event is None:
        return None
    login = event["actor"]["login"]
    added = when(event.get("created_at"))
    if since is not None and (added is None or added < since):
        print(
            f"accept: the {label!r} label was added by @{login} before this head's pr run "
            "started; it accepts an earlier head only (remove it and add it again)"
        )
        return None
    try:
        names = owners(codeowners.read_text(encoding="utf-8"))
    except OSError:
        names = []
    why = owner_reason(api, login, names)
    if why is None:
        print(
            f"accept: the {label!r} label was set by @{login}, who is not a code owner of "
            f"{JUDGED_BY}; it does not count"
        )
        return None
    print(f"accept: @{login} ({why}) accepted the regression with {label!r}")
    return Acceptance(login=login, why=why, label=label)
