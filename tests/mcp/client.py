"""An MCP client on the official Python SDK (`mcp` on PyPI), driven by
tests/mcp.rs over standard input and output: one JSON command per input
line, one JSON event per output line. Everything the client receives from
the bridge (results, errors, elicitations, notifications) is printed, so the
test can check what reached the client.

Usage: client.py URL MODE   (MODE: legacy | 2026-07-28 | auto; with
                             CHEQ_MCP_TOKEN set, sent as a bearer token)
   or: client.py --stdio MODE CHEQ_BIN RS_URL

CHEQ_MCP_ELICIT says what the client declares: `url` (default: form and URL
elicitation, as the SDK declares with a callback), `form` (form only, as many
clients in use do) or `none` (no elicitation capability).

Commands:
  {"op": "list"}
  {"op": "call", "tool": T, "args": {...}}
      2025-11-25: prints {"event": "result"} or {"event": "elicit", ...} from
      the URLElicitationRequiredError.
      2026-07-28: the SDK's multi-round-trip driver runs; each URL
      elicitation is printed as {"event": "elicit", ...} and answered with the
      next input line ({"action": "accept" | "decline" | "cancel"}).
  {"op": "call_once", "tool": T, "args": {...}, "state": S}  (2026-07-28)
      one round only: prints {"event": "input_required", "state", ...},
      {"event": "result"} or {"event": "error"}.
  {"op": "call_many", "tool": T, "args_list": [{...}, ...]}
      2025-11-25: all the calls at once on the one session; prints
      {"event": "many", "outcomes": [{"result": ...} | {"error": ...}, ...]}.
  {"op": "wait_complete", "id": ID, "secs": N}
      waits for notifications/elicitation/complete for ID.
  {"op": "quit"}
"""

import asyncio
import json
import os
import sys

from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp import types
from mcp.shared.exceptions import MCPError
from mcp.client.session import ClientSession

ELICIT = os.environ.get("CHEQ_MCP_ELICIT", "url")
if ELICIT == "form":
    # The SDK declares form and URL together; a form-only client is made by
    # taking URL out of what it declares (at initialize and per request).
    _declared = ClientSession._build_capabilities

    def _form_only(self, version):
        caps = _declared(self, version)
        if caps.elicitation is not None:
            caps = caps.model_copy(
                update={"elicitation": types.ElicitationCapability(form=types.FormElicitationCapability())}
            )
        return caps

    ClientSession._build_capabilities = _form_only


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def dump(model):
    if hasattr(model, "model_dump"):
        return model.model_dump(by_alias=True, exclude_none=True, mode="json")
    return model


class Driver:
    def __init__(self):
        self.lines = asyncio.Queue()
        self.completed = {}

    async def read_stdin(self):
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                await self.lines.put(None)
                return
            line = line.strip()
            if line:
                await self.lines.put(json.loads(line))

    async def next_line(self):
        return await self.lines.get()

    async def on_elicit(self, context, params):
        emit({"event": "elicit", "params": dump(params)})
        answer = await self.next_line()
        if answer is None:
            return types.ElicitResult(action="cancel")
        return types.ElicitResult(action=answer.get("action", "accept"))

    async def on_message(self, message):
        data = dump(message)
        emit({"event": "message", "message": data})
        text = json.dumps(data)
        if "notifications/elicitation/complete" in text:
            root = getattr(message, "root", message)
            params = getattr(root, "params", None)
            eid = None
            if params is not None:
                eid = getattr(params, "elicitation_id", None) or (
                    dump(params).get("elicitationId") if hasattr(params, "model_dump") else None
                )
            if eid is None:
                # Fall back to the raw dump.
                eid = json.loads(text).get("params", {}).get("elicitationId")
            if eid:
                self.completed[eid] = True

    async def run(self, client):
        emit({"event": "ready", "protocol_version": client.protocol_version})
        while True:
            cmd = await self.next_line()
            if cmd is None or cmd.get("op") == "quit":
                return
            op = cmd["op"]
            try:
                if op == "list":
                    tools = await client.list_tools()
                    emit({"event": "tools", "tools": [dump(t) for t in tools.tools]})
                elif op == "call":
                    result = await client.call_tool(cmd["tool"], cmd.get("args", {}))
                    emit({"event": "result", "result": dump(result)})
                elif op == "call_once":
                    result = await client.session.call_tool(
                        cmd["tool"],
                        cmd.get("args", {}),
                        request_state=cmd.get("state"),
                        input_responses=cmd.get("responses"),
                        allow_input_required=True,
                    )
                    data = dump(result)
                    if data.get("resultType") == "input_required":
                        emit({"event": "input_required", "state": data.get("requestState"), "result": data})
                    else:
                        emit({"event": "result", "result": data})
                elif op == "call_many":
                    async def one(args):
                        try:
                            result = await client.call_tool(cmd["tool"], args)
                            return {"result": dump(result)}
                        except MCPError as e:
                            return {"error": dump(e.error)}

                    outcomes = await asyncio.gather(*(one(a) for a in cmd["args_list"]))
                    emit({"event": "many", "outcomes": outcomes})
                elif op == "wait_complete":
                    deadline = asyncio.get_running_loop().time() + cmd.get("secs", 30)
                    while cmd["id"] not in self.completed:
                        if asyncio.get_running_loop().time() > deadline:
                            raise TimeoutError("no notifications/elicitation/complete")
                        await asyncio.sleep(0.05)
                    emit({"event": "complete", "id": cmd["id"]})
                else:
                    emit({"event": "error", "message": f"unknown op {op}"})
            except MCPError as e:
                error = dump(e.error)
                if error.get("code") == -32042:
                    for el in (error.get("data") or {}).get("elicitations", []):
                        emit({"event": "elicit", "params": el, "error": error})
                else:
                    emit({"event": "error", "error": error})
            except Exception as e:  # noqa: BLE001 - reported to the test
                emit({"event": "exception", "type": type(e).__name__, "message": str(e)})


async def main():
    driver = Driver()
    reader = asyncio.create_task(driver.read_stdin())
    if sys.argv[1] == "--stdio":
        mode, cheq_bin, rs = sys.argv[2], sys.argv[3], sys.argv[4]
        server = StdioServerParameters(
            command=cheq_bin,
            args=["mcp", "--stdio", "--rs", rs, "--client-id", os.environ.get("CHEQ_AGENT_ID", "demo-agent")],
            env={k: v for k, v in os.environ.items() if k == "CHEQ_AGENT_SECRET"},
        )
    else:
        url, mode = sys.argv[1], sys.argv[2]
        token = os.environ.get("CHEQ_MCP_TOKEN")
        if token is None:
            server = url
        else:
            # The bridge's --token-file: sent on every request of the SDK's
            # own HTTP client.
            server = streamable_http_client(
                url,
                http_client=create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}),
            )
    callbacks = {} if ELICIT == "none" else {"elicitation_callback": driver.on_elicit}
    async with Client(
        server,
        mode=mode,
        message_handler=driver.on_message,
        read_timeout_seconds=60,
        **callbacks,
    ) as client:
        await driver.run(client)
    reader.cancel()


if __name__ == "__main__":
    asyncio.run(main())
