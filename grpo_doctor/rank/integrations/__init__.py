"""Plug-ins that record a training framework's run with grpo-doctor.

Each module imports its framework, so none is imported by `import grpo_doctor`: a script
imports the one it uses.
    callback  any Hugging Face Trainer: `GrpoDoctorCallback` (metrics, step phases, seed audits)
    trl       TRL's GRPOTrainer: `instrument(trainer)` adds the callback and records the rollouts
    swift     ms-swift: `register()` from an `--external_plugins` file
    swift_plugin  `python -m grpo_doctor.rank.integrations.swift_plugin --path`: the plugin file shipped
              for that (ms_swift_plugin/grpo_doctor_swift_plugin.py)

Typical use (a TRL script):
    from grpo_doctor.rank.integrations.trl import instrument
    trainer = instrument(GRPOTrainer(model=..., reward_funcs=[...], args=config, train_dataset=data))
"""
