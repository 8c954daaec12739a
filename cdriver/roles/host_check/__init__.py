"""`cdriver host-check`: an administrator's check of a node's IMEX prerequisites."""

from cdriver.roles.host_check.cli import command

__all__ = ["command"]
