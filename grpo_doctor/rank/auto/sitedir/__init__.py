"""The directory `grpo-doctor watch --instrument` puts first on PYTHONPATH: it holds `sitecustomize.py`.

A package only so that the wheel ships it; Python imports `sitecustomize` from here as a top-level module.

Typical use:
    PYTHONPATH=$(python -m grpo_doctor.rank.auto --path):$PYTHONPATH GRPO_DOCTOR_INSTRUMENT=1 python train.py
"""
