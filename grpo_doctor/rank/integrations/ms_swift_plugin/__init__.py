"""The folder of grpo-doctor's ms-swift plugin file, grpo_doctor_swift_plugin.py, alone on purpose.

ms-swift puts the folder of every `--external_plugins` file first on sys.path before importing
it (swift/utils/utils.py, `import_external_file`); from this folder nothing can shadow a real
package (next to integrations/trl.py and swift.py, `import trl` and `import swift` would find ours).

Typical use:
    python -m grpo_doctor.rank.integrations.swift_plugin --path   # .../ms_swift_plugin/grpo_doctor_swift_plugin.py
"""
