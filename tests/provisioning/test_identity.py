"""Canonical JSON, pinned digests, name policies, tag refs (V-2, V-4, V-7…V-9, V-16…V-20, V-33, B-49, B-50).

The digests below are pinned as literal hex: a change to canonicalisation or to what an
identity document holds changes every provider-side name, so it must fail here first and be
made on purpose (bump the identity version and say so in docs/decisions.md).
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from returns.result import Failure, Success

from rma.provisioning import (
    AGENTCORE_HARNESS_NAMES,
    CLAUDE_NAMES,
    AgentSpec,
    EnvironmentSpec,
    InvalidRef,
    NamePolicy,
    NotJSON,
    TagRef,
    agent_name,
    canonical_json,
    combined_digest,
    compose_name,
    digest_of,
    digest_of_name,
    environment_name,
    harness_name,
    parse_ref,
    preserves_base,
    short_digest,
)
from rma.provisioning.identity import agent_identity, environment_identity, json_value, name_stem

HARNESS_NAME = re.compile(r"[a-zA-Z][a-zA-Z0-9_]{0,39}")

CONFORMANCE = AgentSpec.create(
    "conformance-agent",
    system_prompt="You are a helpful assistant.",
    model_config={"bedrockModelConfig": {"modelId": "anthropic.claude-sonnet-4-6"}},
).unwrap()
SESSION_STORAGE = EnvironmentSpec.coerce(
    {
        "agentCoreRuntimeEnvironment": {
            "filesystemConfigurations": [{"sessionStorage": {"mountPath": "/mnt/data"}}]
        }
    }
).unwrap()
SUPPORT_BOT = AgentSpec.create(
    "support_bot",
    system_prompt="You triage support tickets.",
    tools=[
        {
            "name": "lookup_customer",
            "description": "Fetch a customer row",
            "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
        },
        {
            "name": "finish",
            "description": "Report the result",
            "input_schema": {"type": "object", "properties": {"summary": {"type": "string"}}},
        },
    ],
    terminal_tool="finish",
    model_config="claude-sonnet-4-6",
).unwrap()
DATA_ENV = EnvironmentSpec.create(
    "data_analysis",
    config={"type": "cloud", "networking": {"type": "limited", "allowed_hosts": ["pypi.org"]}},
    runtimes=[{"lang": "elixir", "version": "1.20.2"}, {"lang": "erlang", "version": "28.1"}],
).unwrap()

# --- canonical JSON -------------------------------------------------------------------------


def test_canonical_json_sorts_keys_drops_whitespace_keeps_utf8_and_folds_integral_floats() -> None:
    value = {"b": 1, "a": [1.0, "é", None, True], "c": {"y": 2.5, "x": -0.0}}
    assert canonical_json(value) == Success('{"a":[1,"é",null,true],"b":1,"c":{"x":0,"y":2.5}}')


def test_canonical_json_keeps_large_and_fractional_numbers_exact() -> None:
    assert canonical_json([2**64, 1e300, 0.1, 2.0**53, -1.5e-7]) == Success(
        "[18446744073709551616,1e+300,0.1,9007199254740992.0,-1.5e-07]"
    )


def test_canonical_json_escapes_only_what_json_requires() -> None:
    assert canonical_json({"k": 'q"\\\n\t\x01 ☃ 😀'}) == Success('{"k":"q\\"\\\\\\n\\t\\u0001 ☃ 😀"}')


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (float("nan"), ""),
        ({"a": [1, float("inf")]}, "a[1]"),
        ({"a": {"b": -float("inf")}}, "a.b"),
        ({"a": {1: "x"}}, "a"),
        ({"a": {"x", "y"}}, "a"),
        ({"a": b"bytes"}, "a"),
        ({"a": object()}, "a"),
        ({"lone": "\udc00"}, "lone"),
        ({"\ud800": 1}, ""),
    ],
)
def test_values_json_cannot_say_are_refused_with_a_named_error(value: object, path: str) -> None:
    result = canonical_json(value)
    assert isinstance(result, Failure)
    error = result.failure()
    assert isinstance(error, NotJSON)
    assert error.kind == "not_json"
    assert error.path == path


def test_cyclic_or_absurdly_deep_values_are_refused_not_crashed() -> None:
    cyclic: list[object] = []
    cyclic.append(cyclic)
    assert isinstance(canonical_json(cyclic), Failure)
    deep: object = 1
    for _ in range(2000):
        deep = [deep]
    assert isinstance(canonical_json(deep), Failure)


def test_V9_integer_keys_are_refused_rather_than_merged_with_string_keys() -> None:
    assert isinstance(digest_of({1: "x"}), Failure)
    assert isinstance(digest_of({"1": "x"}), Success)


def test_key_order_whitespace_and_tuples_do_not_change_a_digest() -> None:
    a = {"x": [1, 2, {"p": 1, "q": 2}], "y": "z"}
    b = json.loads('{\n  "y" : "z",\n  "x" : [ 1, 2, { "q": 2, "p": 1 } ]\n}')
    c = {"y": "z", "x": (1, 2.0, {"q": 2, "p": 1})}
    assert digest_of(a) == digest_of(b) == digest_of(c)


def test_json_value_copies_without_normalising_numbers_or_order() -> None:
    value = {"z": (1.0, 2), "a": None}
    assert json_value(value) == Success({"z": [1.0, 2], "a": None})
    assert list(json_value(value).unwrap()) == ["z", "a"]


# --- digests --------------------------------------------------------------------------------


def test_V2_the_agent_identity_document_is_pinned_byte_for_byte() -> None:
    text = (
        '{"identity":"rma.agent/1","model_config":{"bedrockModelConfig":{"modelId":"anthropic.claude-sonnet-4-6"}},'
        '"system_prompt":"You are a helpful assistant.","terminal_tool":null,"tools":[]}'
    )
    assert canonical_json(agent_identity(CONFORMANCE)) == Success(text)
    assert CONFORMANCE.digest == hashlib.sha256(text.encode()).hexdigest()


def test_V2_V4_digests_are_pinned() -> None:
    assert CONFORMANCE.digest == "5a927a9ae9403c78cb95359a055a79bf970201e7ede368d445b73e4861e98b0e"
    assert SUPPORT_BOT.digest == "baee78004949ac5a44eb39f54022eb96e0c16045bea225092fda22e028eee483"
    assert SESSION_STORAGE.digest == "3a6a9ed071e32dca375c558f68158ed437c08006a41e8568c2cf20d60a4d954b"
    assert DATA_ENV.digest == "31a3e5ea6eca61d4c6a47e27e877e3b940784c1f20e3e52e98cdb99076188a98"
    assert EnvironmentSpec.create().unwrap().digest == (
        "ea8e4c8035241d81c2462aa1d9cb410498dbbcdb47840691427e0cb069378f79"
    )
    assert combined_digest(CONFORMANCE, SESSION_STORAGE) == (
        "832863dc674fd3d06ff0b8a6915b22bcb086d049a1e4b125ed50bf5428202667"
    )
    assert canonical_json(environment_identity(SESSION_STORAGE)) == Success(
        '{"config":{"agentCoreRuntimeEnvironment":{"filesystemConfigurations":[{"sessionStorage":'
        '{"mountPath":"/mnt/data"}}]}},"identity":"rma.environment/1","runtimes":[]}'
    )


def test_V2_the_name_is_not_part_of_an_agents_identity() -> None:
    renamed = AgentSpec.coerce({**SUPPORT_BOT.to_json(), "name": "other"}).unwrap()
    assert renamed.digest == SUPPORT_BOT.digest


@pytest.mark.parametrize(
    "change",
    [
        {"system_prompt": "You triage tickets."},
        {"system_prompt": None},
        {"terminal_tool": None},
        {"model_config": "claude-opus-4-7"},
        {"model_config": {"model": "claude-sonnet-4-6"}},
        {"tools": [], "terminal_tool": None},
    ],
)
def test_V2_any_content_change_changes_the_agent_digest(change: dict[str, object]) -> None:
    changed = AgentSpec.coerce({**SUPPORT_BOT.to_json(), **change}).unwrap()
    assert changed.digest != SUPPORT_BOT.digest


def test_V2_tool_order_is_part_of_the_identity() -> None:
    swapped = AgentSpec.coerce(
        {**SUPPORT_BOT.to_json(), "tools": list(reversed(SUPPORT_BOT.to_json()["tools"]))}
    )
    assert swapped.unwrap().digest != SUPPORT_BOT.digest


def test_V4_environment_digest_covers_config_and_runtimes_but_not_the_name() -> None:
    base = DATA_ENV.to_json()
    assert EnvironmentSpec.coerce({**base, "name": "elsewhere"}).unwrap().digest == DATA_ENV.digest
    assert EnvironmentSpec.coerce({**base, "name": None}).unwrap().digest == DATA_ENV.digest
    assert EnvironmentSpec.coerce({**base, "runtimes": []}).unwrap().digest != DATA_ENV.digest
    newer = [{"lang": "elixir", "version": "1.20.3"}, {"lang": "erlang", "version": "28.1"}]
    assert EnvironmentSpec.coerce({**base, "runtimes": newer}).unwrap().digest != DATA_ENV.digest
    assert EnvironmentSpec.coerce({**base, "config": {"type": "cloud"}}).unwrap().digest != DATA_ENV.digest


def test_B50_no_environment_and_an_empty_environment_are_the_agents_own_digest() -> None:
    assert combined_digest(CONFORMANCE, None) == CONFORMANCE.digest
    assert combined_digest(CONFORMANCE, EnvironmentSpec.create("named").unwrap()) == CONFORMANCE.digest
    assert combined_digest(CONFORMANCE, SESSION_STORAGE) not in (CONFORMANCE.digest, SESSION_STORAGE.digest)


def test_B50_the_environment_name_never_changes_the_combined_digest() -> None:
    named = EnvironmentSpec.coerce({**SESSION_STORAGE.to_json(), "name": "storage"}).unwrap()
    assert combined_digest(CONFORMANCE, named) == combined_digest(CONFORMANCE, SESSION_STORAGE)


def test_V7_short_digests_are_the_first_eight_lowercase_hex() -> None:
    assert short_digest(CONFORMANCE.digest) == "5a927a9a"


def test_V8_decision_names_differ_from_the_erlang_golden_vectors() -> None:
    # B-59's reference goldens come from Erlang term hashing; rma hashes canonical JSON
    # (docs/decisions.md, V-8): same shape of name, different digest, a one-time re-provision.
    assert harness_name(CONFORMANCE) == "conformance_agent_5a927a9a"
    assert harness_name(CONFORMANCE, SESSION_STORAGE) == "conformance_agent_832863dc"
    assert harness_name(CONFORMANCE) != "conformance_agent_14dcbc88"
    assert harness_name(CONFORMANCE, SESSION_STORAGE) != "conformance_agent_ef46e8e2"


# --- names ----------------------------------------------------------------------------------


def test_B4_name_vectors_of_the_reference_hold_for_the_composition_itself() -> None:
    assert compose_name("rma-live-bedrock-harness", "38ca3140", AGENTCORE_HARNESS_NAMES) == (
        "rma_live_bedrock_harness_38ca3140"
    )
    assert compose_name("rma-v02-rtc", "38ca3140", CLAUDE_NAMES) == "rma-v02-rtc_38ca3140"


def test_V17_a_31_byte_base_is_kept_and_a_32_byte_base_is_cut_and_hashed() -> None:
    kept = compose_name("a" * 31, "38ca3140", AGENTCORE_HARNESS_NAMES)
    cut = compose_name("a" * 32, "38ca3140", AGENTCORE_HARNESS_NAMES)
    assert kept == "a" * 31 + "_38ca3140"
    marker = hashlib.sha256(b"a" * 32).hexdigest()[:6]
    assert cut == "a" * 24 + f"_{marker}_38ca3140"
    assert len(kept) == len(cut) == 40


def test_V16_the_smallest_policy_fits_digest_hash_and_separators() -> None:
    tiny = NamePolicy(provider="tiny", max_bytes=17, charset="A-Za-z0-9_", leading_letter=True)
    name = compose_name("a" * 40, "38ca3140", tiny)
    assert len(name) == 17
    assert name.endswith("_38ca3140")
    with pytest.raises(ValueError, match="minimum is 17"):
        NamePolicy(provider="too_small", max_bytes=16)


def test_V17_the_digest_is_never_truncated_and_a_full_digest_is_shortened() -> None:
    name = compose_name("x" * 100, CONFORMANCE.digest, AGENTCORE_HARNESS_NAMES)
    assert name.endswith("_5a927a9a")
    with pytest.raises(ValueError):
        compose_name("x", "5A927A9A", AGENTCORE_HARNESS_NAMES)
    with pytest.raises(ValueError):
        compose_name("x", "5a92", AGENTCORE_HARNESS_NAMES)


def test_V17_distinct_long_bases_stay_distinct() -> None:
    one = compose_name("billing_support_agent_for_region_one", "38ca3140", AGENTCORE_HARNESS_NAMES)
    two = compose_name("billing_support_agent_for_region_two", "38ca3140", AGENTCORE_HARNESS_NAMES)
    assert one != two
    assert one[:24] == two[:24]


def test_V18_better_the_truncation_hash_is_over_the_original_base() -> None:
    hyphen = compose_name("a-" * 20, "38ca3140", AGENTCORE_HARNESS_NAMES)
    underscore = compose_name("a_" * 20, "38ca3140", AGENTCORE_HARNESS_NAMES)
    assert hyphen != underscore


def test_short_bases_differing_only_by_hyphen_and_underscore_share_a_name() -> None:
    # The one collision kept on purpose: billing-support reads as billing_support (B.4).
    assert compose_name("a-b", "38ca3140", AGENTCORE_HARNESS_NAMES) == compose_name(
        "a_b", "38ca3140", AGENTCORE_HARNESS_NAMES
    )


def test_non_ascii_bases_fold_to_ascii_and_keep_a_hash_of_what_was_lost() -> None:
    cafe = compose_name("café-naïve", "38ca3140", AGENTCORE_HARNESS_NAMES)
    assert cafe == f"cafe_naive_{hashlib.sha256('café-naïve'.encode()).hexdigest()[:6]}_38ca3140"
    assert cafe != compose_name("cafe-naive", "38ca3140", AGENTCORE_HARNESS_NAMES)
    japanese = compose_name("日本語", "38ca3140", AGENTCORE_HARNESS_NAMES)
    chinese = compose_name("中文字", "38ca3140", AGENTCORE_HARNESS_NAMES)
    assert japanese != chinese
    for name in (cafe, japanese, chinese):
        assert HARNESS_NAME.fullmatch(name)


def test_B50_a_leading_non_letter_gets_an_a_and_an_empty_base_is_just_a() -> None:
    assert compose_name("", "38ca3140", AGENTCORE_HARNESS_NAMES) == "a_38ca3140"
    digit = compose_name("1st-agent", "38ca3140", AGENTCORE_HARNESS_NAMES)
    assert digit.startswith("a1st_agent_")
    assert digit != compose_name("a1st-agent", "38ca3140", AGENTCORE_HARNESS_NAMES)


def test_V17_a_multibyte_base_is_cut_on_a_character_boundary() -> None:
    base = "日本語" * 40  # 360 bytes
    name = compose_name(base, "38ca3140", CLAUDE_NAMES)
    raw = name.encode("utf-8")
    assert len(raw) <= 256
    assert raw.decode("utf-8") == name
    assert name.startswith("日本語")
    assert name.endswith(f"_{hashlib.sha256(base.encode()).hexdigest()[:6]}_38ca3140")
    emoji = compose_name("😀" * 100, "38ca3140", CLAUDE_NAMES)
    assert len(emoji.encode()) <= 256
    assert emoji.startswith("😀" * 60)


def test_V18_claude_names_keep_the_base_as_given() -> None:
    assert compose_name("Billing Support – EU", "38ca3140", CLAUDE_NAMES) == "Billing Support – EU_38ca3140"
    assert agent_name(SUPPORT_BOT) == "support_bot_baee7800"
    assert agent_name(SUPPORT_BOT, base="triage") == "triage_baee7800"
    assert environment_name(DATA_ENV, "data_analysis") == "data_analysis_31a3e5ea"


def test_V20_a_247_byte_base_fits_a_claude_name_and_248_no_longer_preserves_it() -> None:
    fits = compose_name("b" * 247, "38ca3140", CLAUDE_NAMES)
    assert len(fits) == 256
    assert preserves_base(fits, "b" * 247)
    cut = compose_name("b" * 248, "38ca3140", CLAUDE_NAMES)
    assert len(cut) <= 256
    assert not preserves_base(cut, "b" * 248)


def test_V19_preserves_base_is_a_prefix_test_with_the_separator() -> None:
    assert preserves_base("data_1a2b3c4d", "data")
    assert not preserves_base("database_1a2b3c4d", "data")


def test_V36_digest_of_name_matches_only_names_composed_from_that_base() -> None:
    policy = CLAUDE_NAMES
    assert digest_of_name("data_1a2b3c4d", "data", policy) == "1a2b3c4d"
    assert digest_of_name("data_analysis_1a2b3c4d", "data", policy) is None
    assert digest_of_name("d_d_1a2b3c4d", "d", policy) is None
    assert digest_of_name("data_1A2B3C4D", "data", policy) is None
    assert digest_of_name("data_1a2b3c4d5", "data", policy) is None
    long_base = "x" * 300
    assert digest_of_name(compose_name(long_base, "1a2b3c4d", policy), long_base, policy) == "1a2b3c4d"
    name = harness_name(CONFORMANCE, prefix="rma")
    assert digest_of_name(name, "rma_conformance-agent", AGENTCORE_HARNESS_NAMES) == "5a927a9a"


def test_name_stem_is_the_name_without_its_digest() -> None:
    assert name_stem("rma-live", AGENTCORE_HARNESS_NAMES) == "rma_live"
    assert compose_name("rma-live", "38ca3140", AGENTCORE_HARNESS_NAMES) == "rma_live_38ca3140"


def test_B49_B50_harness_names() -> None:
    other = AgentSpec.coerce({**CONFORMANCE.to_json(), "name": "other-agent"}).unwrap()
    assert harness_name(CONFORMANCE) != harness_name(other)
    assert harness_name(CONFORMANCE, prefix="rma") == "rma_conformance_agent_5a927a9a"
    assert harness_name(CONFORMANCE, None) == harness_name(CONFORMANCE)
    limited = EnvironmentSpec.create(config={"networking": {"type": "limited"}}).unwrap()
    assert harness_name(CONFORMANCE, limited) != harness_name(CONFORMANCE, SESSION_STORAGE)
    long_prefix = harness_name(CONFORMANCE, SESSION_STORAGE, prefix="a-very-long-team-prefix-for-tests")
    for name in (harness_name(CONFORMANCE), harness_name(CONFORMANCE, limited), long_prefix):
        assert HARNESS_NAME.fullmatch(name)
        assert AGENTCORE_HARNESS_NAMES.accepts(name)


def test_policies_accept_what_they_compose_and_refuse_the_rest() -> None:
    assert AGENTCORE_HARNESS_NAMES.accepts("abc_12345678")
    assert not AGENTCORE_HARNESS_NAMES.accepts("1abc")
    assert not AGENTCORE_HARNESS_NAMES.accepts("a-b")
    assert not AGENTCORE_HARNESS_NAMES.accepts("a" * 41)
    assert CLAUDE_NAMES.accepts("any – thing")
    assert not CLAUDE_NAMES.accepts("")
    assert not CLAUDE_NAMES.accepts("é" * 129)


# --- tag references -------------------------------------------------------------------------


def test_V33_refs_split_on_the_first_colon_so_tags_may_hold_colons() -> None:
    assert parse_ref("data_analysis:prod") == Success(TagRef(base="data_analysis", tag="prod"))
    assert parse_ref("data:release:2026-05") == Success(TagRef(base="data", tag="release:2026-05"))
    assert str(parse_ref("a:b").unwrap()) == "a:b"


@pytest.mark.parametrize(
    "ref", ["no-colon", ":prod", "base:", "base:has space", "ba\nse:prod", None, "b:" + "t" * 129]
)
def test_V33_better_a_bad_ref_is_a_value_not_a_raise(ref: object) -> None:
    result = parse_ref(ref)
    assert isinstance(result, Failure)
    assert isinstance(result.failure(), InvalidRef)
    assert result.failure().kind == "invalid_ref"
