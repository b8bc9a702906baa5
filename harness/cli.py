"""The `sandgym` command line. User mistakes end in one red line and exit status 1, never a traceback."""

from __future__ import annotations

import json
import logging
import sys
from importlib.metadata import version as package_version
from typing import List, Optional

import anyio
import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..envs.errors import SandboxUnavailable, SandgymError
from ..envs.images import ImageBuilder
from ..envs.sandbox import DockerProvider, SandboxConfig, cleanup as cleanup_engine, connect, strip_ansi

app = typer.Typer(
    name="sandgym",
    help="Sandboxed environments for coding agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
images_app = typer.Typer(help="Build and list the images sandboxes run in.", no_args_is_help=True)
app.add_typer(images_app, name="images")

console = Console()
err_console = Console(stderr=True)


def _version_callback(value: bool) -> None:
    if value:
        console.print(f"sandgym {package_version('sandgym')}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True, help="Print the version."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug details to stderr."),
) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


# --- doctor ----------------------------------------------------------------------


@app.command()
def doctor(as_json: bool = typer.Option(False, "--json", help="Print the checks as JSON.")) -> None:
    """Check the engine, disk, debootstrap, QEMU and KVM; print the fix for each gap."""
    from .doctor import run_checks

    checks = run_checks()
    if as_json:
        print(json.dumps([c.model_dump() for c in checks]))
    else:
        table = Table(title="sandgym doctor")
        for column in ("check", "status", "detail", "fix"):
            table.add_column(column, overflow="fold")
        colour = {"ok": "green", "warn": "yellow", "fail": "red"}
        for c in checks:
            table.add_row(c.name, f"[{colour[c.status]}]{c.status}[/]", c.detail, c.fix or "")
        console.print(table)
    if any(c.status == "fail" for c in checks):
        raise typer.Exit(1)


# --- cleanup -----------------------------------------------------------------------


@app.command()
def cleanup(
    images: bool = typer.Option(False, "--images", help="Also remove every image sandgym built."),
    run: Optional[str] = typer.Option(None, "--run", help="Only what carries this run label."),
) -> None:
    """Remove every container (and with --images, image) that sandgym created."""
    report = cleanup_engine(connect(), run_label=run, images=images)
    console.print(f"removed {len(report.containers)} container(s)" + (f", {len(report.images)} image(s)" if images else ""))
    for error in report.errors:
        err_console.print(f"[yellow]warning:[/] {error}")


# --- images ------------------------------------------------------------------------


def _builder(no_pull: bool = False, no_host_ca: bool = False) -> ImageBuilder:
    return ImageBuilder(connect(), pull=False if no_pull else None, trust_host_ca=False if no_host_ca else None)


@images_app.command("build")
def images_build(
    names: Optional[List[str]] = typer.Argument(None, help="Recipes to build (default: all)."),
    force: bool = typer.Option(False, "--force", help="Rebuild even when the tag exists."),
    no_pull: bool = typer.Option(False, "--no-pull", help="Never try a registry for base images."),
    no_host_ca: bool = typer.Option(False, "--no-host-ca", help="Do not put the host's CA bundle into builds."),
) -> None:
    """Build image recipes (parents first); unchanged recipes are reused."""
    builder = _builder(no_pull, no_host_ca)
    targets = names or sorted(builder.recipes)
    for name in targets:
        builder.recipe(name)  # unknown names fail before any work
    with Progress(
        SpinnerColumn(), TextColumn("[bold]{task.fields[name]}"), TextColumn("{task.description}"),
        TimeElapsedColumn(), console=console, transient=False,
    ) as progress:
        tasks: dict[str, int] = {}

        def on_event(name: str, line: str) -> None:
            if name not in tasks:
                tasks[name] = progress.add_task("", name=name, total=None)
            progress.update(tasks[name], description=strip_ansi(line)[:90])

        for name in targets:
            tag = builder.build(name, force=force, on_event=on_event)
            if name not in tasks:
                tasks[name] = progress.add_task("", name=name, total=None)
            progress.update(tasks[name], description=f"[green]{tag}[/]", total=1, completed=1)


@images_app.command("list")
def images_list(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Show every recipe's tag, whether it is built, and its size."""
    rows = _builder().status()
    if as_json:
        print(json.dumps([r.model_dump() for r in rows]))
        return
    table = Table(title="sandgym images")
    for column in ("name", "tag", "built", "size", "source"):
        table.add_column(column, no_wrap=True)
    for r in rows:
        table.add_row(
            r.name, r.tag, "[green]yes[/]" if r.built else "[yellow]no[/]",
            f"{r.size_mb:.0f} MB" if r.size_mb is not None else "", r.source or "",
        )
    console.print(table)


# --- exec ----------------------------------------------------------------------------


@app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_command(
    command: List[str] = typer.Argument(..., help="The command (quote it, or put it after --)."),
    image: str = typer.Option("sandbox", "--image", help="A recipe name or any image reference."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds before the command is killed."),
    network: bool = typer.Option(False, "--network", help="Give the sandbox network access."),
) -> None:
    """Run one command in a fresh sandbox and print what it printed."""
    builder = _builder()
    ref = builder.build(image) if image in builder.recipes else image

    async def run() -> int:
        provider = DockerProvider(run_label="cli")
        async with provider.sandbox(ref, SandboxConfig(network=network)) as sb:
            result = await sb.exec(" ".join(command), timeout=timeout)
        sys.stdout.write(result.output)
        if result.timed_out:
            err_console.print(f"[red]timed out after {timeout:g}s[/]")
        return result.exit_code

    raise typer.Exit(anyio.run(run))


def main() -> None:
    try:
        app()
    except SandgymError as exc:
        hint = " (run `sandgym doctor`)" if isinstance(exc, SandboxUnavailable) else ""
        err_console.print(f"[red]error:[/] {exc}{hint}", highlight=False, soft_wrap=True)
        sys.exit(1)
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]")
        sys.exit(130)
