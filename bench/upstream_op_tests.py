#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Upstream's Arm op tests through ethosu_ng, results kept in bench/results/: the command line of
``ethosu_ng.tools.upstream_op_tests`` (its docstring says how cases are collected and run).

    OMP_NUM_THREADS=1 python bench/upstream_op_tests.py --ops add,avg_pool2d --targets u55,u85
    python bench/upstream_op_tests.py --table
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from ethosu_ng.tools.upstream_op_tests import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(default_results=os.path.join(HERE, "results", "upstream_op_tests.jsonl")))
