"""Mistakes on the command line itself (a bad flag value, a missing tool): a `DoctorError`, so main()
prints it in one or two lines without a traceback, as it does every other part's errors.

Typical use:
    raise UserError(f"--nproc {n} must be at least 1", "pass --nproc 2 for the two-rank demo")
"""
from __future__ import annotations

from grpo_doctor.schema.errors import DoctorError


class UserError(DoctorError):
    pass
