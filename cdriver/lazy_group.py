"""A click group whose subcommands are imported on first use.

Keeps `cdriver version` fast and loads a role's dependencies (grpc, kubernetes) only when
that role runs. A subcommand appears when its module is part of the package.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import ClassVar

import click


def module_available(target: str) -> bool:
    """True if the module of a "module:attribute" target can be imported."""
    try:
        return importlib.util.find_spec(target.split(":", 1)[0]) is not None
    except ModuleNotFoundError:
        return False


class LazyGroup(click.Group):
    """Subclasses set `lazy_commands` (name -> "module:attribute")."""

    lazy_commands: ClassVar[dict[str, str]] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        lazy = [name for name, target in self.lazy_commands.items() if module_available(target)]
        return sorted(set(super().list_commands(ctx)) | set(lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None:
            return cmd
        target = self.lazy_commands.get(cmd_name)
        if target is None or not module_available(target):
            return None
        module_name, attr = target.split(":", 1)
        return getattr(importlib.import_module(module_name), attr)
