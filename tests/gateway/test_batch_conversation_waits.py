"""Batch lines on a conversation another response runs on (a 400 `conversation_locked`)
wait and go again, letting their request slot go while they wait: the batch's other lines
go on meanwhile (QA117: two waiting lines held both slots, and the six others waited as
long as the conversation was busy)."""
import asyncio
import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.auth import KeyRing
from gateway.batch_runner import BatchRunner
from gateway.batch_store import Batch, BatchStore
from gateway.config import TenantConfig
from gateway.file_store import FileStore


def _app(answered: list[str], conversation_free: asyncio.Event):
    async def chat(request: Request):
        content = (await request.json())["messages"][0]["content"]
        if content.startswith("busy") and not conversation_free.is_set():
            return JSONResponse({"error": {"message": "busy", "type": "invalid_request_error",
                                           "param": "conversation", "code": "conversation_locked"}}, status_code=400)
        answered.append(content)
        return JSONResponse({"id": f"chatcmpl-{content}", "object": "chat.completion"})
    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def _lines(contents: list[str]) -> bytes:
    return "\n".join(json.dumps({"custom_id": content, "method": "POST", "url": "/v1/chat/completions", "body": {
        "model": "m", "messages": [{"role": "user", "content": content}]}}) for content in contents).encode()


def test_lines_waiting_for_their_conversation_leave_their_slots_to_the_others():
    async def main():
        keys = KeyRing((TenantConfig("a", ()),))
        files, answered, conversation_free = FileStore(None), [], asyncio.Event()
        runner = BatchRunner(BatchStore(None), files, lambda: keys, concurrency=2, clock=lambda: 10.0)
        await runner.start(_app(answered, conversation_free))
        free = [f"free-{n}" for n in range(6)]
        upload = await files.add_bytes("a", "in.jsonl", "batch", _lines(["busy-0", "busy-1", *free]))
        await runner.create(Batch("batch_1", "a", "/v1/chat/completions", upload.id, "24h", 0, 100))
        for _ in range(500):   # 5 s: the waiting lines retry every second
            if sorted(answered) == free:
                break
            await asyncio.sleep(0.01)
        others_done = sorted(answered)
        conversation_free.set()
        batch = runner.current(await runner.store.get("a", "batch_1"))
        for _ in range(1000):
            if batch.status == "completed":
                break
            await asyncio.sleep(0.01)
            batch = runner.current(await runner.store.get("a", "batch_1"))
        runner.store.close()
        await runner.stop()
        return others_done, batch, sorted(answered)

    others_done, batch, answered = asyncio.run(main())
    assert others_done == [f"free-{n}" for n in range(6)]   # while the two waited
    assert batch.status == "completed" and (batch.completed, batch.failed) == (8, 0)
    assert answered == ["busy-0", "busy-1"] + [f"free-{n}" for n in range(6)]
