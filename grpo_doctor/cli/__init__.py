"""The `grpo-doctor` command line: main.py plus one module per subcommand."""
