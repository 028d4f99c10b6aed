"""Where grpo-doctor's ms-swift plugin file is: `python -m grpo_doctor.rank.integrations.swift_plugin --path`.

The file (ms_swift_plugin/grpo_doctor_swift_plugin.py, installed with the package) calls
`swift.register()`; it sits alone in its folder because ms-swift puts a plugin's folder first on
sys.path (ms_swift_plugin/__init__.py says why). Importing this module imports nothing of
ms-swift or transformers, so printing the path is instant.

Typical use:
    swift rlhf --rlhf_type grpo ... --callbacks grpo_doctor \
        --external_plugins $(python -m grpo_doctor.rank.integrations.swift_plugin --path)
"""
from __future__ import annotations

import argparse
from pathlib import Path

PLUGIN_FILE = Path(__file__).resolve().parent / "ms_swift_plugin" / "grpo_doctor_swift_plugin.py"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m grpo_doctor.rank.integrations.swift_plugin",
        description="grpo-doctor's ms-swift plugin file, for `swift rlhf ... --external_plugins FILE "
                    "--callbacks grpo_doctor`.")
    parser.add_argument("--path", action="store_true", help="print the plugin file's absolute path")
    args = parser.parse_args(argv)
    if not args.path:
        parser.print_help()
        return 2
    print(PLUGIN_FILE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
