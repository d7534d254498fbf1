#!/usr/bin/env python3
"""Writes the committed seed corpus of the `envelope` fuzz target.

Each seed is laid out as the target reads it (see fuzz_targets/envelope.rs):

    flags (bit 0: MCP-Protocol-Version, bit 1: Mcp-Method, bit 2: Mcp-Name present;
           bit 3: also parse under a depth limit of flags >> 4)
    for each present header, in that order: one length byte, then the value
    the body

Run it from anywhere: `python3 tests/fuzz/make_seeds.py`. It rewrites
corpus/envelope/ from scratch. The requests of the official examples
(crates/wire/tests/official/examples) are included.
"""

import base64
import json
import pathlib
import shutil

HERE = pathlib.Path(__file__).resolve().parent
OUT = HERE / "corpus" / "envelope"
EXAMPLES = HERE.parents[1] / "crates" / "wire" / "tests" / "official" / "examples"

PV = "io.modelcontextprotocol/protocolVersion"
CC = "io.modelcontextprotocol/clientCapabilities"
VERSION = "2026-07-28"
TASK = "6f9619ff-8b86-4011-b42d-00cf4fc964ff"


def b64(text):
    raw = text if isinstance(text, bytes) else text.encode()
    return "=?base64?" + base64.b64encode(raw).decode() + "?="


def seed(body, version=VERSION, method=None, name=None, limit=None):
    """One input: headers (None = absent; str or bytes) and a body (str, bytes or JSON)."""
    if not isinstance(body, (str, bytes)):
        body = json.dumps(body, separators=(",", ":"))
    if isinstance(body, str):
        body = body.encode()
    flags = 0
    head = b""
    for bit, value in enumerate([version, method, name]):
        if value is None:
            continue
        value = value.encode() if isinstance(value, str) else value
        assert len(value) < 256, value
        flags |= 1 << bit
        head += bytes([len(value)]) + value
    if limit is not None:
        assert 0 <= limit < 16
        flags |= 8 | (limit << 4)
    return bytes([flags]) + head + body


def meta(caps=None):
    return {PV: VERSION, CC: caps if caps is not None else {"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}}}


def request(method, params=None, id=1, with_meta=True):
    params = dict(params or {})
    if with_meta:
        params.setdefault("_meta", meta())
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": params}


def name_of(method, params):
    key = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri",
           "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}.get(method)
    value = (params or {}).get(key) if key else None
    return value if isinstance(value, str) else None


def valid(method, params=None, id=1):
    body = request(method, params, id)
    return seed(body, method=method, name=name_of(method, params))


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    seeds = {}

    # Every method this server answers (or refuses by name), with faithful headers.
    seeds["valid-discover"] = valid("server/discover")
    seeds["valid-tools-list"] = valid("tools/list", id="list-1")
    seeds["valid-tools-list-cursor"] = valid("tools/list", {"cursor": "x"})
    seeds["valid-prompts-list"] = valid("prompts/list")
    seeds["valid-resources-list"] = valid("resources/list")
    seeds["valid-resource-templates-list"] = valid("resources/templates/list")
    seeds["valid-prompts-get"] = valid("prompts/get", {"name": "p", "arguments": {}})
    seeds["valid-resources-read"] = valid("resources/read", {"uri": "file:///tmp/x"})
    seeds["valid-tools-call-greet"] = valid("tools/call", {"name": "greet", "arguments": {"name": "x"}})
    seeds["valid-tools-call-slow"] = valid("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "l"}})
    seeds["valid-tools-call-mrtr"] = valid("tools/call", {
        "name": "test_tool_with_task", "arguments": {},
        "inputResponses": {"user_name": {"action": "accept", "content": {"name": "x"}}},
        "requestState": "v1.eyJ0IjoieCJ9.AAAA"})
    seeds["valid-tasks-get"] = valid("tasks/get", {"taskId": TASK}, id=0)
    seeds["valid-tasks-update"] = valid("tasks/update", {"taskId": TASK, "inputResponses": {"k": {"action": "accept", "content": {"confirm": True}}}})
    seeds["valid-tasks-cancel"] = valid("tasks/cancel", {"taskId": TASK}, id=-5)
    seeds["valid-tasks-get-no-name"] = seed(request("tasks/get", {"taskId": TASK}), method="tasks/get")
    seeds["valid-listen"] = valid("subscriptions/listen", {"taskIds": [TASK]})
    seeds["valid-ping-removed"] = valid("ping")
    seeds["valid-tasks-result-removed"] = valid("tasks/result", {"taskId": TASK})
    seeds["legacy-initialize"] = seed(request("initialize", {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "x", "version": "1"}}, with_meta=False),
        version="2025-11-25", method="initialize")
    seeds["valid-unicode-name"] = seed(
        request("tools/call", {"name": "héllo 👋", "arguments": {}}),
        method="tools/call", name=b64("héllo 👋"))
    seeds["valid-max-u64-id"] = valid("server/discover", id=18446744073709551615)
    seeds["valid-min-i64-id"] = valid("server/discover", id=-9223372036854775808)

    # Notifications.
    seeds["notification-initialized"] = seed({"jsonrpc": "2.0", "method": "notifications/initialized", "params": {"_meta": meta()}}, method="notifications/initialized")
    seeds["notification-cancelled"] = seed({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
    seeds["notification-no-params"] = seed('{"jsonrpc":"2.0","method":"x"}', version=None)

    # The spec's own example messages, headers derived from them.
    assert EXAMPLES.is_dir(), f"{EXAMPLES} is missing"
    for path in sorted(EXAMPLES.glob("*/*.json")):
        value = json.loads(path.read_text())
        if not (isinstance(value, dict) and value.get("jsonrpc") == "2.0" and "method" in value):
            continue
        method = value["method"]
        params = value.get("params") if isinstance(value.get("params"), dict) else {}
        version = (params.get("_meta") or {}).get(PV, VERSION)
        seeds["spec-" + path.stem] = seed(path.read_bytes(), version=version, method=method, name=name_of(method, params))

    # Bad envelopes.
    for key, body in {
        "bad-empty": "",
        "bad-space": " \n\t",
        "bad-open-brace": "{",
        "bad-batch": "[]",
        "bad-batch-of-one": json.dumps([request("tools/list")]),
        "bad-number": "42",
        "bad-string": '"x"',
        "bad-null-id": '{"jsonrpc":"2.0","id":null,"method":"m"}',
        "bad-bool-id": '{"jsonrpc":"2.0","id":true,"method":"m"}',
        "bad-float-id": '{"jsonrpc":"2.0","id":1.5,"method":"m"}',
        "bad-exp-id": '{"jsonrpc":"2.0","id":1e3,"method":"m"}',
        "bad-object-id": '{"jsonrpc":"2.0","id":{},"method":"m"}',
        "bad-huge-id": '{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"m"}',
        "bad-neg-zero-id": '{"jsonrpc":"2.0","id":-0,"method":"m"}',
        "bad-jsonrpc-1": '{"jsonrpc":"1.0","id":1,"method":"m"}',
        "bad-no-jsonrpc": '{"id":1,"method":"m"}',
        "bad-no-method": '{"jsonrpc":"2.0","id":1}',
        "bad-method-number": '{"jsonrpc":"2.0","id":1,"method":5}',
        "bad-params-array": '{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}',
        "bad-response": '{"jsonrpc":"2.0","id":1,"result":{}}',
        "bad-error-response": '{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}',
        "bad-trailing": '{"jsonrpc":"2.0","id":1,"method":"m"} {}',
        "bad-bom": b"\xef\xbb\xbf" + b'{"jsonrpc":"2.0","id":1,"method":"m"}',
        "bad-utf8-in-string": b'{"jsonrpc":"2.0","id":"\xff","method":"m"}',
        "bad-overlong-utf8": b'{"jsonrpc":"2.0","id":1,"method":"\xc0\xaf"}',
        "bad-lone-surrogate": '{"jsonrpc":"2.0","id":"\\ud800","method":"m"}',
        "nul-escape": '{"jsonrpc":"2.0","id":"\\u0000","method":"m\\u0000"}',
        "bad-1e400": '{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":1e400}}',
        "tiny-1e-400": '{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":1e-400}}',
        "big-int-arg": '{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":' + "9" * 100 + "}}",
    }.items():
        seeds[key] = seed(body, method="m")

    # Nesting around the default limit of 64, and brackets inside strings.
    for depth in (63, 64, 65, 128, 1000):
        seeds[f"nest-array-{depth}"] = seed("[" * depth + "]" * depth)
        inner = "1"
        for _ in range(depth - 1):
            inner = '{"a":' + inner + "}"
        seeds[f"nest-params-{depth}"] = seed('{"jsonrpc":"2.0","id":1,"method":"m","params":' + inner + "}", method="m")
    seeds["nest-in-string"] = seed(json.dumps(request("tools/call", {"name": "[" * 200 + '{\\"'})), method="tools/call", name="x")
    seeds["nest-small-limit"] = seed("[[[[1]]]]", limit=3)
    seeds["nest-small-limit-ok"] = seed('{"a":[{"b":"[[[["}]}', limit=3)
    seeds["nest-escaped-quote"] = seed('["\\"[[[[[[[[", [[1]]]', limit=2)

    # Duplicate keys at every level.
    for key, body in {
        "dup-method": '{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{}}',
        "dup-id": '{"jsonrpc":"2.0","id":1,"id":"1","method":"m"}',
        "dup-jsonrpc": '{"jsonrpc":"1.0","jsonrpc":"2.0","id":1,"method":"m"}',
        "dup-name": '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"greet","name":"x"}}',
        "dup-meta": '{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{},"_meta":{}}}',
        "dup-meta-key": '{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"%s":"a","%s":"b"}}}' % (PV, PV),
        "dup-arguments": '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"greet","arguments":{"name":"a","name":"b"}}}',
        "dup-escaped": '{"jsonrpc":"2.0","id":1,"method":"m","\\u006dethod":"n"}',
    }.items():
        seeds[key] = seed(body, method="tools/call", name="greet")

    # Header values: the =?base64?…?= form and its traps.
    greet = request("tools/call", {"name": "greet", "arguments": {"name": "x"}})
    for key, (version, method, name) in {
        "hdr-name-b64": (VERSION, "tools/call", b64("greet")),
        "hdr-all-b64": (b64(VERSION), b64("tools/call"), b64("greet")),
        "hdr-padded-ws": ("  " + VERSION + "\t", " tools/call ", "\tgreet "),
        "hdr-b64-no-padding": (VERSION, "tools/call", "=?base64?Z3JlZXQ?="),
        "hdr-b64-urlsafe": (VERSION, "tools/call", "=?base64?-_-_?="),
        "hdr-b64-crlf": (VERSION, "tools/call", b64("greet\r\nx-evil: 1")),
        "hdr-b64-nul": (VERSION, "tools/call", b64("greet\x00")),
        "hdr-b64-not-utf8": (VERSION, "tools/call", "=?base64?/w==?="),
        "hdr-b64-double": (VERSION, "tools/call", b64(b64("greet"))),
        "hdr-b64-empty": (VERSION, "tools/call", "=?base64??="),
        "hdr-b64-overlap": (VERSION, "tools/call", "=?base64?="),
        "hdr-b64-inner-space": (VERSION, "tools/call", "=?base64?Z3Jl ZXQ=?="),
        "hdr-b64-prefix-only": (VERSION, "tools/call", "=?base64?Z3JlZXQ="),
        "hdr-raw-utf8": (VERSION, "tools/call", "gréet".encode()),
        "hdr-raw-ctl": (VERSION, "tools/call\x01", "greet"),
        "hdr-raw-del": (VERSION, "tools/call", b"greet\x7f"),
        "hdr-version-mismatch": ("2025-11-25", "tools/call", "greet"),
        "hdr-method-case": (VERSION, "TOOLS/CALL", "greet"),
        "hdr-no-version": (None, "tools/call", "greet"),
        "hdr-no-method": (VERSION, None, "greet"),
        "hdr-no-name": (VERSION, "tools/call", None),
    }.items():
        seeds[key] = seed(greet, version=version, method=method, name=name)
    seeds["hdr-b64-name-matches-unicode-body"] = seed(
        request("tools/call", {"name": "gr\u00e9et"}), method="tools/call", name=b64("gr\u00e9et"))
    seeds["hdr-tasks-name-mismatch"] = seed(request("tasks/get", {"taskId": TASK}), method="tasks/get", name=b64(TASK.upper()))

    # _meta of every shape.
    for key, m in {
        "meta-missing": None,
        "meta-array": [],
        "meta-version-number": {PV: 20260728, CC: {}},
        "meta-caps-array": {PV: VERSION, CC: []},
        "meta-no-caps": {PV: VERSION},
        "meta-legacy-tasks": {PV: VERSION, CC: {"tasks": {"requests": {}}}},
        "meta-all-caps": {PV: VERSION, CC: {"sampling": {}, "roots": {}, "elicitation": {"url": {}, "form": {}}}, "io.modelcontextprotocol/clientInfo": {"name": "x"}, "progressToken": 7},
    }.items():
        params = {"name": "greet", "arguments": {"name": "x"}}
        if m is not None:
            params["_meta"] = m
        seeds[key] = seed({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}, method="tools/call", name="greet")

    for key, value in seeds.items():
        (OUT / key).write_bytes(value)
    print(f"{len(seeds)} seeds written to {OUT}")


if __name__ == "__main__":
    main()
