"""``rma provision | tag | resolve | prune | teardown`` against the emulators, through ``main``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rma_shell.cli import main
from rma_shell.testing import CMAEmulator
from rma_shell.testing import agentcore as agentcore
from rma_shell.testing.agentcore import AgentCoreEmulator

KEY = "sk-ant-cli-test-0f3e"
ROLE = "arn:aws:iam::123456789012:role/harness-role"


def write(tmp: Path, name: str, value: Any) -> str:
    path = tmp / name
    path.write_text(json.dumps(value))
    return str(path)


def agent_spec(tmp: Path, prompt: str = "Answer support questions.", name: str = "agent.json") -> str:
    return write(
        tmp,
        name,
        {
            "name": "support",
            "system_prompt": prompt,
            "model_config": "claude-sonnet-4-6",
            "tools": [{"name": "lookup", "description": "Find", "input_schema": {"type": "object"}}],
        },
    )


def call(capsys: pytest.CaptureFixture[str], argv: list[str], env: dict[str, str]) -> tuple[int, Any, str]:
    code = main(argv, env=env)
    out, err = capsys.readouterr()
    try:
        parsed = json.loads(out) if out.strip() else None
    except ValueError:
        parsed = out
    return code, parsed, err


class TestClaude:
    def test_provision_reuse_tag_resolve_prune_teardown(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        with CMAEmulator([], api_key=KEY) as emu:
            env = {"ANTHROPIC_API_KEY": KEY}
            common = [
                "--provider",
                "claude",
                "--store",
                str(tmp_path / "store.sqlite3"),
                "--base-url",
                emu.base_url,
            ]
            environment = write(
                tmp_path,
                "env.json",
                {"name": "sandbox", "config": {"type": "cloud", "networking": {"type": "unrestricted"}}},
            )
            code, first, err = call(
                capsys,
                [
                    "provision",
                    *common,
                    "--agent",
                    agent_spec(tmp_path),
                    "--environment",
                    environment,
                    "--tag",
                    "stable",
                ],
                env,
            )
            assert code == 0, err
            assert first["agent"]["name"].startswith("support_") and first["environment"]["name"].startswith(
                "sandbox_"
            )
            assert first["agent"]["provisioned"] == first["environment"]["provisioned"] == "created"
            assert err.splitlines() == [
                f"rma provision: agent {first['agent']['name']}: created",
                f"rma provision: environment {first['environment']['name']}: created",
            ]
            code, again, err = call(
                capsys,
                ["provision", *common, "--agent", agent_spec(tmp_path), "--environment", environment],
                env,
            )
            reused = {part: {**first[part], "provisioned": "reused"} for part in ("agent", "environment")}
            assert code == 0 and again == reused
            assert err.splitlines() == [
                f"rma provision: agent {first['agent']['name']}: reused",
                f"rma provision: environment {first['environment']['name']}: reused",
            ]
            code, quiet, err = call(
                capsys,
                [
                    "provision",
                    *common,
                    "--agent",
                    agent_spec(tmp_path),
                    "--environment",
                    environment,
                    "--json",
                ],
                env,
            )
            assert code == 0 and quiet == reused and err == ""  # --json: the result only
            creates = [r for r in emu.requests if r.method == "POST" and r.path == "/v1/agents"]
            assert len(creates) == 1  # reused through the SQLite store
            code, resolved, _ = call(capsys, ["resolve", *common, "support:stable"], env)
            assert code == 0 and resolved["agent_id"] == first["agent"]["agent_id"]
            code, _, err = call(capsys, ["resolve", *common, "support:canary"], env)
            assert code == 1 and "unknown_tag" in err
            # A second version, then prune keeping one: the tagged first version survives.
            code, second, _ = call(
                capsys,
                [
                    "provision",
                    *common,
                    "--agent",
                    agent_spec(tmp_path, "v2", "a2.json"),
                    "--environment",
                    environment,
                ],
                env,
            )
            assert code == 0 and second["agent"]["agent_id"] != first["agent"]["agent_id"]
            code, pruned, _ = call(
                capsys, ["prune", *common, "--kind", "agent", "support", "--keep", "1"], env
            )
            assert (
                code == 0
                and pruned["archived"] == []
                and set(pruned["kept"]) == {first["agent"]["name"], second["agent"]["name"]}
            )
            code, _, err = call(capsys, ["teardown", *common, "--kind", "agent", "support:stable"], env)
            assert code == 0, err
            code, _, err = call(capsys, ["resolve", *common, "support:stable"], env)
            assert code == 1 and "untracked_digest" in err
            assert KEY not in err

    def test_usage_errors_exit_2(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        env = {"ANTHROPIC_API_KEY": KEY}
        store = ["--store", str(tmp_path / "s.sqlite3")]
        assert (
            call(
                capsys,
                ["provision", "--provider", "claude", *store, "--agent", str(tmp_path / "missing.json")],
                env,
            )[0]
            == 2
        )
        assert call(capsys, ["prune", "--provider", "claude", *store, "support", "--keep", "0"], env)[0] == 2
        assert (
            call(capsys, ["tag", "--provider", "claude", "--kind", "harness", *store, "b", "t", "d"], env)[0]
            == 2
        )
        assert call(capsys, ["provision", "--provider", "nope", "--agent", "x"], env)[0] == 2

    def test_a_bad_spec_is_an_error_naming_the_field(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        bad = write(
            tmp_path,
            "bad.json",
            {
                "name": "s",
                "model_config": "m",
                "tools": [{"name": "x", "description": "d", "input_schema": 5}],
            },
        )
        code, _, err = call(
            capsys,
            ["provision", "--provider", "claude", "--store", ":memory:", "--agent", bad],
            {"ANTHROPIC_API_KEY": KEY},
        )
        assert code == 1 and "tools[0].input_schema" in err


class TestAgentCore:
    def test_provision_tag_resolve_teardown(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        with AgentCoreEmulator(ready_after_s=0.05, endpoint_ready_after_s=0.05, delete_after_s=0.05) as emu:
            env = emu.credentials_env()
            common = [
                "--provider",
                "agentcore",
                "--store",
                str(tmp_path / "s.json"),
                "--data-url",
                emu.base_url,
                "--control-url",
                emu.base_url,
            ]
            argv = [
                "provision",
                *common,
                "--agent",
                agent_spec(tmp_path),
                "--execution-role-arn",
                ROLE,
                "--timeout",
                "10",
                "--tag",
                "stable",
            ]
            code, handle, err = call(capsys, argv, env)
            assert code == 0, err
            assert handle["provisioned"] == "created"
            assert err.splitlines() == [f"rma provision: harness {handle['name']}: created"]
            assert (
                handle["harness_id"].startswith("support_")
                and emu.control.harness(handle["harness_id"]).status == "READY"
            )
            code, resolved, _ = call(capsys, ["resolve", *common, "support:stable"], env)
            assert code == 0 and resolved["harness_arn"] == handle["harness_arn"]
            code, _, err = call(capsys, ["teardown", *common, "support:stable"], env)
            assert code == 0, err
            assert emu.control.count("DeleteHarness") == 1

    def test_a_403_echoing_the_authorization_header_never_prints_the_access_key_id(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        echo = agentcore.error_once(
            403,
            "InvalidSignatureException",
            "The request signature we calculated does not match.",
            echo_authorization=True,
            operation="CreateHarness",
        )
        with AgentCoreEmulator(faults=[echo]) as emu:
            argv = [
                "provision",
                "--provider",
                "agentcore",
                "--store",
                str(tmp_path / "s.json"),
                "--data-url",
                emu.base_url,
                "--control-url",
                emu.base_url,
                "--agent",
                agent_spec(tmp_path),
                "--execution-role-arn",
                ROLE,
            ]
            code, out, err = call(capsys, argv, emu.credentials_env())
            key_id = emu.access_key_id
        assert code != 0 and "InvalidSignatureException" in err + str(out)
        assert "Credential=***" in err + str(out)  # the echo is there, masked
        assert key_id not in err and key_id not in str(out)

    def test_a_missing_role_is_a_usage_error(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        code, _, err = call(
            capsys,
            ["provision", "--provider", "agentcore", "--store", ":memory:", "--agent", agent_spec(tmp_path)],
            {},
        )
        assert code == 2 and "--execution-role-arn" in err


def test_the_default_store_in_the_users_home_is_named_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --store or $RMA_STORE, the store written is the home default: said, never silent."""
    with CMAEmulator([], api_key=KEY) as emu:
        env = {"ANTHROPIC_API_KEY": KEY, "XDG_STATE_HOME": str(tmp_path / "state")}
        argv = [
            "provision",
            "--provider",
            "claude",
            "--base-url",
            emu.base_url,
            "--agent",
            agent_spec(tmp_path),
        ]
        code, _, err = call(capsys, argv, env)
        assert code == 0, err
        where = tmp_path / "state" / "rma" / "rma.sqlite3"
        assert err.splitlines()[0] == (
            f"rma provision: store {where} (the default; --store or $RMA_STORE for another)"
        )
        assert where.exists()
        code, _, err = call(capsys, [*argv, "--store", str(tmp_path / "s.sqlite3")], env)
        assert code == 0 and "store" not in err.splitlines()[0]
