"""`python -m grpo_doctor.probe`: one rank of the probe, as torchrun starts it."""
from grpo_doctor.probe.worker import main

raise SystemExit(main())
