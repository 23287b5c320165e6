"""Lab: a sweep's --json as rows for `gemmbench tune --repick`: python lab/scripts/sweep_rows.py IN.json OUT.json

The sweep times each shape's table choice and heuristic choice interleaved in one run, so a
repick from its rows keeps only the table entries that still beat the heuristic there (run 36's
head-to-head did the same). Where both columns ran the same candidate, one row is written.
"""

from __future__ import annotations

import json
import sys

from gemm import dispatch


def rows(sweep: dict) -> list[dict]:
    cublas = {r["shape"]: r["median_s"] for r in sweep["records"] if r["variant"] == "cublas"}
    found: dict[tuple, dict] = {}
    for r in sweep["records"]:
        if r["variant"] == "cublas" or not r["choice"]:
            continue
        name, rest = r["choice"].split(" × ", 1)
        splits = int(rest.split(" ", 1)[0])
        m, n, k = r["dims"]
        seconds, base = r["median_s"], cublas.get(r["shape"])
        key = (m, n, k, name, splits)
        kept = found.get(key, {}).get("median_s")
        if kept is not None and (seconds is None or kept <= seconds):
            continue  # both columns ran this candidate: keep the faster of its two timings
        found[key] = {
            "m": m,
            "n": n,
            "k": k,
            "class": dispatch.shape_class(m, n, k),
            "variant": r["variant"],
            "config": name,
            "splits": splits,
            "median_s": seconds,
            "tflops": 2 * m * n * k / seconds / 1e12 if seconds else None,
            "fraction_of_cublas": base / seconds if seconds and base else None,
            "cublas_s": base,
            "relative_error": r["relative_error"],
            "error_bound": r["error_bound"],
            "repeat": sweep["repeat"],
            "warmup": sweep["warmup"],
            "correct": r["correct"],
        }
    return list(found.values())


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.splitlines()[0].split(": ", 1)[1], file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        converted = rows(json.load(handle))
    with open(argv[1], "w", encoding="utf-8") as handle:
        json.dump(converted, handle, indent=1)
    print(f"{len(converted)} rows from {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
