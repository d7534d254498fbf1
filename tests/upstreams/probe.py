"""A FastMCP server for the upstream hardening tests (tests/it/upstream/hardening*.rs):
tools that report what the process can see, answer or log more than they should, keep
talking after their call ended, and change the tool list.

    python probe.py [--label L] [--legacy] [--http PORT] [--many N] [--tool NAME ...]

--legacy    speak only the handshake-era revisions (input requests on the back channel)
--http      serve Streamable HTTP on 127.0.0.1:PORT/mcp instead of stdio
--many N    also list N tools named t0000, t0001, ...
--tool X    also list a tool named X that answers "<label>'s X"
"""

import argparse
import asyncio
import json
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--label", default="probe")
parser.add_argument("--legacy", action="store_true")
parser.add_argument("--http", type=int)
parser.add_argument("--many", type=int, default=0)
parser.add_argument("--tool", action="append", default=[])
args = parser.parse_args()

if args.legacy:
    import mcp_types.version as v

    v.MODERN_PROTOCOL_VERSIONS = ()
    v.SUPPORTED_PROTOCOL_VERSIONS = tuple(v.HANDSHAKE_PROTOCOL_VERSIONS)

from fastmcp import Context, FastMCP

mcp = FastMCP(args.label)
# Background sends outlive their call: keep them referenced until done.
pending = set()


def answering(name):
    def answer() -> str:
        return f"{args.label}'s {name}"

    answer.__name__ = name.replace("-", "_")
    answer.__doc__ = f"Answers with who serves {name}."
    return answer


for name in args.tool:
    mcp.tool(name=name)(answering(name))
for i in range(args.many):
    mcp.tool(name=f"t{i:04}")(answering(f"t{i:04}"))


@mcp.tool
def environment() -> str:
    """The environment variables this process sees, as a JSON object."""
    return json.dumps(dict(os.environ))


@mcp.tool
def big(size: int) -> str:
    """Answers with `size` characters."""
    return "x" * size


@mcp.tool
def shout(size: int) -> str:
    """Writes one stderr line of `size` bytes (in pieces), then answers."""
    chunk = "y" * 65536
    left = size
    while left > 0:
        n = min(left, len(chunk))
        sys.stderr.write(chunk[:n])
        left -= n
    sys.stderr.write("\n")
    sys.stderr.flush()
    return "shouted"


@mcp.tool
async def leak(secret: str, delay: float, ctx: Context) -> str:
    """Answers at once; `delay` seconds later, on the same connection and with no call to
    relate them to, logs `secret` and asks a question carrying it."""
    session = ctx.session

    async def later():
        await asyncio.sleep(delay)
        try:
            await session.send_log_message(level="info", data=secret)
        except Exception as e:  # noqa: BLE001
            print(f"log failed: {e}", file=sys.stderr)
        try:
            await session.elicit_form(
                message=secret,
                requested_schema={"type": "object", "properties": {"answer": {"type": "string"}}},
            )
        except Exception as e:  # noqa: BLE001
            print(f"elicitation refused: {e}", file=sys.stderr)

    task = asyncio.create_task(later())
    pending.add(task)
    task.add_done_callback(pending.discard)
    return "answered; more to come"


@mcp.tool
async def hold(seconds: float, ctx: Context) -> str:
    """Stays open for `seconds`, saying nothing."""
    await asyncio.sleep(seconds)
    return "held"


@mcp.tool
async def ask_name(ctx: Context) -> str:
    """Asks for a name while the call is open (on the back channel when --legacy)."""
    answer = await ctx.elicit("What is your name?", str)
    if answer.action == "accept":
        return "hello " + answer.data
    return "no name: " + answer.action


@mcp.tool
async def grow(name: str, ctx: Context) -> str:
    """Adds a tool named `name` and says that the list changed."""
    mcp.tool(name=name)(answering(name))
    await ctx.session.send_tool_list_changed()
    return f"{args.label} now has {name}"


@mcp.tool
def whoami() -> str:
    """This server's label."""
    return args.label


@mcp.tool
def die() -> str:
    """Ends this server's process at once, mid-call."""
    os._exit(3)


if __name__ == "__main__":
    if args.http:
        mcp.run(transport="http", host="127.0.0.1", port=args.http, path="/mcp", show_banner=False)
    else:
        mcp.run(show_banner=False)
