"""argv for ``torchrun`` (torch.distributed.run)."""

from __future__ import annotations

from dsbench.launchers import LaunchCommand, LaunchSpec, cpu_env, worker_args


def build(spec: LaunchSpec) -> LaunchCommand:
    """One node: ``--standalone``-style fixed master; several: the same c10d rendezvous command on every node."""
    argv = ["torchrun", "--nproc-per-node", str(spec.ranks_per_node())]
    if spec.nodes() > 1:
        argv += ["--nnodes", str(spec.nodes()), "--rdzv-backend", "c10d",
                 "--rdzv-endpoint", f"{spec.first_host()}:{spec.master_port}"]
    else:
        argv += ["--nnodes", "1", "--master-addr", spec.master_addr, "--master-port", str(spec.master_port)]
    argv += ["--module", spec.module, *worker_args(spec)]
    return LaunchCommand(argv=argv, env=cpu_env(spec))
