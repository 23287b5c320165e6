"""A loopback stand-in of the GitHub REST API for the CI scripts' tests: it serves the documented
endpoints they call from in-memory state and records every request.

Endpoints (docs.github.com/rest, API version 2022-11-28):
- GET /repos/{o}/{r}/issues/{n}/comments, POST the same (create), PATCH /repos/{o}/{r}/issues/comments/{id};
- GET /repos/{o}/{r}/issues?state=open&labels=L, POST /repos/{o}/{r}/issues;
- GET /repos/{o}/{r}/issues/{n}/events, GET /repos/{o}/{r}/collaborators/{u}/permission;
- GET /repos/{o}/{r}/commits/{sha}/pulls, POST /repos/{o}/{r}/statuses/{sha}.
Lists honour per_page and page; a comment or issue body over MAX_BODY characters answers 422, as
GitHub's does. Any other path answers 404. Run as a script it serves until
killed and writes its port to --port-file and its recorded requests to --record on each request.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BOT = "github-actions[bot]"
MAX_BODY = 65_536  # GitHub: "body is too long (maximum is 65536 characters)"


class State:
    """What the stand-in repository holds, and every request it was sent."""

    def __init__(self, repo: str = "acme/gemm", token: str = "ghs_standin"):
        self.repo, self.token = repo, token
        self.requests: list[dict] = []
        self.comments: list[dict] = []  # {"id", "issue", "body", "user"}
        self.issues: list[dict] = []  # {"number", "title", "body", "labels", "state", "user"}
        self.events: dict[int, list[dict]] = {}
        self.permissions: dict[str, str] = {}  # login -> role_name
        self.pulls: dict[str, list[dict]] = {}  # head sha -> pulls
        self.statuses: list[dict] = []
        self.next_id = 1000
        self.next_number = 1
        self.record: Path | None = None
        self.lock = threading.Lock()

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def answer(self, method: str, path: str, query: dict, body) -> tuple[int, object]:
        prefix = f"/repos/{self.repo}"
        if not path.startswith(prefix + "/"):
            return 404, {"message": "Not Found"}
        tail = path[len(prefix) :]
        if method in ("POST", "PATCH") and len(str((body or {}).get("body", ""))) > MAX_BODY:
            return 422, {"message": "Validation Failed", "errors": [{"field": "body"}]}
        if m := re.fullmatch(r"/issues/(\d+)/comments", tail):
            issue = int(m.group(1))
            if method == "GET":
                return 200, [c for c in self.comments if c["issue"] == issue]
            if method == "POST":
                comment = {
                    "id": self.new_id(),
                    "issue": issue,
                    "body": body["body"],
                    "user": {"login": BOT},
                }
                self.comments.append(comment)
                return 201, comment
        if (m := re.fullmatch(r"/issues/comments/(\d+)", tail)) and method == "PATCH":
            for comment in self.comments:
                if comment["id"] == int(m.group(1)):
                    comment["body"] = body["body"]
                    return 200, comment
            return 404, {"message": "Not Found"}
        if tail == "/issues" and method == "GET":
            labels = set(filter(None, query.get("labels", "").split(",")))
            state = query.get("state", "open")
            return 200, [
                i
                for i in self.issues
                if (state == "all" or i["state"] == state)
                and labels <= {label["name"] for label in i["labels"]}
            ]
        if tail == "/issues" and method == "POST":
            issue = {
                "number": self.next_number,
                "title": body["title"],
                "body": body.get("body", ""),
                "labels": [{"name": n} for n in body.get("labels", [])],
                "state": "open",
                "user": {"login": BOT},
            }
            self.next_number += 1
            self.issues.append(issue)
            return 201, issue
        if (m := re.fullmatch(r"/issues/(\d+)/events", tail)) and method == "GET":
            return 200, self.events.get(int(m.group(1)), [])
        if (m := re.fullmatch(r"/collaborators/([^/]+)/permission", tail)) and method == "GET":
            role = self.permissions.get(m.group(1))
            if role is None:
                return 404, {"message": "Not Found"}
            legacy = {"maintain": "write", "triage": "read"}.get(role, role)
            return 200, {"permission": legacy, "role_name": role, "user": {"login": m.group(1)}}
        if (m := re.fullmatch(r"/statuses/([0-9a-f]{40})", tail)) and method == "POST":
            status = {"id": self.new_id(), "sha": m.group(1), **body}
            self.statuses.append(status)
            return 201, status
        if (m := re.fullmatch(r"/commits/([0-9a-f]{40})/pulls", tail)) and method == "GET":
            return 200, self.pulls.get(m.group(1), [])
        return 404, {"message": "Not Found"}


def _handler(state: State):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _serve(self):
            url = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            with state.lock:
                state.requests.append(
                    {
                        "method": self.command,
                        "path": url.path,
                        "query": query,
                        "body": body,
                        "authorization": self.headers.get("Authorization"),
                    }
                )
                if self.headers.get("Authorization") != f"Bearer {state.token}":
                    status, answer = 401, {"message": "Bad credentials"}
                else:
                    status, answer = state.answer(self.command, url.path, query, body)
                    if isinstance(answer, list):
                        per_page = int(query.get("per_page", 30))
                        page = int(query.get("page", 1))
                        answer = answer[(page - 1) * per_page : page * per_page]
                if state.record:
                    state.record.write_text(json.dumps(dump(state), indent=1))
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = _serve

    return Handler


def dump(state: State) -> dict:
    return {
        "requests": state.requests,
        "comments": state.comments,
        "issues": state.issues,
        "statuses": state.statuses,
    }


class StandIn:
    """The stand-in serving STATE on 127.0.0.1 in a thread; ``url`` is its API root."""

    def __init__(self, state: State):
        self.state = state
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state", type=Path, help="JSON: repo, token, events, permissions, pulls")
    parser.add_argument("--port-file", type=Path, required=True)
    parser.add_argument("--record", type=Path, required=True)
    args = parser.parse_args()
    given = json.loads(args.state.read_text()) if args.state else {}
    state = State(given.get("repo", "acme/gemm"), given.get("token", "ghs_standin"))
    state.events = {int(k): v for k, v in given.get("events", {}).items()}
    state.permissions = given.get("permissions", {})
    state.pulls = given.get("pulls", {})
    state.record = args.record
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    args.port_file.write_text(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()
