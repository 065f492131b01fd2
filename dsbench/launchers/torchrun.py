"""argv for ``torchrun`` (torch.distributed.run)."""

from __future__ import annotations

from dsbench.launchers.base import LaunchCommand, LaunchSpec, cpu_env, worker_args
from dsbench.launchers.remote import fan_out


def build(spec: LaunchSpec) -> LaunchCommand:
    """One node: a fixed master. Several: the same c10d-rendezvous torchrun on every node, started over ssh by a
    script (torchrun starts ranks on its own node only)."""
    per_node = ["--nproc-per-node", str(spec.ranks_per_node())]
    tail = ["--module", spec.module, *worker_args(spec)]
    if not spec.multinode():
        argv = ["torchrun", *per_node, "--nnodes", "1", "--master-addr", spec.master_addr,
                "--master-port", str(spec.master_port), *tail]
        return LaunchCommand(argv=argv, env=cpu_env(spec))
    node_argv = [spec.python, "-m", "torch.distributed.run", *per_node, "--nnodes", str(spec.nodes()),
                 "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{spec.first_host()}:{spec.master_port}",
                 "--rdzv-id", "dsbench", *tail]
    return fan_out(spec, {host: node_argv for host in spec.selection()})
