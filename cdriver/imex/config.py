"""The nvidia-imex config file and nodes config: render (jinja2), parse, validate, write.

The config is `KEY=value` lines with `#` comments. The nodes config lists one peer per line
(IP address or host name). Rendering and parsing are pure; `write_file_atomic` is the only
effect here.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cdriver.api import constants
from cdriver.atomic import atomic_write
from cdriver.checkout import TEMPLATES_DIR
from cdriver.decoding import TooLarge, read_bounded, short
from cdriver.errors import CdriverError
from cdriver.imex.names import dns_names
from cdriver.imex.settings import DEFAULT_SETTINGS, TUNABLES, ImexSettings, config_problems, mismatches

IMEX_SERVER_PORT = 50000
IMEX_CMD_PORT = 50005
IMEXD_DIR = "/imexd"
IMEXD_CONFIG = f"{IMEXD_DIR}/imexd.cfg"
IMEXD_NODES_CONFIG = f"{IMEXD_DIR}/nodes.cfg"
IMEX_CONFIG_TEMPLATE_NAME = "imexd.tmpl.cfg"
DEFAULT_IMEX_CONFIG = "/etc/nvidia-imex/config.cfg"
DEFAULT_IMEX_NODES_CONFIG = "/etc/nvidia-imex/nodes_config.cfg"
IMEXD_TEMPLATE_NAME = "imexd.cfg.tmpl"  # placed in the domain dir by the kubelet plugin
IMEXD_CONFIG_NAME = "imexd.cfg"
IMEXD_NODES_CONFIG_NAME = "nodes.cfg"
DEFAULT_MAX_NODES_PER_IMEX_DOMAIN = 18
IMEX_DAEMON_BINARY = "nvidia-imex"
IMEX_CTL_BINARY = "nvidia-imex-ctl"

# Config keys this code reads (the full key list lives in the template).
KEY_BIND_INTERFACE_IP = "BIND_INTERFACE_IP"
KEY_SERVER_PORT = "SERVER_PORT"
KEY_NODE_CONFIG_FILE = "IMEX_NODE_CONFIG_FILE"
KEY_CMD_ENABLED = "IMEX_CMD_ENABLED"
KEY_CMD_BIND_INTERFACE_IP = "IMEX_CMD_BIND_INTERFACE_IP"
KEY_CMD_PORT = "IMEX_CMD_PORT"
KEY_CMD_UNIX_DOMAIN_PATH = "IMEX_CMD_UNIX_DOMAIN_PATH"
KEY_LOG_FILE_NAME = "LOG_FILE_NAME"
KEY_LOG_APPEND_TO_LOG = "LOG_APPEND_TO_LOG"
KEY_DAEMONIZE = "DAEMONIZE"

#: Keys a rendered daemon config must carry with these exact values (the daemon depends on them).
REQUIRED_VALUES: dict[str, str] = {
    KEY_DAEMONIZE: "0",
    KEY_LOG_FILE_NAME: "",
    KEY_CMD_ENABLED: "1",
}

#: The fields of the upstream daemon's template (Go text/template, `{{ .Field }}`) and the
#: variables they stand for here: a domain directory may hold either driver's template.
UPSTREAM_TEMPLATE_FIELDS = {
    "IMEXDaemonNodesConfigPath": "nodes_config_file",
    "IMEXCmdBindInterfaceIP": "cmd_bind_ip",
}
_UPSTREAM_FIELD_RE = re.compile(r"(\{\{-?\s*)\.([A-Za-z_][A-Za-z0-9_]*)(\s*-?\}\})")

_KEY_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")
_MAX_CONFIG_BYTES = 1 << 20


class ImexConfigError(CdriverError):
    """A config, template or nodes config that cannot be used (message names file, line, fix)."""


# --- template rendering ----------------------------------------------------------------


def default_template_path() -> Path:
    """Path of the IMEX config template shipped in the package."""

    return TEMPLATES_DIR / IMEX_CONFIG_TEMPLATE_NAME


def load_template(path: str | os.PathLike[str] | None = None) -> str:
    """Text of the IMEX config template (default: the packaged `imexd.tmpl.cfg`)."""
    target = Path(path) if path is not None else default_template_path()
    try:
        return target.read_text(encoding="utf-8")
    except OSError as e:
        raise ImexConfigError(
            f"cannot read IMEX config template {target}: {e.strerror or e}; "
            "check that the file exists and is readable"
        ) from None
    except UnicodeDecodeError:
        raise ImexConfigError(f"IMEX config template {target} is not UTF-8 text; restore it") from None


def _check_value(name: str, value: str) -> None:
    if "\n" in value or "\r" in value or "\0" in value:
        raise ImexConfigError(f"{name}={value!r}: a config value must be a single line")


def _check_ip(name: str, value: str) -> None:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ImexConfigError(f"{name}={value!r} is not an IP address; pass the pod's IP (POD_IP)") from None


def _check_port(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ImexConfigError(f"{name}={value!r}: a port must be an integer from 1 to 65535")


def from_upstream_syntax(template: str, source: str = "IMEX config template") -> str:
    """The template with upstream's `{{ .Field }}` slots as this module's variables."""
    def swap(match: re.Match[str]) -> str:
        name = UPSTREAM_TEMPLATE_FIELDS.get(match.group(2))
        if name is None:
            raise ImexConfigError(
                f"{source}: unknown field .{match.group(2)}; an upstream-style template may only use "
                f"{', '.join('.' + f for f in UPSTREAM_TEMPLATE_FIELDS)}")
        return f"{match.group(1)}{name}{match.group(3)}"

    return _UPSTREAM_FIELD_RE.sub(swap, template)


def domain_template(template: str, *, server_port: int = IMEX_SERVER_PORT, cmd_port: int = IMEX_CMD_PORT,
                    settings: ImexSettings = DEFAULT_SETTINGS, source: str = "IMEX config template") -> str:
    """The template the kubelet plugin places in a domain's directory: the ports and the tuned
    settings (`cdriver.imex.settings`) filled in, and the per-daemon slots (nodes config path,
    pod IP) in upstream's syntax, so that cdriver's daemon and the upstream driver's daemon
    both render it (either may serve the domain while the cluster switches drivers).

    Raises ImexConfigError when the result does not carry `settings` (a template that
    hard-codes a tuned key)."""
    _check_port("SERVER_PORT", server_port)
    _check_port("IMEX_CMD_PORT", cmd_port)
    slots = {name: "{{ ." + field + " }}" for field, name in UPSTREAM_TEMPLATE_FIELDS.items()}
    text = _render(template, source, **slots, cmd_unix_socket="", server_port=server_port,
                   cmd_port=cmd_port, **settings.variables())
    problems = mismatches(parse_config(text, source=f"{source} (rendered)"), settings, source)
    if problems:
        raise ImexConfigError("; ".join(problems))
    return text


def _render(template: str, source: str, **variables: object) -> str:
    """`template` (either driver's syntax) rendered with `variables`; ImexConfigError naming
    `source` for a syntax error or a variable it does not know."""
    import jinja2  # imported here: the stand-in ctl parses configs and must start fast

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    try:
        return env.from_string(from_upstream_syntax(template, source)).render(**variables)
    except jinja2.TemplateSyntaxError as e:
        raise ImexConfigError(f"{source}: line {e.lineno}: template syntax error: {e.message}") from None
    except jinja2.UndefinedError as e:
        raise ImexConfigError(
            f"{source}: {e.message}; the template may only use nodes_config_file, cmd_bind_ip, "
            f"cmd_unix_socket, server_port, cmd_port, {', '.join(t.variable for t in TUNABLES)}"
        ) from None


def render_config(
    template: str,
    nodes_config_file: str,
    bind_ip: str,
    cmd_unix_socket: str | None = None,
    *,
    server_port: int = IMEX_SERVER_PORT,
    cmd_port: int = IMEX_CMD_PORT,
    source: str = "IMEX config template",
) -> str:
    """Render the IMEX config template; the result is parsed back to prove it is well formed,
    and its tuned keys (`cdriver.imex.settings`) to hold values nvidia-imex accepts.

    `bind_ip` becomes IMEX_CMD_BIND_INTERFACE_IP (the pod IP); `cmd_unix_socket` the optional
    IMEX_CMD_UNIX_DOMAIN_PATH. The upstream daemon's `{{ .Field }}` slots are understood too.
    Raises ImexConfigError for bad inputs or a broken template.
    """
    if not nodes_config_file or not os.path.isabs(nodes_config_file):
        raise ImexConfigError(
            f"nodes config path {nodes_config_file!r} must be an absolute path (e.g. {IMEXD_NODES_CONFIG})"
        )
    _check_value("IMEX_NODE_CONFIG_FILE", nodes_config_file)
    _check_ip("IMEX_CMD_BIND_INTERFACE_IP", bind_ip)
    if cmd_unix_socket:
        _check_value("IMEX_CMD_UNIX_DOMAIN_PATH", cmd_unix_socket)
        if not os.path.isabs(cmd_unix_socket):
            raise ImexConfigError(
                f"IMEX_CMD_UNIX_DOMAIN_PATH={cmd_unix_socket!r} must be an absolute path"
            )
    _check_port("SERVER_PORT", server_port)
    _check_port("IMEX_CMD_PORT", cmd_port)

    text = _render(template, source, nodes_config_file=nodes_config_file, cmd_bind_ip=bind_ip,
                   cmd_unix_socket=cmd_unix_socket or "", server_port=server_port, cmd_port=cmd_port,
                   **DEFAULT_SETTINGS.variables())
    values = parse_config(text, source=f"{source} (rendered)")
    problems = config_problems(values, source)
    if problems:
        raise ImexConfigError("; ".join(problems))
    for key, want in REQUIRED_VALUES.items():
        if values.get(key, None) != want:
            raise ImexConfigError(
                f"{source}: {key} must be {want!r} for a supervised daemon, got {values.get(key)!r}; "
                "restore the packaged template"
            )
    return text


# --- parsing ---------------------------------------------------------------------------


def parse_config(text: str, source: str = "IMEX config") -> dict[str, str]:
    """Parse `KEY=value` lines; comments and blank lines are skipped.

    Malformed lines, bad key names and keys given twice raise ImexConfigError naming the line.
    """
    values: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep:
            raise ImexConfigError(
                f"{source}: line {number}: expected KEY=value, got {short(line)}; "
                "comment it out with '#' or add '='"
            )
        if not _KEY_RE.match(key):
            raise ImexConfigError(
                f"{source}: line {number}: invalid key {short(key)}; keys are upper-case letters, "
                "digits and '_' (e.g. SERVER_PORT)"
            )
        if key in values:
            raise ImexConfigError(
                f"{source}: line {number}: {key} is already set on line {first_line[key]}; keep one of them"
            )
        values[key] = value.strip()
        first_line[key] = number
    return values


def _port(values: Mapping[str, str], key: str, default: int, source: str) -> int:
    raw = values.get(key, "")
    if raw == "":
        return default
    try:
        port = int(raw, 10)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise ImexConfigError(f"{source}: {key}={raw!r} must be a port number from 1 to 65535")
    return port


def _flag(values: Mapping[str, str], key: str, default: bool, source: str) -> bool:
    raw = values.get(key, "")
    if raw == "":
        return default
    if raw not in ("0", "1"):
        raise ImexConfigError(f"{source}: {key}={raw!r} must be 0 or 1")
    return raw == "1"


def _ip(values: Mapping[str, str], key: str, source: str) -> str:
    raw = values.get(key, "")
    if raw:
        try:
            ipaddress.ip_address(raw)
        except ValueError:
            raise ImexConfigError(
                f"{source}: {key}={raw!r} is not an IP address; set an IP or leave it empty"
            ) from None
    return raw


@dataclass(frozen=True)
class ImexConfig:
    """The settings of an IMEX config that the daemon, the ctl and the stand-ins act on."""

    source: str
    server_port: int
    node_config_file: str
    bind_ip: str
    cmd_enabled: bool
    cmd_bind_ip: str
    cmd_port: int
    cmd_unix_path: str
    log_file_name: str
    log_append: bool
    values: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_values(cls, values: Mapping[str, str], source: str = "IMEX config") -> ImexConfig:
        """Validate parsed values; missing keys take nvidia-imex's defaults."""
        unix_path = values.get(KEY_CMD_UNIX_DOMAIN_PATH, "")
        if unix_path and not os.path.isabs(unix_path):
            raise ImexConfigError(
                f"{source}: {KEY_CMD_UNIX_DOMAIN_PATH}={unix_path!r} must be an absolute path"
            )
        return cls(
            source=source,
            server_port=_port(values, KEY_SERVER_PORT, IMEX_SERVER_PORT, source),
            node_config_file=values.get(KEY_NODE_CONFIG_FILE, "") or DEFAULT_IMEX_NODES_CONFIG,
            bind_ip=_ip(values, KEY_BIND_INTERFACE_IP, source),
            cmd_enabled=_flag(values, KEY_CMD_ENABLED, True, source),
            cmd_bind_ip=_ip(values, KEY_CMD_BIND_INTERFACE_IP, source),
            cmd_port=_port(values, KEY_CMD_PORT, IMEX_CMD_PORT, source),
            cmd_unix_path=unix_path,
            log_file_name=values.get(KEY_LOG_FILE_NAME, ""),
            log_append=_flag(values, KEY_LOG_APPEND_TO_LOG, False, source),
            values=dict(values),
        )


def read_config(path: str | os.PathLike[str]) -> ImexConfig:
    """Read, parse and validate an IMEX config file."""
    text = _read_text(path, "IMEX config file", "pass the file nvidia-imex runs with (-c)")
    return ImexConfig.from_values(parse_config(text, source=str(path)), source=str(path))


def _read_text(path: str | os.PathLike[str], what: str, fix: str) -> str:
    try:
        data = read_bounded(path, _MAX_CONFIG_BYTES)
    except OSError as e:
        raise ImexConfigError(f"cannot read {what} {path}: {e.strerror or e}; {fix}") from None
    except TooLarge:
        raise ImexConfigError(
            f"{what} {path} is larger than {_MAX_CONFIG_BYTES} bytes; is it the right file?"
        ) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ImexConfigError(f"{what} {path} is not UTF-8 text; is it the right file?") from None


# --- nodes config ----------------------------------------------------------------------


def _check_host_entry(host: str) -> None:
    if not isinstance(host, str) or not host or any(ch.isspace() for ch in host) or "#" in host:
        raise ImexConfigError(
            f"nodes config entry {host!r} is not a host: use one IP address or host name, "
            "without spaces or '#'"
        )


def render_nodes_config(hosts: Iterable[str]) -> str:
    """One host (IP or name) per line, each newline-terminated, in the given order."""
    seen: set[str] = set()
    lines = []
    for host in hosts:
        _check_host_entry(host)
        if host in seen:
            raise ImexConfigError(f"nodes config entry {host!r} is listed twice; list every peer once")
        seen.add(host)
        lines.append(f"{host}\n")
    return "".join(lines)


def dns_nodes_config(cd_uid: str, max_nodes: int) -> str:
    """The static DNS-name nodes config of a domain: its names for slots 0 .. max_nodes-1
    (compute-domain-daemon-<hash of cd_uid>-0000 ...)."""
    if isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or not 1 <= max_nodes <= 9999:
        raise ImexConfigError(
            f"{constants.ENV_MAX_NODES}={max_nodes!r}: must be an integer from 1 to 9999 "
            f"(the controller's default is {DEFAULT_MAX_NODES_PER_IMEX_DOMAIN})"
        )
    if not isinstance(cd_uid, str) or not cd_uid:
        raise ImexConfigError(f"{constants.ENV_CD_UUID} is empty: the nodes config names are derived from "
                              "the ComputeDomain's UID; check the daemon claim's CDI edits")
    return render_nodes_config(dns_names(cd_uid, max_nodes))


def parse_nodes_config(text: str) -> list[str]:
    """Hosts of a nodes config: one per line; blank lines and '#' comments skipped.

    Text after the first space or tab of a line is ignored (an optional per-peer field).
    """
    hosts = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        hosts.append(line.split()[0])
    return hosts


def read_nodes_config(path: str | os.PathLike[str]) -> list[str]:
    """Read and parse a nodes config file."""
    return parse_nodes_config(
        _read_text(path, "IMEX nodes config", f"check {KEY_NODE_CONFIG_FILE} in the IMEX config")
    )


# --- writing ---------------------------------------------------------------------------


def write_file_atomic(path: str | os.PathLike[str], text: str, mode: int = 0o644) -> None:
    """Write `text` to `path` through a temp file in the same directory (fsync + rename).

    Readers see the old or the new file, never a partial one. Not for bind-mounted single
    files such as /etc/hosts (see `cdriver.imex.hosts.rewrite_hosts_file`).
    """
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    except OSError as e:
        raise ImexConfigError(f"cannot write {target}: {e.strerror or e}; check the directory") from None
    try:
        atomic_write(target, text, mode=mode)
    except OSError as e:
        raise ImexConfigError(f"cannot write {target}: {e.strerror or e}; the previous file is unchanged") from None
