#!/usr/bin/env python3
"""SigV4 signing throughput: ``rma.wire.sigv4.sign`` against botocore's ``SigV4Auth`` on the same requests.

Three Bedrock AgentCore requests, each signed with a session token (STS-style credentials)
and a ``User-Agent`` (sent, not signed):

- ``invoke``: ``POST /harnesses/invoke?harnessArn=<ARN>&qualifier=DEFAULT`` with a ~1 KiB JSON
  body and the runtime session id header (InvokeHarness);
- ``command``: ``POST /runtimes/<ARN as one %-encoded path label>/commands`` with a small JSON
  body (InvokeAgentRuntimeCommand — the double-encoded canonical URI);
- ``control``: ``GET`` of a harness endpoint on the control-plane host, no body.

What each side does per signature, the clock included (botocore reads it itself):

- rma: ``datetime.now(UTC)`` then ``sign(...)``, which returns the headers to send. Its
  caches (signing key per day/region/service, canonical URL parts per URL) are warm after
  the first call, as in a session that signs many requests; the ``rma cold`` column clears
  both before every signature (the clearing itself is counted: a pessimistic figure).
- botocore: ``AWSRequest(method, url, headers, body)`` then ``SigV4Auth.add_auth`` — what its
  client does per request. The ``botocore add_auth`` column re-signs one prebuilt request
  (add_auth removes its previous signature first), leaving request construction out.

Before timing, both must produce the same ``Authorization`` for every request at a fixed
time, or the script fails. Figures are signatures per CPU second (``time.process_time``),
the median of N repeats; the signers alternate within a repeat so that machine load hits
them alike. Ratios are rma (warm) over each botocore column: > 1 means rma is faster.

    python bench/sigv4_sign.py              # full: 10,000 signatures per cell, 7 repeats
    python bench/sigv4_sign.py --quick      # CI smoke: a few hundred signatures, 1 repeat, no claims
    python bench/sigv4_sign.py --json       # the same figures as one JSON document
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import botocore.auth
import botocore.credentials
from botocore.awsrequest import AWSRequest

from rma.wire import sigv4
from rma.wire.sigv4 import SERVICE, Credentials, encode_query, quote_label, sign

REGION = "us-east-1"
CREDENTIALS = Credentials(
    "ASIAEXAMPLEEXAMPLE12",
    "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
    "IQoJb3JpZ2luX2VjEXAMPLE" * 20,  # STS session tokens run to several hundred characters
)
HARNESS_ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:harness/billing_support_1a2b3c4d-AbCdEfGhIj"
RUNTIME_ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/billing_support_1a2b3c4d-AbCdEfGhIj"
DATA = "https://bedrock-agentcore.us-east-1.amazonaws.com"
CONTROL = "https://bedrock-agentcore-control.us-east-1.amazonaws.com"
USER_AGENT = "rma/0.1.0 python/3.11 httpx/0.28"
SESSION = {
    "Content-Type": "application/json",
    "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id": "rma-session-0123456789abcdef0123456789",
    "User-Agent": USER_AGENT,
}

_PROMPT = (
    "Summarise the open invoices for account 4411 and flag any that are more than thirty days "
    "overdue; include the customer's contact, the amount, the currency and the due date. "
)
_INVOKE_BODY = json.dumps(
    {
        "messages": [{"role": "user", "content": [{"text": (_PROMPT * 6)[:900]}]}],
        "systemPrompt": [{"text": "You are a careful billing assistant."}],
        "timeoutSeconds": 900,
        "maxIterations": 40,
        "maxTokens": 4096,
    }
).encode()

Request = tuple[str, str, Mapping[str, str], bytes]
REQUESTS: dict[str, Request] = {
    "invoke": (
        "POST",
        f"{DATA}/harnesses/invoke?" + encode_query([("harnessArn", HARNESS_ARN), ("qualifier", "DEFAULT")]),
        SESSION,
        _INVOKE_BODY,
    ),
    "command": (
        "POST",
        f"{DATA}/runtimes/{quote_label(RUNTIME_ARN)}/commands",
        SESSION,
        b'{"command": "ls -la /mnt/data/reports", "timeout": 60}',
    ),
    "control": (
        "GET",
        f"{CONTROL}/harnesses/billing_support_1a2b3c4d-AbCdEfGhIj/endpoints/DEFAULT",
        {"User-Agent": USER_AGENT},
        b"",
    ),
}

_BOTOCORE_CREDENTIALS = botocore.credentials.Credentials(
    CREDENTIALS.access_key_id, CREDENTIALS.secret_access_key, CREDENTIALS.session_token
)
_UTC = datetime.UTC
_now = datetime.datetime.now


# ── the signers: n signatures of one request ───────────────────────────────────────────────

Signer = Callable[[Request, int], None]


def rma_warm(request: Request, n: int) -> None:
    method, url, headers, body = request
    for _ in range(n):
        sign(method, url, headers, body, credentials=CREDENTIALS, region=REGION, now=_now(_UTC))


def rma_cold(request: Request, n: int) -> None:
    method, url, headers, body = request
    clear_key, clear_url = sigv4.signing_key.cache_clear, sigv4._url_facts.cache_clear
    for _ in range(n):
        clear_key()
        clear_url()
        sign(method, url, headers, body, credentials=CREDENTIALS, region=REGION, now=_now(_UTC))


def botocore_request(request: Request, n: int) -> None:
    method, url, headers, body = request
    signer = botocore.auth.SigV4Auth(_BOTOCORE_CREDENTIALS, SERVICE, REGION)
    for _ in range(n):
        signer.add_auth(AWSRequest(method, url, dict(headers), body))


def botocore_add_auth(request: Request, n: int) -> None:
    method, url, headers, body = request
    signer = botocore.auth.SigV4Auth(_BOTOCORE_CREDENTIALS, SERVICE, REGION)
    prepared = AWSRequest(method, url, dict(headers), body)
    for _ in range(n):
        signer.add_auth(prepared)


SIGNERS: dict[str, Signer] = {
    "rma": rma_warm,
    "rma cold": rma_cold,
    "botocore": botocore_request,
    "botocore add_auth": botocore_add_auth,
}


# ── measuring ─────────────────────────────────────────────────────────────────────────────


def check_agree() -> None:
    """Every request, both signers, the same Authorization at a fixed instant — or a loud failure."""
    fixed = datetime.datetime(2026, 8, 1, 12, 0, 0)
    with mock.patch.object(botocore.auth, "get_current_datetime", return_value=fixed):
        for name, (method, url, headers, body) in REQUESTS.items():
            ours = sign(method, url, headers, body, credentials=CREDENTIALS, region=REGION, now=fixed)
            theirs = AWSRequest(method, url, dict(headers), body)
            botocore.auth.SigV4Auth(_BOTOCORE_CREDENTIALS, SERVICE, REGION).add_auth(theirs)
            if list(ours.items()) != list(theirs.headers.items()):
                raise SystemExit(
                    f"FAIL: {name}: rma and botocore disagree:\n  {ours['Authorization']}\n"
                    f"  {theirs.headers['Authorization']}"
                )


def timed(signer: Signer, request: Request, n: int) -> float:
    """CPU seconds for n signatures: steadier than the wall clock on a shared machine."""
    gc.collect()
    start = time.process_time()
    signer(request, n)
    return time.process_time() - start


def measure(request: Request, n: int, repeats: int) -> dict[str, float]:
    """Signatures per CPU second for each signer, the median of ``repeats``."""
    for signer in SIGNERS.values():
        signer(request, max(n // 20, 10))  # warm up: caches, branch predictors, allocator
    times: dict[str, list[float]] = {name: [] for name in SIGNERS}
    for r in range(repeats):
        order = list(SIGNERS.items()) if r % 2 == 0 else list(reversed(SIGNERS.items()))
        for name, signer in order:
            times[name].append(timed(signer, request, n))
    return {name: n / statistics.median(t) for name, t in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="CI smoke run: tiny counts, no figures to quote")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--signatures", type=int, default=10_000, help="signatures per timed cell")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON document")
    args = parser.parse_args()
    n = 300 if args.quick else args.signatures
    repeats = 1 if args.quick else args.repeats
    check_agree()
    load_start = os.getloadavg()[0]
    rates = {name: measure(request, n, repeats) for name, request in REQUESTS.items()}
    load_end = os.getloadavg()[0]
    if args.json:
        doc = {
            "python": sys.version.split()[0],
            "botocore": botocore.__version__,
            "signatures_per_cell": n,
            "repeats": repeats,
            "quick": args.quick,
            "load_average": [round(load_start, 2), round(load_end, 2)],
            "unit": "signatures per CPU second",
            "requests": {
                name: {
                    "rates": {signer: round(rate, 1) for signer, rate in r.items()},
                    "rma/botocore": round(r["rma"] / r["botocore"], 3),
                    "rma/botocore add_auth": round(r["rma"] / r["botocore add_auth"], 3),
                }
                for name, r in rates.items()
            },
        }
        print(json.dumps(doc, indent=2))
        return 0
    print(
        f"python {sys.version.split()[0]}, botocore {botocore.__version__}, "
        f"load average {load_start:.2f} on {os.cpu_count()} CPUs"
    )
    print(f"{n:,} signatures per cell, median of {repeats}; rma and botocore agree on every request")
    header = "".join(f"{name:>19}" for name in SIGNERS)
    print(f"  {'request':<9}{header}  {'rma/botocore':>13}  {'rma/add_auth':>13}  (signatures/CPU s)")
    for name, r in rates.items():
        cells = "".join(f"{r[signer]:>19,.0f}" for signer in SIGNERS)
        ratios = f"{r['rma'] / r['botocore']:>12.2f}x  {r['rma'] / r['botocore add_auth']:>12.2f}x"
        print(f"  {name:<9}{cells}  {ratios}")
    print(f"load average at the end {load_end:.2f}")
    if args.quick:
        print("(--quick: smoke run only, figures not meaningful)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
