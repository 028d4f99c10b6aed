"""Pure rollout mathematics shared by the rank side and the analysis: hashes, diversity, group stats.

`hashing` is stdlib only (the rank API imports it eagerly); `diversity` and `groups` need numpy
and are imported by the rank side only when a rollout is recorded, so `import grpo_doctor` stays
free of numpy. Nothing here imports torch.
"""
