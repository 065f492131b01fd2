"""What ``dsbench doctor`` needs to know about one host, printed as one JSON line (run there as
``python -m dsbench.worker.probe``, over ssh for other hosts).

Facts only; :mod:`dsbench.doctor` judges them. Imports torch (for the JIT cache folder it would use) but not
DeepSpeed's engine; DeepSpeed's list of ops prebuilt at install time is read when DeepSpeed imports.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

from dsbench.envinfo import binds, local_gpu_count, versions
from dsbench.jitlocks import stale_locks

# DeepSpeed ops a run may build on first use (their JIT folder names): the CPU accelerator's shared-memory
# comm op (every DeepSpeed CPU run), CPU Adam (optimizer offload), FusedAdam, async_io (NVMe offload).
JIT_OPS = ("deepspeed_shm_comm", "cpu_adam", "fused_adam", "async_io")


def interface() -> dict[str, object]:
    """The interface gloo will use: GLOO_SOCKET_IFNAME when set, else the one holding the address this host's
    name resolves to (gloo's default device, torch ProcessGroupGloo::createDefaultDevice)."""
    import psutil

    addresses = {name: [a.address for a in addrs if a.family == socket.AF_INET]
                 for name, addrs in psutil.net_if_addrs().items()}
    chosen = os.environ.get("GLOO_SOCKET_IFNAME")
    if chosen:
        return {"name": chosen, "source": "GLOO_SOCKET_IFNAME", "exists": chosen in addresses,
                "addresses": addresses.get(chosen, [])}
    try:
        address = socket.gethostbyname(socket.gethostname())
    except OSError:
        address = None
    name = next((n for n, addrs in addresses.items() if address in addrs), None)
    return {"name": name, "source": f"hostname {socket.gethostname()} -> {address}", "exists": name is not None,
            "addresses": [address] if address else [], "loopback": bool(address and address.startswith("127."))}


def jit_state() -> dict[str, object]:
    """Ops not yet built in torch's extension cache (nor prebuilt into DeepSpeed), and stale build locks."""
    import torch
    from torch.utils.cpp_extension import get_default_build_root

    explicit = os.environ.get("TORCH_EXTENSIONS_DIR")
    device = f"cu{torch.version.cuda.replace('.', '')}" if torch.version.cuda else "cpu"
    root = (Path(explicit) if explicit else Path(get_default_build_root()) / f"py{sys.version_info.major}"
        f"{sys.version_info.minor}_{device}")
    try:
        from deepspeed.git_version_info import installed_ops
    except Exception:  # DeepSpeed missing or broken: the versions row says so
        installed_ops = {}
    prebuilt = {"deepspeed_shm_comm": "deepspeed_shm_comm", "cpu_adam": "cpu_adam", "fused_adam": "fused_adam",
                "async_io": "async_io"}
    unbuilt = [op for op in JIT_OPS
               if not installed_ops.get(prebuilt[op]) and not (root / op / f"{op}.so").exists()]
    return {"root": str(root), "unbuilt": unbuilt,
            "stale_locks": [str(p) for p in stale_locks(root, time.time())]}


def gpu_stack() -> dict[str, object]:
    """What a GPU cluster's launch depends on and can be read without running it: the CUDA and NCCL versions torch
    was built with and sees, the devices torch counts, the NCCL_*/FI_* variables set, and the InfiniBand or EFA
    devices in /sys/class/infiniband (EFA's are named efa*, or driven by the efa driver)."""
    import torch

    nccl = None
    if torch.version.cuda:
        try:  # the NCCL torch links (torch.cuda.nccl.version(): a (major, minor, patch) tuple)
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as error:  # a build without NCCL, or a library that does not load
            nccl = f"unreadable: {error}"
    fabric = {}
    for device in sorted(Path("/sys/class/infiniband").glob("*")):
        driver = device / "device" / "driver"
        name = driver.resolve().name if driver.exists() else ""
        fabric[device.name] = "efa" if device.name.startswith("efa") or name == "efa" else "infiniband"
    return {"cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available() if torch.version.cuda else False,
            "device_count": torch.cuda.device_count() if torch.version.cuda else 0, "nccl": nccl,
            "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(("NCCL_", "FI_"))},
            "fabric": fabric}


def facts(port: int | None) -> dict[str, object]:
    return {"hostname": socket.gethostname(), "executable": sys.executable, "versions": versions(),
            "gpus": local_gpu_count(), "port_free": binds(port) if port else None, "interface": interface(),
            "jit": jit_state(), "gpu_stack": gpu_stack()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dsbench.worker.probe")
    parser.add_argument("--port", type=int, default=None, help="check that this rendezvous port is free")
    parser.add_argument("--versions", action="store_true", help="only the versions (quick: no torch import)")
    args = parser.parse_args(argv)
    print(json.dumps({"versions": versions()} if args.versions else facts(args.port)))


if __name__ == "__main__":
    from dsbench.paths import leave_working_folder_off_path

    leave_working_folder_off_path()
    main()
