# shellcheck shell=bash
# Sourced by lab scripts: draw_shapes "SEEDS" prints the shapes of `report --sweep --random 40
# --seed S` for each seed, as MxNxK arguments on one line ($PY runs gemmbench.sweep.draw_random).
draw_shapes() {
    "$PY" -c 'import sys
from gemmbench.sweep import draw_random
print(" ".join("x".join(map(str, s)) for seed in sys.argv[1].split() for s in draw_random(40, int(seed))))' "$1"
}
