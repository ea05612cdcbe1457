import sys

from bench.cli import main
from bench.train.runner import leave_rank_process

code = main()
if sys.argv[1:2] == ["train"]:  # a rank (the launchers start `python -m bench train`): its results are written
    leave_rank_process(code)
raise SystemExit(code)
