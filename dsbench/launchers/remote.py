"""One command per node over ssh, for launchers that start ranks on their own node only (torchrun, accelerate).

The builders here are pure: they return the text of a bash script (written into the run folder by
``dsbench launch``) that starts each node's command over ``ssh`` in parallel, prefixes every output line
with its node, and, as soon as one node fails, names it and stops the job on every node (exactly the processes
this launch started there, :mod:`dsbench.launchstop`), so a dead node never leaves the others hanging in a
collective. Its exit code
is the first failing node's. Remote commands are shell-quoted with :func:`shlex.quote`: hostnames, paths and
``--env`` values reach the remote shell as data.
"""

from __future__ import annotations

import posixpath
import shlex

from dsbench.launchers.base import LaunchCommand, LaunchSpec, cpu_env
from dsbench.launchstop import SSH, node_stop, record_self, stop_script


def remote_command(spec: LaunchSpec, argv: list[str], env: dict[str, str]) -> str:
    """The shell command a node runs: record its pid for the stop, cd to the launch folder, export the ranks'
    environment, exec argv (the launcher keeps the recorded pid)."""
    exports = [f"export {key}={shlex.quote(value)}" for key, value in sorted(env.items())]
    steps = [record_self(spec.launch_id), f"cd {shlex.quote(spec.cwd)}", *exports, f"exec {shlex.join(argv)}"]
    return " && ".join(steps)


def fan_out_script(commands: dict[str, str], launch_id: str) -> str:
    """Bash that runs ``commands`` (host -> remote shell command) at once and ends them all on a failure."""
    hosts = " ".join(shlex.quote(h) for h in commands)
    remote = " ".join(shlex.quote(c) for c in commands.values())
    stop = shlex.quote(node_stop(launch_id))
    return f"""#!/usr/bin/env bash
# Written by `dsbench launch`: starts the job on every node over ssh (one command per node), prefixes each
# output line with its node, and stops the job on every node as soon as one node fails.
set -u -o pipefail
hosts=({hosts})
commands=({remote})
# each node's line "INDEX EXIT-CODE" arrives on one pipe when its ssh ends: whenever it ended, read once (a line
# under PIPE_BUF is written whole, POSIX write(2)); bash's `wait -n` missed a node that ended beside another
dir=$(mktemp -d) && mkfifo -m 600 "$dir/ended" && exec 3<>"$dir/ended" && rm -rf -- "$dir" || exit 1
for i in "${{!hosts[@]}}"; do
  {{ {shlex.join(SSH)} "${{hosts[$i]}}" "${{commands[$i]}}" 2>&1 | sed -u "s/^/${{hosts[$i]}}: /"
    echo "$i $?" >&3; }} &
done
status=0
for _ in "${{hosts[@]}}"; do
  read -r i rc <&3
  if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then
    status=$rc
    echo "dsbench: node ${{hosts[$i]}} failed with exit code $rc; stopping the job on every node" >&2
    for host in "${{hosts[@]}}"; do timeout 15 {shlex.join(SSH)} "$host" {stop} >/dev/null 2>&1; done
  fi
done
wait  # every node has reported: reap their pipelines
exit "$status"
"""


def fan_out(spec: LaunchSpec, node_argv: dict[str, list[str]]) -> LaunchCommand:
    """The command that runs ``node_argv`` (host -> argv) on every node: ``bash`` on the written script."""
    env = cpu_env(spec)
    commands = {host: remote_command(spec, argv, env) for host, argv in node_argv.items()}
    script = fan_out_script(commands, spec.launch_id)
    stop = stop_command(spec)
    return LaunchCommand(argv=["bash", spec.launch_script], env=env, files={spec.launch_script: script, **stop.files},
                         remote=node_argv, stop=stop)


def stop_command(spec: LaunchSpec) -> LaunchCommand:
    """What stops this multi-node launch on every node (:mod:`dsbench.launchstop`): ``stop_nodes.sh`` beside
    the launch script."""
    script = posixpath.join(posixpath.dirname(spec.launch_script), "stop_nodes.sh")
    return LaunchCommand(argv=["bash", script], files={script: stop_script(list(spec.selection()), spec.launch_id)})
