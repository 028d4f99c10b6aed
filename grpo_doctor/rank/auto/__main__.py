"""`python -m grpo_doctor.rank.auto --path`: the directory to put first on PYTHONPATH (zero-code instrumentation).

Typical use:
    PYTHONPATH=$(python -m grpo_doctor.rank.auto --path):$PYTHONPATH GRPO_DOCTOR_INSTRUMENT=1 torchrun ... train.py
"""
from __future__ import annotations

import argparse
import sys

from grpo_doctor.rank.auto import INSTRUMENT_ENV, site_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_doctor.rank.auto",
                                     description="Zero-code instrumentation: phases and steps without code changes.")
    parser.add_argument("--path", action="store_true", help="print the directory to put first on PYTHONPATH")
    args = parser.parse_args(argv)
    if args.path:
        print(site_dir())
        return 0
    print(f"PYTHONPATH={site_dir()}${{PYTHONPATH:+:$PYTHONPATH}} {INSTRUMENT_ENV}=1 <your launch command>")
    return 0


if __name__ == "__main__":
    sys.exit(main())
