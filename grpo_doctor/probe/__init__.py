"""`grpo-doctor probe`: before training, check that the nodes can meet (rendezvous, ports,
interfaces, GPUs), that they are launched alike (settings, versions), and that collectives
work and run at the expected speed on every link.

Node level (grpo_doctor.cli.probe): preflight -> node rendezvous and comparison -> torchrun.
Rank level (`python -m grpo_doctor.probe`, started by torchrun): rank rendezvous -> settings ->
collectives -> links. Results go to <run-dir>/probe/ and the report's rules read them.
"""
