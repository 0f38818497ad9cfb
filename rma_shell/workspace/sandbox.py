"""The OS sandbox bash runs in: bubblewrap (``bwrap``) where the machine has it.

What this is: the argument vector that starts ``/bin/bash`` for the workspace toolset.
With bubblewrap (``Sandbox.BWRAP``): every namespace unshared (``--unshare-all``: no network
unless ``network=True`` re-shares it, a private PID namespace so the shell's processes die
with it), ``--die-with-parent`` (the kernel kills the sandbox when the worker dies, even by
SIGKILL), ``--new-session`` (no terminal to inject keystrokes into), an empty root with the
system directories bound read-only (``/usr``, ``/etc`` and the ``/bin``, ``/lib`` links),
a fresh ``/proc``, ``/dev`` and private ``/tmp``, and the workspace itself the only writable
place — bound at its own path, so paths read the same inside and out. Home directories,
``/root``, ``/work``, ``/var`` and everything else is not there at all. The environment is
cleared to a few variables (no credentials leak in).

Without bubblewrap the toolset refuses to start bash (``SandboxUnavailable``, with the
install hint) unless the caller opts into ``Sandbox.NONE``: then bash runs as the worker's
own user with the workspace as its directory, in its own process group, killed with the
worker when it dies (a ``PR_SET_PDEATHSIG`` trampoline) — but *nothing* confines what it
reads, writes or reaches. What this is not: a container runtime, a seccomp filter, or a
resource limit on CPU and memory.
"""

from __future__ import annotations

import enum
import os
import shutil
import sys
from collections.abc import Mapping, Sequence


class Sandbox(enum.StrEnum):
    """How bash is confined: ``auto`` (bubblewrap, or refuse), ``bwrap`` (bubblewrap, or
    refuse), ``none`` (no confinement at all — an explicit, documented opt-in)."""

    AUTO = "auto"
    BWRAP = "bwrap"
    NONE = "none"


class SandboxUnavailable(RuntimeError):
    """bash was asked for in a sandbox this machine cannot make."""


INSTALL_HINT = (
    "the workspace's bash runs inside bubblewrap, which is not installed here "
    "(Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap). "
    "To run bash unconfined instead — it can then read, write and reach whatever this process can — "
    "pass sandbox='none' explicitly (docs/workspace.md)."
)

_SYSTEM_RO = ("/usr", "/etc", "/opt")
_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

# Sets PR_SET_PDEATHSIG (1) to SIGKILL, then execs the shell: the unsandboxed shell dies with
# the worker even when the worker is SIGKILLed. If the parent died before prctl, exit at once.
_TRAMPOLINE = (
    "import ctypes,os,sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)\n"
    "os.getppid() == int(sys.argv[1]) or os._exit(1)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def resolve(mode: Sandbox | str) -> Sandbox:
    """The sandbox a workspace will actually use; SandboxUnavailable when ``auto``/``bwrap``
    has no bubblewrap to use (never a silent downgrade to none)."""
    chosen = Sandbox(mode)
    if chosen is Sandbox.NONE:
        return chosen
    if bwrap_path() is None or not sys.platform.startswith("linux"):
        raise SandboxUnavailable(INSTALL_HINT)
    return Sandbox.BWRAP


def base_env(extra: Mapping[str, str] | None, workspace: str) -> dict[str, str]:
    """The shell's whole environment: never the worker's (no API keys or tokens leak in)."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
        "HOME": workspace,
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "TERM": "dumb",
        "PS1": "",
        "PS2": "",
    }
    env.update(extra or {})
    return env


def bash_argv(
    mode: Sandbox,
    workspace: str,
    env: Mapping[str, str],
    *,
    network: bool = False,
    read_only: Sequence[str] = (),
) -> list[str]:
    """The argument vector starting the persistent shell under ``mode``."""
    bash = ["/bin/bash", "--noprofile", "--norc"]
    if mode is Sandbox.NONE:
        return [sys.executable, "-c", _TRAMPOLINE, str(os.getpid()), *bash]
    bwrap = bwrap_path()
    if bwrap is None:
        raise SandboxUnavailable(INSTALL_HINT)
    argv = [bwrap, "--die-with-parent", "--new-session", "--unshare-all"]
    if network:
        argv.append("--share-net")
    for path in _SYSTEM_RO:
        if os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in _LINKS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in read_only:
        real = os.path.realpath(path)
        argv += ["--ro-bind", real, real]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    argv += ["--bind", workspace, workspace, "--chdir", workspace, "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return [*argv, *bash]
