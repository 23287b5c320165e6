"""Links each commit on the built asv site to its page on GitHub, where the configuration names none.

    python scripts/ci/commit_links.py HTML_DIR COMMIT_URL

asv writes show_commit_url into HTML_DIR/index.json, "#" unless asv.conf.json sets it, and the
site's graphs and regressions page join it with a commit hash (GitHub's …/commit/ also gives
them compare links). publish.sh passes $GITHUB_SERVER_URL/$GITHUB_REPOSITORY/commit/, so a
project needs no address of its own in asv.conf.json; one it does set is left as it is.
Exit 0 done (or left as configured), 2 bad arguments, 4 no readable index.json.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ASV_DEFAULT = "#"
COMMIT_URL = re.compile(r"https://[A-Za-z0-9.-]+(?::\d+)?/[A-Za-z0-9._-]+/[A-Za-z0-9._-]+/commit/")


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not COMMIT_URL.fullmatch(argv[1]):
        print("usage: commit_links.py HTML_DIR https://HOST/OWNER/REPO/commit/", file=sys.stderr)
        return 2
    index = Path(argv[0]) / "index.json"
    try:
        site = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"commit_links: cannot read {index}: {exc}", file=sys.stderr)
        return 4
    if site.get("show_commit_url", ASV_DEFAULT) != ASV_DEFAULT:
        print(f"commit_links: asv.conf.json sets show_commit_url; left {site['show_commit_url']}")
        return 0
    site["show_commit_url"] = argv[1]
    index.write_text(json.dumps(site), encoding="utf-8")
    print(f"commit_links: commits link to {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
