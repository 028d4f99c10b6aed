"""grpo-doctor's ms-swift plugin file: the callback `grpo_doctor` and the rollout recorder.

Typical use:
    swift rlhf --rlhf_type grpo ... --callbacks grpo_doctor \
        --external_plugins $(python -m grpo_doctor.rank.integrations.swift_plugin --path)
"""
from grpo_doctor.rank.integrations.swift import register

register()
