"""Facts about the machine a process runs on, shared by the rank side, the supervisor and the probe:
GPUs through NVML (`nvml`), library versions, launch settings and the GPU a process holds
(`environment`), and what the scheduler told this node: node count and id, master, job id (`cluster_env`,
reading Slurm's host lists with `hostlist`). Stdlib only at import: NVML is loaded lazily and its
absence is an answer, not an error.
"""
