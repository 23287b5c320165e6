"""The tuning grid of the dispatch study: 64 shapes, printed one per line (python3 lab/scripts/tuning_grid.py)."""

SQUARES = [
    256,
    384,
    512,
    768,
    1000,
    1024,
    1536,
    2000,
    2048,
    2304,
    3000,
    3072,
    4096,
    5120,
    6144,
    8192,
]
UNALIGNED_SQUARES = [1023, 2047, 2049, 3001, 4095, 4097]
MLP = [
    "4096x11008x4096",
    "4096x4096x11008",
    "2048x14336x4096",
    "2048x4096x14336",
    "8192x3072x768",
    "8192x768x3072",
    "4096x1024x4096",
    "1024x4096x1024",
    "512x12288x4096",
    "16384x1024x4096",
    "2048x5120x1280",
    "8192x2560x10240",
]
TALL = [
    "16384x256x1024",
    "32768x512x512",
    "65536x256x256",
    "8192x256x4096",
    "16384x512x2048",
    "4096x256x8192",
]
WIDE = ["256x16384x1024", "512x32768x512", "256x8192x4096", "512x16384x2048"]
DEEPK = [
    "256x256x65536",
    "256x256x16384",
    "512x512x32768",
    "512x512x8192",
    "1024x1024x16384",
    "768x768x16384",
]
SMALL = ["256x256x512", "256x512x256", "512x256x512", "384x768x256", "640x640x640", "320x320x1280"]
ODD = [
    "3442x383x6619",
    "411x268x1945",
    "2356x2340x1912",
    "1537x2050x3071",
    "5000x3000x2001",
    "777x1555x4099",
    "6000x900x1500",
    "1200x7000x333",
]
GRID = (
    [f"{s}x{s}x{s}" for s in SQUARES + UNALIGNED_SQUARES] + MLP + TALL + WIDE + DEEPK + SMALL + ODD
)
# The shapes a kernel change to the unaligned loads or to the split counts moves: re-tuned alone.
RETUNE = [f"{s}x{s}x{s}" for s in SQUARES[:7] + UNALIGNED_SQUARES] + DEEPK + SMALL + ODD

if __name__ == "__main__":
    import sys

    print("\n".join(RETUNE if sys.argv[1:] == ["--retune"] else GRID))
