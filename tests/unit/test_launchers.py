"""Golden argv per launcher x {local, hostfile, 2 nodes}, each parsed by the launcher's own parser."""

import shlex

import pytest
import yaml

from dsbench.errors import UserError
from dsbench.hostfile import parse_hostfile
from dsbench.launchers import LaunchCommand, LaunchSpec, build
from dsbench.launchers.accelerate import accelerate_config

CPU_ENV = {"DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "DSBENCH_DEVICE": "cpu"}
TWO_NODES = tuple(parse_hostfile(["node1 slots=8", "node2 slots=8"]))


def spec(**kw):
    base = dict(strategy="deepspeed", ds_config="run/ds_config.json", nproc_per_node=2, master_port=29501,
                script_args=("--steps", "5"))
    return LaunchSpec(**{**base, **kw})


def test_deepspeed_local():
    cmd = build(spec(launcher="deepspeed"))
    assert cmd.argv == ["deepspeed", "--num_gpus", "2", "--master_addr", "127.0.0.1", "--master_port", "29501",
                        "--module", "dsbench.train", "--strategy", "deepspeed", "--deepspeed_config",
                        "run/ds_config.json", "--steps", "5"]
    assert cmd.env == CPU_ENV


def test_deepspeed_hostfile_with_filters():
    cmd = build(spec(launcher="deepspeed", hostfile="hostfiles/a100", hosts=TWO_NODES, include="node1:0,1@node2"))
    assert cmd.argv[:8] == ["deepspeed", "--hostfile", "hostfiles/a100", "--include", "node1:0,1@node2",
                            "--master_addr", "node1", "--master_port"]


def test_deepspeed_two_nodes_of_a_hostfile():
    three = TWO_NODES + tuple(parse_hostfile(["node3 slots=8"]))
    cmd = build(spec(launcher="deepspeed", hostfile="hf", hosts=three, num_nodes=2))
    assert cmd.argv[:7] == ["deepspeed", "--hostfile", "hf", "--num_nodes", "2", "--master_addr", "node1"]


def test_torchrun_local_and_multinode():
    local = build(spec(launcher="torchrun", strategy="ddp"))
    assert local.argv == ["torchrun", "--nproc-per-node", "2", "--nnodes", "1", "--master-addr", "127.0.0.1",
                          "--master-port", "29501", "--module", "dsbench.train", "--strategy", "ddp", "--steps", "5"]
    multi = build(spec(launcher="torchrun", strategy="fsdp", hostfile="hf", hosts=TWO_NODES, python="/venv/python",
                       launch_script="run/launch_nodes.sh"))
    # torchrun starts ranks on its own node: the same c10d command runs on every node, over ssh from a script
    assert multi.argv == ["bash", "run/launch_nodes.sh"] and sorted(multi.remote) == ["node1", "node2"]
    assert multi.remote["node2"][:12] == ["/venv/python", "-m", "torch.distributed.run", "--nproc-per-node", "8",
                                          "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "node1:29501",
                                          "--rdzv-id"]


def test_torchrun_needs_equal_slots():
    uneven = tuple(parse_hostfile(["a slots=2", "b slots=4"]))
    with pytest.raises(UserError, match="different slot counts"):
        build(spec(launcher="torchrun", strategy="ddp", hostfile="hf", hosts=uneven))


def test_accelerate_deepspeed_yaml_references_the_rendered_file_only():
    cmd = build(spec(launcher="accelerate", accelerate_config="run/acc.yaml"))
    assert cmd.argv[:4] == ["accelerate", "launch", "--config_file", "run/acc.yaml"]
    config = yaml.safe_load(cmd.files["run/acc.yaml"])
    assert config["distributed_type"] == "DEEPSPEED" and config["num_processes"] == 2
    assert config["deepspeed_config"]["deepspeed_config_file"] == "run/ds_config.json"
    # accelerate refuses these next to deepspeed_config_file (FINDINGS: ValueError "will be ignored")
    assert "mixed_precision" not in config and "gradient_accumulation_steps" not in config["deepspeed_config"]


@pytest.mark.parametrize("strategy, kind", [("fsdp", "FSDP"), ("ddp", "MULTI_GPU")])
def test_accelerate_native_strategies(strategy, kind):
    config = accelerate_config(spec(launcher="accelerate", strategy=strategy, hostfile="hf", hosts=TWO_NODES))
    assert config["distributed_type"] == kind and config["num_machines"] == 2 and config["num_processes"] == 16
    assert config["main_process_ip"] == "node1"


def test_shell_line_quotes_everything():
    cmd = LaunchCommand(argv=["deepspeed", "--module", "m", "--deepspeed_config", "my dir/$(x);`y`.json"],
                        env={"A": "1 2"})
    line = cmd.shell_line()
    assert shlex.split(line) == ["A=1 2", "deepspeed", "--module", "m", "--deepspeed_config", "my dir/$(x);`y`.json"]


@pytest.mark.parametrize("kw, needle", [({"nproc_per_node": 0}, "--num-gpus"), ({"master_port": 70000},
                                        "--master-port"), ({"include": "a"}, "need --hostfile"),
                                        ({"hosts": TWO_NODES, "hostfile": "hf", "num_nodes": 3}, "exceeds")])
def test_spec_errors_name_the_flag(kw, needle):
    with pytest.raises(UserError, match=needle):
        spec(**kw)


# --- the launchers' own parsers accept what dsbench builds ---------------------------------------------------------

CASES = [
    spec(launcher="deepspeed"),
    spec(launcher="deepspeed", hostfile="hf", hosts=TWO_NODES, exclude="node2:7"),
    spec(launcher="torchrun", strategy="ddp"),
    spec(launcher="torchrun", strategy="fsdp", hostfile="hf", hosts=TWO_NODES),
    spec(launcher="accelerate"),
    spec(launcher="accelerate", strategy="fsdp", hostfile="hf", hosts=TWO_NODES),
]


@pytest.mark.parametrize("launch", CASES, ids=lambda s: f"{s.launcher}-{s.strategy}-{len(s.hosts)}hosts")
def test_launcher_parsers_accept_the_argv(launch):
    command = build(launch)
    argv = command.argv
    if command.remote:  # several nodes: each node's command, as `torchrun ...` / `accelerate launch ...` would read
        node = next(iter(command.remote.values()))
        assert node[1:3] == ["-m", "torch.distributed.run"] or node[1:3] == ["-m", "accelerate.commands.launch"]
        argv = (["torchrun"] if node[2] == "torch.distributed.run" else ["accelerate", "launch"]) + node[3:]
    if argv[0] == "deepspeed":
        from deepspeed.launcher.runner import parse_args

        args = parse_args(argv[1:])
        assert args.module and args.user_script == "dsbench.train" and args.master_port == 29501
        assert args.user_args[:2] == ["--strategy", "deepspeed"]
        assert args.hostfile == ("hf" if launch.hosts else "/job/hostfile")
    elif argv[0] == "torchrun":
        from torch.distributed.run import get_args_parser

        args = get_args_parser().parse_args(argv[1:])
        assert args.module and args.training_script == "dsbench.train"
        assert args.nproc_per_node == str(launch.ranks_per_node())
    else:
        from accelerate.commands.launch import launch_command_parser

        args = launch_command_parser().parse_args(argv[2:])
        assert args.module and args.training_script == "dsbench.train" and args.num_processes == launch.world_size()
        assert args.training_script_args[:2] == ["--strategy", launch.strategy]


# --- .deepspeed_env for multi-node deepspeed launches ---------------------------------------------------------------

from dsbench.launchers.deepspeed import format_deepspeed_env  # noqa: E402


def test_multinode_deepspeed_writes_env_file_and_points_deepspeed_at_it():
    cmd = build(spec(launcher="deepspeed", hostfile="hf", hosts=TWO_NODES, deepspeed_env_file="/run/.deepspeed_env",
                     extra_env=(("GLOO_SOCKET_IFNAME", "eth0"),)))
    assert cmd.env["DS_ENV_FILE"] == "/run/.deepspeed_env"
    text = cmd.files["/run/.deepspeed_env"]
    launch_id = cmd.env["DSBENCH_LAUNCH_ID"]
    assert text == (f"DSBENCH_DEVICE=cpu\nDSBENCH_LAUNCH_ID={launch_id}\nDS_ACCELERATOR=cpu\nGLOO_SOCKET_IFNAME=eth0\n"
                    "OMP_NUM_THREADS=1\n")
    assert all(line and not line.startswith("#") and "=" in line for line in text.splitlines())


def test_single_local_node_needs_no_env_file():
    local = tuple(parse_hostfile(["localhost slots=2"]))
    assert build(spec(launcher="deepspeed", hostfile="hf", hosts=local)).files == {}
    assert "DS_ENV_FILE" not in build(spec(launcher="deepspeed")).env


@pytest.mark.parametrize("key, value, needle", [
    ("A", "$(reboot)", "cannot be passed"), ("A", "`id`", "cannot be passed"), ("A", 'x"; rm -rf /; "', "cannot be"),
    ("A", "back\\slash", "cannot be"), ("A", "two\nlines", "cannot be"), ("A", " padded", "cannot be"),
    ("A", "", "cannot be"), ("1BAD", "x", "not a valid environment variable name"), ("A B", "x", "not a valid"),
])
def test_env_file_refuses_what_deepspeed_cannot_quote(key, value, needle):
    with pytest.raises(UserError, match=needle):
        format_deepspeed_env({key: value})


def test_one_remote_host_left_by_a_filter_runs_there_not_here():
    """DeepSpeed runs a one-host selection locally whatever the host's name; --force_multi sends it to the host
    (DeepSpeed's own parser and resource filter read the argv)."""
    from deepspeed.launcher.runner import parse_args, parse_resource_filter

    cmd = build(spec(launcher="deepspeed", hostfile="hf", hosts=TWO_NODES, exclude="node2",
                     deepspeed_env_file="/r/.deepspeed_env"))
    args = parse_args(cmd.argv[1:])
    assert args.force_multi and args.master_addr == "node1"
    pool = {h.name: list(range(h.slots)) for h in TWO_NODES}
    assert list(parse_resource_filter(pool, include_str=args.include, exclude_str=args.exclude)) == ["node1"]
    both = build(spec(launcher="deepspeed", hostfile="hf", hosts=TWO_NODES, deepspeed_env_file="/r/.deepspeed_env"))
    assert not parse_args(both.argv[1:]).force_multi


def test_openmpi_backend_gives_mpirun_the_rendezvous_and_root_opt_in():
    """DeepSpeed's own OpenMPIRunner is the oracle: it accepts the argv, and the mpirun command it builds from
    the env file exports the rendezvous every rank needs (mpirun starts the worker directly)."""
    from deepspeed.launcher.multinode_runner import OpenMPIRunner
    from deepspeed.launcher.runner import parse_args

    cmd = build(spec(launcher="deepspeed", hostfile="hf", hosts=TWO_NODES, launcher_backend="openmpi",
                     deepspeed_env_file="/r/.deepspeed_env", master_port=29611, as_root=True))
    args = parse_args(cmd.argv[1:])
    assert args.launcher == "openmpi" and not args.force_multi
    runner = OpenMPIRunner(args, "e30=", {h.name: h.slots for h in TWO_NODES})
    runner.validate_args()  # raises ValueError for include/exclude/num_nodes
    for line in cmd.files["/r/.deepspeed_env"].splitlines():
        runner.add_export(*line.split("=", 1))  # as runner.py reads DS_ENV_FILE
    mpirun = runner.get_cmd({}, {})
    assert mpirun[:3] == ["mpirun", "-n", str(sum(h.slots for h in TWO_NODES))]
    exports = {mpirun[i + 1] for i, arg in enumerate(mpirun) if arg == "-x"}
    assert {"MASTER_ADDR=node1", "MASTER_PORT=29611", "DS_ACCELERATOR=cpu"} <= exports
    assert cmd.env["OMPI_ALLOW_RUN_AS_ROOT"] == cmd.env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    assert not any(e.startswith("OMPI_") for e in exports)  # mpirun's opt-in, not the ranks'
    user = build(spec(launcher="deepspeed", hostfile="hf", hosts=TWO_NODES, launcher_backend="openmpi",
                      deepspeed_env_file="/r/.deepspeed_env"))
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in user.env


@pytest.mark.parametrize("selection", [{"include": "node1"}, {"exclude": "node2"}, {"num_nodes": 1}])
def test_openmpi_backend_refuses_what_deepspeeds_openmpi_runner_refuses(selection):
    from deepspeed.launcher.multinode_runner import OpenMPIRunner
    from deepspeed.launcher.runner import parse_args

    with pytest.raises(UserError, match="openmpi runs every slot of the hostfile"):
        spec(launcher="deepspeed", hostfile="hf", hosts=TWO_NODES, launcher_backend="openmpi", **selection)
    flags = {"include": ["--include", "node1"], "exclude": ["--exclude", "node2"], "num_nodes": ["--num_nodes", "1"]}
    args = parse_args(["--hostfile", "hf", "--launcher", "openmpi", *flags[next(iter(selection))], "m.py"])
    with pytest.raises(ValueError, match="does not support"):
        OpenMPIRunner(args, "e30=", {}).validate_args()


@pytest.mark.parametrize("user_yaml", [None, "configs/zero2.yaml"])
def test_accelerate_across_nodes_one_command_a_node_with_its_machine_rank(user_yaml):
    """dsbench's own YAML (--launcher accelerate) and a user's (--accelerate-config) fan out alike: on each node
    `accelerate launch` with that node's --machine_rank and the hostfile's processes, machines and first host, as
    accelerate's own parser reads them (the user's YAML reached 2 test-bed nodes in test_multinode.py; until
    2026-12-01 dsbench's YAML did too, in a launch of its own)."""
    from accelerate.commands.launch import launch_command_parser

    extra = {"user_accelerate_config": user_yaml} if user_yaml else {}
    command = build(spec(launcher="accelerate", strategy="deepspeed", hostfile="hf", hosts=TWO_NODES,
                         python="/venv/python", launch_script="run/launch_nodes.sh", **extra))
    assert sorted(command.remote) == ["node1", "node2"]
    for rank, host in enumerate(("node1", "node2")):
        node = command.remote[host]
        assert node[:3] == ["/venv/python", "-m", "accelerate.commands.launch"]
        args = launch_command_parser().parse_args(node[3:])
        assert (args.machine_rank, args.num_machines, args.num_processes) == (rank, 2, 16)
        assert (args.main_process_ip, args.main_process_port) == ("node1", 29501)
        assert args.config_file == (user_yaml or spec().accelerate_config) and args.module
