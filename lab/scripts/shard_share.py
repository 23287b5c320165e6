"""One GPU's share of the suite as `gemmbench history --gpus` deals it out: its --bench arguments.

    python lab/scripts/shard_share.py K N

Deals the suite's series (every benchmark of bench_gemm.Gemm at every variant and shape) over N
GPUs as gemmbench.shard.home_gpus does on a first run, and prints one ``--bench=PATTERN`` per
series of GPU K (0-based), so that a one-GPU history of that share times what GPU K would do.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks import bench_gemm  # noqa: E402
from gemmbench import asv_process, shard  # noqa: E402

BENCHMARKS = ("time_gemm", "track_tflops", "track_time_vs_cublas")


def share(k: int, n: int) -> list[str]:
    series = [
        asv_process.series_name(f"bench_gemm.Gemm.{b}", (repr(v), repr(s)))
        for b in BENCHMARKS
        for v in bench_gemm.Gemm.params[0]
        for s in bench_gemm.Gemm.params[1]
    ]
    uuids = [f"GPU-{i}" for i in range(n)]
    homes = shard.home_gpus(series, uuids)
    return [s for s in sorted(series) if homes[s] == uuids[k]]


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not all(a.isdigit() for a in argv) or int(argv[0]) >= int(argv[1]):
        print("usage: shard_share.py K N (0 <= K < N)", file=sys.stderr)
        return 2
    print("\n".join(shard.bench_patterns(share(int(argv[0]), int(argv[1])))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
