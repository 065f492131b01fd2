"""The click classes every command uses: errors as one line and an exit code, options never empty."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from dsbench.errors import DsbenchError
from dsbench.io import write_failed


class Command(click.Command):
    """A command whose options and arguments, when typed, are never empty: ``--strategies ''`` would otherwise mean
    "every strategy" and ``-o ''`` or ``--run-dir ''`` "the default", silently (exit 2, naming the option)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        rest = super().parse_args(ctx, args)
        for param in self.params:
            if getattr(param, "is_flag", False) or param.nargs == -1 or param.name is None:
                continue
            if ctx.get_parameter_source(param.name) != click.core.ParameterSource.COMMANDLINE:
                continue
            value = ctx.params.get(param.name)
            values = list(value) if param.multiple and isinstance(value, tuple | list) else [value]
            if (isinstance(value, list) and not value and not param.multiple) or any(
                    isinstance(v, str) and not v.strip() for v in values):
                raise click.BadParameter("is empty: give a value, or leave it out", ctx=ctx, param=param)
        return rest


class Group(click.Group):
    """Turns dsbench errors into a one-line message and exit code instead of a traceback; anything else that
    escapes is a dsbench bug, also one line (exit 1), with the traceback under ``--debug``."""

    command_class = Command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except DsbenchError as exc:
            if debug_wanted(ctx):
                raise
            click.echo(f"dsbench: error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("dsbench: interrupted", err=True)
            ctx.exit(130)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:  # the reader went away (`dsbench explain x | head -1`): stop quietly, as SIGPIPE would
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # so that the interpreter's last flush does not fail again
            ctx.exit(141)  # 128 + SIGPIPE, the shell's code for a writer stopped by its closed pipe
        except OSError as exc:  # a path the user gave that the system refuses (name too long, no permission, ...)
            if debug_wanted(ctx):
                raise
            error = write_failed(exc.filename or "a path", exc)  # a full or failing disk is exit 1, else exit 2
            name = str(exc.filename or "")
            if len(name) > 200:  # a path too long for the system: its ends, so that the reason stays on the line
                name = f"{name[:100]}...{name[-40:]}"
            click.echo(f"dsbench: error: {name}: {exc.strerror or exc}".replace(": : ", ": ")[:400], err=True)
            ctx.exit(error.exit_code)
        except Exception as exc:
            if debug_wanted(ctx):
                raise
            first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            click.echo(f"dsbench: error: internal error {type(exc).__name__}: {first} (a dsbench bug: rerun with "
                       "--debug for the traceback and report it)", err=True)
            ctx.exit(1)


def debug_wanted(ctx: click.Context) -> bool:
    return bool(ctx.params.get("debug")) or os.environ.get("DSBENCH_DEBUG", "") not in ("", "0")
