"""An A2A client on the official Python SDK (`a2a-sdk` on PyPI), driven by
tests/a2a.rs over standard input and output: one JSON command per input
line, one JSON event per output line. Everything the client receives from
the bridge (the card, tasks, stream events, errors) is printed, so the test
can check what reached the client.

Usage: client.py URL   (with CHEQ_A2A_TOKEN set, sent as a bearer token)

Commands:
  {"op": "send", "tool": T, "args": {...}, "stream": bool}
      a new message naming a tool. Not streaming: prints {"event": "sent",
      "response": ...}. Streaming: prints {"event": "stream", "item": ...}
      for each event as it arrives, then {"event": "stream_end"}.
  {"op": "send_on", "task_id": ID, "parts": [...], "stream": bool}
      a message with these parts on an existing task.
  {"op": "get", "id": ID}         prints {"event": "task", "task": ...}
  {"op": "cancel", "id": ID}      prints {"event": "task", "task": ...}
  {"op": "subscribe", "id": ID}   prints stream events as for "send"
  {"op": "quit"}
Errors are printed as {"event": "error", "type": ..., "message": ...}.
"""

import asyncio
import json
import os
import sys
import uuid

import httpx
from google.protobuf.json_format import MessageToDict, ParseDict

from a2a.client import ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
)


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def error(e):
    emit({"event": "error", "type": type(e).__name__, "message": str(e)})


def message(parts, task_id=None):
    m = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": parts}
    if task_id:
        m["taskId"] = task_id
    return ParseDict(m, Message())


async def main():
    url = sys.argv[1]
    headers = {}
    token = os.environ.get("CHEQ_A2A_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    http = httpx.AsyncClient(headers=headers, timeout=60)
    clients = {}
    for streaming in (True, False):
        factory = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http))
        clients[streaming] = await factory.create_from_url(url)
    card = clients[True]._card
    emit({"event": "ready", "card": MessageToDict(card)})

    async def stream(events):
        try:
            async for item in events:
                emit({"event": "stream", "item": MessageToDict(item)})
            emit({"event": "stream_end"})
        except Exception as e:  # noqa: BLE001 - everything is reported
            error(e)

    background = set()
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "quit":
            return
        try:
            if op in ("send", "send_on"):
                if op == "send":
                    parts = [{"data": {"tool": cmd["tool"], "arguments": cmd.get("args", {})}}]
                    msg = message(parts)
                else:
                    msg = message(cmd["parts"], cmd["task_id"])
                client = clients[bool(cmd.get("stream"))]
                events = client.send_message(SendMessageRequest(message=msg))
                if cmd.get("stream"):
                    t = asyncio.create_task(stream(events))
                    background.add(t)
                    t.add_done_callback(background.discard)
                else:
                    async for item in events:
                        emit({"event": "sent", "response": MessageToDict(item)})
            elif op == "get":
                task = await clients[False].get_task(GetTaskRequest(id=cmd["id"]))
                emit({"event": "task", "task": MessageToDict(task)})
            elif op == "cancel":
                task = await clients[False].cancel_task(CancelTaskRequest(id=cmd["id"]))
                emit({"event": "task", "task": MessageToDict(task)})
            elif op == "subscribe":
                events = clients[True].subscribe(SubscribeToTaskRequest(id=cmd["id"]))
                t = asyncio.create_task(stream(events))
                background.add(t)
                t.add_done_callback(background.discard)
            else:
                emit({"event": "error", "type": "usage", "message": f"unknown op {op}"})
        except Exception as e:  # noqa: BLE001 - everything is reported
            error(e)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Exception as e:  # noqa: BLE001
        error(e)
        sys.exit(1)
