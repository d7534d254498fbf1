"""Drives mcp-tasks with the official Python SDK (mcp 1.x), the way an application would,
and prints one JSON line per step for the Rust test (tests/it/clients) to check. Nothing
here decides whether the server is right: the test does, from what the library reports.

    <cache>/py/bin/python client.py URL
"""

import asyncio
import json
import sys
import traceback

import httpx
import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError


def say(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def text(result):
    return "\n".join(c.text for c in result.content if c.type == "text")


async def main(url):
    elicitations = []

    # The library's own elicitation handler: the server's elicitation/create arrives on
    # the call's stream, and the answer goes back as a JSON-RPC response the SDK POSTs.
    async def on_elicit(context, params):
        schema = params.requestedSchema or {}
        field = next(iter(schema.get("properties", {})), None)
        elicitations.append({"message": params.message, "field": field})
        return types.ElicitResult(action="accept", content={field: True})

    async with streamable_http_client(url) as (read, write, session_id):
        async with ClientSession(read, write, elicitation_callback=on_elicit) as session:
            init = await session.initialize()
            say(
                "connected",
                protocolVersion=init.protocolVersion,
                hasSession=bool(session_id()),
                server=init.serverInfo.name,
            )

            tools = await session.list_tools()
            say("tools", names=[t.name for t in tools.tools])

            await session.send_ping()
            say("ping")

            greet = await session.call_tool("greet", {"name": "Python"})
            say("greet", text=text(greet), isError=bool(greet.isError))

            progress = []

            async def on_progress(value, total, message):
                progress.append({"progress": value, "message": message})

            slow = await session.call_tool(
                "slow_compute", {"seconds": 2, "label": "py"}, progress_callback=on_progress
            )
            say("slow_compute", text=text(slow), progress=progress)

            report = await session.call_tool("generate_report", {"size": "small"})
            say(
                "generate_report",
                text=text(report),
                structured=report.structuredContent,
                elicitations=elicitations[:],
            )
            elicitations.clear()

            deletion = await session.call_tool("confirm_delete", {"filename": "notes.txt"})
            say("confirm_delete", text=text(deletion), elicitations=elicitations[:])
            elicitations.clear()

            # A task-required tool, called without a task: refused (-32601, as 2025-11-25
            # says), and the session goes on.
            try:
                await session.call_tool("failing_job", {})
                say("failing_job", error=None)
            except McpError as e:
                say("failing_job", error={"code": e.error.code, "message": e.error.message})

            sid = session_id()

    # Leaving the client closed the session (DELETE); its id no longer works, anywhere.
    statuses = []
    async with httpx.AsyncClient() as http:
        for i in range(2):
            response = await http.post(
                url,
                headers={
                    "accept": "application/json, text/event-stream",
                    "mcp-session-id": sid,
                    "mcp-protocol-version": init.protocolVersion,
                },
                json={"jsonrpc": "2.0", "id": 99 + i, "method": "tools/list", "params": {}},
            )
            statuses.append(response.status_code)
    say("deleted", statuses=statuses)


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1]))
    except BaseException:
        say("error", message=traceback.format_exc())
        sys.exit(1)
