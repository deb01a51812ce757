"""`clustermgr completion SHELL`: print the shell completion script."""

from __future__ import annotations

import click

from clustermgr.cli.output import emit_document


@click.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print a shell completion script.

    Example: clustermgr completion bash > /etc/bash_completion.d/clustermgr
    """
    from click.shell_completion import get_completion_class

    from clustermgr.cli.main import cli

    completer_class = get_completion_class(shell)
    if completer_class is None:  # pragma: no cover - click ships all three
        raise click.UsageError(f"no completion for {shell}")
    completer = completer_class(cli, {}, "clustermgr", "_CLUSTERMGR_COMPLETE")
    emit_document(completer.source() + "\n")
