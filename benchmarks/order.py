"""Ordering benchmarks (issue 2): run both paths, numba and numpy, side by side.

python benchmarks/order.py            # full sizes (about a minute per path)
python benchmarks/order.py --quick    # smoke test
"""

import os
import subprocess
import sys

if __name__ == "__main__":
    quick = ["--quick"] if "--quick" in sys.argv else []
    for numba in ("1", "0"):
        env = dict(os.environ, FEEDLINE_NUMBA=numba)
        subprocess.run([sys.executable, "-m", "feedline.cli", "bench", *quick], env=env, check=True)
        print()
