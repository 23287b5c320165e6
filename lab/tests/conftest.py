"""Lab tests reuse the product's test helpers (tests/) and import the lab's scripts as modules."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for folder in (ROOT / "tests", ROOT / "lab" / "scripts", ROOT):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

# The product's fixtures that lab tests use: act (tests/test_act.py) and the published fixture
# dashboard (tests/test_publish.py).
from test_act import act  # noqa: E402, F401
from test_publish import published  # noqa: E402, F401
