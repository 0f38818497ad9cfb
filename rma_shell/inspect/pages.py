"""The inspector's pages: plain HTML, rendered on the server, every value escaped.

Two pages — the sessions list and one session's timeline — and nothing a browser must run to
read them; ``static/inspect.js`` (a few lines) only swaps in the fresh page when the journal
grows, so a running session is followed live. A pending approval is a form that posts to
the server (with the server's token, so another site cannot post it from the person's
browser); a recording shows no form at all.

What this is not: the reading (``reading``) or the routes (``server``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from html import escape
from urllib.parse import quote

from rma.vocabulary import JSON, Usage
from rma_shell.inspect.reading import Pending, Summary, View
from rma_shell.inspect.timeline import Call, Outcome, Turn

Price = Callable[[str, Usage], str | None]
"""The cost seam: ``(provider, usage) → "$0.0123"`` where the price is known, else None."""


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _when(at: float | None, *, zone: bool = True) -> str:
    if at is None:
        return "—"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S" + (" UTC" if zone else ""))


def _seconds(duration: float | None) -> str:
    if duration is None:
        return ""
    if duration < 1:
        return f"{duration * 1000:.0f} ms"
    if duration < 120:
        return f"{duration:.1f} s"
    return f"{duration / 60:.1f} min"


def _json(value: JSON) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def _session_url(key: str) -> str:
    return "session?key=" + quote(key, safe="")


def _badge(state: str) -> str:
    return f'<span class="state {_e(state.split()[0])}">{_e(state)}</span>'


def _usage(usage: Usage | None, provider: str = "", price: Price | None = None) -> str:
    if usage is None:
        return ""
    parts = [f"{usage.input_tokens:,} in", f"{usage.output_tokens:,} out"]
    if usage.cache_read_input_tokens:
        parts.append(f"{usage.cache_read_input_tokens:,} cache read")
    if usage.cache_creation_input_tokens:
        parts.append(f"{usage.cache_creation_input_tokens:,} cache write")
    cost = price(provider, usage) if price is not None else None
    if cost:
        parts.append(cost)
    return '<span class="usage">' + _e(" · ".join(parts)) + "</span>"


def page(title: str, body: str, *, version: str, poll: str, note: str | None = None) -> str:
    flash = f'<p class="note" role="status">{_e(note)}</p>' if note else ""
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title>
<link rel="stylesheet" href="static/inspect.css">
<script src="static/inspect.js" defer></script>
</head>
<body>
<header><a href="./">rma inspect</a></header>
{flash}
<main id="live" data-version="{_e(version)}" data-poll="{_e(poll)}">
{body}
</main>
</body>
</html>
"""


def sessions_page(name: str, summaries: Sequence[Summary], *, read_only: bool, version: str) -> str:
    rows = []
    for s in summaries:
        detail = s.detail or (f"{s.waiting} call(s) wait" if s.waiting else "")
        rows.append(
            "<tr>"
            f'<td><a href="{_e(_session_url(s.key))}">{_e(s.key)}</a></td>'
            f"<td>{_badge(s.state)}</td>"
            f"<td>{_e(s.provider)}</td>"
            f'<td class="num">{s.turns}</td>'
            f'<td class="num">{s.input_tokens:,} / {s.output_tokens:,}</td>'
            f"<td>{_e(_when(s.started_at, zone=False))}</td>"
            f"<td>{_e(_when(s.updated_at, zone=False))}</td>"
            "</tr>"
        )
        if detail:
            rows.append(f'<tr class="detail"><td></td><td colspan="6">{_e(detail)}</td></tr>')
    table = (
        '<table class="sessions"><thead><tr><th>session</th><th>state</th><th>provider</th>'
        "<th>turns</th><th>tokens in / out</th><th>started (UTC)</th><th>last record (UTC)</th></tr>"
        "</thead><tbody>" + "".join(rows) + "</tbody></table>"
        if rows
        else "<p>No sessions yet: this page follows the journal and lists them as they start.</p>"
    )
    kind = "recording (read-only)" if read_only else "journal"
    body = f'<h1>Sessions</h1><p class="source">{_e(kind)}: <code>{_e(name)}</code></p>{table}'
    return page(f"rma inspect — {name}", body, version=version, poll="version")


def _pending(key: str, p: Pending, token: str, read_only: bool) -> str:
    what = "the host asks to confirm this call" if p.host_confirmation else "this call waits for a person"
    form = (
        '<p class="readonly">A recording is read-only: nothing can be decided here.</p>'
        if read_only
        else (
            '<form method="post" action="session/decide" class="decide">'
            f'<input type="hidden" name="key" value="{_e(key)}">'
            f'<input type="hidden" name="id" value="{_e(p.id)}">'
            f'<input type="hidden" name="token" value="{_e(token)}">'
            f'<label>reason <input type="text" name="reason" placeholder="optional"></label> '
            f'<button type="submit" name="decision" value="allow" class="allow" id="allow-{_e(p.id)}">'
            "Allow</button> "
            f'<button type="submit" name="decision" value="deny" class="deny" id="deny-{_e(p.id)}">'
            "Deny</button>"
            "</form>"
        )
    )
    return (
        f'<section class="pending" id="pending-{_e(p.id)}"><h2>Waiting for approval: '
        f"<code>{_e(p.name)}</code></h2>"
        f'<p>{_e(what)} (<code>{_e(p.id)}</code>). Its input:</p><pre class="json">{_e(_json(p.input))}</pre>'
        f"{form}</section>"
    )


def _call(c: Call) -> str:
    facts = [c.status]
    if c.duration is not None:
        facts.append(_seconds(c.duration))
    if c.attempts > 1:
        facts.append(f"attempt {c.attempts}")
    if c.decision:
        facts.append(f"{c.decision}ed" + (f": {c.reason}" if c.reason else ""))
    args = (
        f'<p class="error">input refused: {_e(c.input_error)}</p>'
        if c.input_error
        else f'<pre class="json">{_e(_json(c.input))}</pre>'
        if c.input is not None
        else ""
    )
    result = ""
    if c.result is not None:
        cls = "result error" if c.is_error else "result"
        result = f'<div class="{cls}"><span class="label">result</span><pre>{_e(c.result)}</pre></div>'
    status = c.status.split()[0]
    return (
        f'<div class="call {_e(status)}" data-id="{_e(c.id or "")}">'
        f'<div class="head">tool <code>{_e(c.name)}</code> <span class="facts">{_e(" · ".join(facts))}</span>'
        f' <span class="id">{_e(c.id or "")}</span></div>'
        f"{args}{result}</div>"
    )


def _turn(t: Turn, provider: str, price: Price | None) -> str:
    facts = []
    if t.duration is not None:
        facts.append(_seconds(t.duration))
    stop = t.stop_reason.get("type") if isinstance(t.stop_reason, dict) else t.stop_reason
    if t.terminal is not None and t.terminal != stop:
        facts.append(t.terminal)
    if stop:
        facts.append(f"stop: {stop}")
    if not t.finished:
        facts.append("in progress")
    discarded = "".join(
        f'<p class="discarded">an attempt failed ({_e(kind)}) and was sent again</p>' for kind in t.discarded
    )
    text = f'<pre class="text">{_e(t.text)}</pre>' if t.text else ""
    calls = "".join(_call(c) for c in t.calls)
    return (
        f'<li class="turn" id="turn-{t.number}"><div class="head"><strong>Turn {t.number}</strong> '
        f'<span class="facts">{_e(" · ".join(facts))}</span> {_usage(t.usage, provider, price)}</div>'
        f"{discarded}{text}{calls}</li>"
    )


def _outcome(o: Outcome, n: int, many: bool, provider: str, price: Price | None) -> str:
    label = f"Result {n}" if many else "Result"
    if o.ok:
        head = f"{label}: {o.kind}"
        cls = "outcome ok"
        body = f'<pre class="text">{_e(o.text)}</pre>' if o.text else ""
    else:
        head = f"{label}: error ({o.kind})"
        cls = "outcome failed"
        body = f'<p class="error">{_e(o.message)}</p>'
    return (
        f'<section class="{cls}"><h2>{_e(head)}</h2>{body}'
        f"<p>{o.turns} turn(s) {_usage(o.usage, provider, price)}</p></section>"
    )


def session_page(
    view: View, *, token: str, version: str, price: Price | None = None, note: str | None = None
) -> str:
    s = view.summary
    line = view.timeline
    facts = [f"provider {s.provider}" if s.provider else "", f"{s.turns} turn(s)"]
    if s.started_at is not None:
        facts.append(f"started {_when(s.started_at)}")
    if s.updated_at is not None and s.started_at is not None:
        facts.append(f"last record after {_seconds(s.updated_at - s.started_at) or '0 ms'}")
    total = _usage(line.usage, s.provider, price) if line.turns else ""
    parts = [
        f"<h1>{_e(s.key)} {_badge(s.state)}</h1>",
        f'<p class="facts">{_e(" · ".join(f for f in facts if f))} {total}</p>',
    ]
    if view.read_only:
        parts.append('<p class="readonly">A recording: read-only.</p>')
    if s.state == "damaged":
        parts.append(f'<p class="error">{_e(s.detail)}</p>')
    parts.extend(_pending(s.key, p, token, view.read_only) for p in view.pending)
    prompt = view.request.get("prompt") if isinstance(view.request, dict) else None
    if prompt:
        parts.append(f'<section class="prompt"><h2>Prompt</h2><pre class="text">{_e(prompt)}</pre></section>')
    if line.turns:
        parts.append('<h2>Timeline</h2><ol class="timeline">')
        parts.extend(_turn(t, s.provider, price) for t in line.turns)
        parts.append("</ol>")
    if line.messages:
        parts.append("<h2>Messages sent in</h2>")
        parts.extend(f'<pre class="text">{_e(m)}</pre>' for m in line.messages)
    if line.errors:
        parts.append('<section class="errors"><h2>Errors and warnings</h2><ul>')
        parts.extend(f"<li>{_e(e)}</li>" for e in line.errors)
        parts.append("</ul></section>")
    many = len(line.outcomes) > 1
    parts.extend(_outcome(o, n, many, s.provider, price) for n, o in enumerate(line.outcomes, 1))
    poll = "session/version?key=" + quote(s.key, safe="")
    return page(f"{s.key} — rma inspect", "\n".join(parts), version=version, poll=poll, note=note)


def not_found(what: str) -> str:
    return page("not found — rma inspect", f"<h1>Not found</h1><p>{_e(what)}</p>", version="", poll="")
