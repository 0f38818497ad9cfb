"""The CMA emulator's control-plane listings and its opt-in unique names (what provisioning tests rely on)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from rma_shell.testing.claude import BETA, DEFAULT_API_KEY, CMAEmulator

HEADERS = {"x-api-key": DEFAULT_API_KEY, "anthropic-version": "2023-06-01", "anthropic-beta": BETA}


def _call(emu: CMAEmulator, method: str, path: str, **kw: Any) -> httpx.Response:
    return httpx.request(method, f"{emu.base_url}{path}", headers=HEADERS, timeout=10, **kw)


def _create(emu: CMAEmulator, kind: str, name: str) -> httpx.Response:
    body: dict[str, Any] = {"name": name}
    if kind == "agents":
        body["model"] = "claude-sonnet-4-6"
    return _call(emu, "POST", f"/v1/{kind}", json=body)


def _all(emu: CMAEmulator, kind: str, limit: int, include_archived: bool) -> tuple[list[str], int]:
    names: list[str] = []
    pages = 0
    params: dict[str, Any] = {"limit": limit, "include_archived": "true" if include_archived else "false"}
    while True:
        page = _call(emu, "GET", f"/v1/{kind}", params=params).json()
        pages += 1
        names.extend(item["name"] for item in page["data"])
        if not page["next_page"]:
            return names, pages
        params["page"] = page["next_page"]


@pytest.mark.parametrize("kind", ["agents", "environments"])
def test_duplicate_names_are_accepted_by_default(kind: str) -> None:
    with CMAEmulator() as emu:
        assert _create(emu, kind, "same").status_code == 200
        assert _create(emu, kind, "same").status_code == 200


@pytest.mark.parametrize("kind", ["agents", "environments"])
def test_unique_names_answers_409_conflict_for_a_live_or_archived_name(kind: str) -> None:
    with CMAEmulator(unique_names=True) as emu:
        first = _create(emu, kind, "taken").json()
        again = _create(emu, kind, "taken")
        assert again.status_code == 409
        assert again.json()["error"]["type"] == "conflict_error"
        assert _call(emu, "POST", f"/v1/{kind}/{first['id']}/archive").status_code == 200
        assert _create(emu, kind, "taken").status_code == 409  # an archived name stays reserved
        assert _create(emu, kind, "other").status_code == 200


@pytest.mark.parametrize("kind", ["agents", "environments"])
def test_listings_page_by_limit_newest_first_and_hide_archived_unless_asked(kind: str) -> None:
    with CMAEmulator() as emu:
        ids = [_create(emu, kind, f"n{i}").json()["id"] for i in range(5)]
        _call(emu, "POST", f"/v1/{kind}/{ids[1]}/archive")
        live, pages = _all(emu, kind, limit=2, include_archived=False)
        assert live == ["n4", "n3", "n2", "n0"] and pages == 2
        every, pages = _all(emu, kind, limit=2, include_archived=True)
        assert every == ["n4", "n3", "n2", "n1", "n0"] and pages == 3
