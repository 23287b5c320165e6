"""A minimal GitHub REST client for the CI scripts: JSON requests with the job's token, paginated lists."""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request

# A repository as owner/name: GitHub's own character set, so it is safe inside a URL path.
REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}")
# List endpoints return at most this many items a page; a cap keeps a runaway list bounded.
PER_PAGE, MAX_PAGES = 100, 20


class ApiError(Exception):
    """A request GitHub answered with an error status, or that did not reach it."""


class GitHub:
    """Calls https://api.github.com (or $GITHUB_API_URL) as the token's owner, for one repository."""

    def __init__(self, repo: str, token: str | None = None, api_url: str | None = None):
        if not REPO.fullmatch(repo or ""):
            raise ApiError(f"repository {repo!r} is not owner/name")
        self.repo = repo
        self.token = token if token is not None else os.environ.get("GH_TOKEN", "")
        base = api_url or os.environ.get("GITHUB_API_URL") or "https://api.github.com"
        self.api_url = base.rstrip("/")

    def request(self, method: str, path: str, body: dict | None = None, query=None):
        """One call; PATH is relative to the API root ("/repos/o/n/issues"); returns the JSON."""
        url = self.api_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Accept", "application/vnd.github+json")
        req.add_header("X-GitHub-Api-Version", "2022-11-28")
        req.add_header("User-Agent", "gemmbench-ci")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as exc:
            raise ApiError(f"{method} {path}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ApiError(f"{method} {path}: {exc}") from None
        return json.loads(text) if text.strip() else None

    def list(self, path: str, query: dict | None = None) -> list:
        """Every item of a paginated list endpoint (page by page, PER_PAGE at a time)."""
        items: list = []
        for page in range(1, MAX_PAGES + 1):
            got = self.request(
                "GET", path, query={**(query or {}), "per_page": PER_PAGE, "page": page}
            )
            if not isinstance(got, list):
                raise ApiError(f"GET {path}: expected a list")
            items += got
            if len(got) < PER_PAGE:
                break
        return items

    def repo_path(self, tail: str) -> str:
        """/repos/OWNER/NAME + TAIL."""
        return f"/repos/{self.repo}{tail}"

    def upsert_comment(
        self, issue: int, marker: str, body: str, author: str | None = None
    ) -> tuple[str, int]:
        """Edit the issue's (or pull request's) comment starting with MARKER to BODY, or create it.

        Returns ("updated" or "created", the comment's id). With AUTHOR, only that login's
        comments count, so a user who posts the marker cannot capture the bot's comment.
        """
        comments = self.list(self.repo_path(f"/issues/{issue}/comments"))
        for comment in comments:
            login = (comment.get("user") or {}).get("login")
            if author and login != author:
                continue
            if str(comment.get("body") or "").startswith(marker):
                self.request(
                    "PATCH", self.repo_path(f"/issues/comments/{comment['id']}"), {"body": body}
                )
                return "updated", int(comment["id"])
        made = self.request("POST", self.repo_path(f"/issues/{issue}/comments"), {"body": body})
        return "created", int(made["id"])
