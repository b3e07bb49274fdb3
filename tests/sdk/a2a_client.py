"""The official A2A Python SDK (a2a-sdk) as a client of a published Tracon agent.

Resolves the agent card, sends a message (blocking), streams one, reads a task back, asks
for a push notification on a background task and polls that task to completion. Prints the
background task's id (`push task: <id>`) so the test can match the push its receiver got,
and `a2a: ok` at the end. Environment: TRACON_A2A_URL (the agent's URL), TRACON_A2A_KEY (an
API key with the ExternalInvoke scope), TRACON_PUSH_URL (the test's receiver).
"""

import asyncio
import os
import uuid

import httpx
from a2a.client import (
    A2ACardResolver,
    AuthInterceptor,
    ClientConfig,
    ClientFactory,
    CredentialService,
)
from a2a.types.a2a_pb2 import (
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskPushNotificationConfig,
    TaskState,
)

URL = os.environ["TRACON_A2A_URL"]
KEY = os.environ["TRACON_A2A_KEY"]
PUSH_URL = os.environ["TRACON_PUSH_URL"]
ANSWER = "Order 4182 ships tomorrow."
TERMINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}


class ApiKey(CredentialService):
    """The key for the card's `apiKey` scheme (bearer)."""

    async def get_credentials(self, security_scheme_name, context):
        return KEY if security_scheme_name == "apiKey" else None


def request(text: str) -> SendMessageRequest:
    message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
    return SendMessageRequest(message=message)


def answer_of(task) -> str:
    return "".join(part.text for artifact in task.artifacts for part in artifact.parts)


async def main() -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        card = await A2ACardResolver(http, URL).get_agent_card()
    assert card.name == "support", card
    assert card.capabilities.streaming and card.capabilities.push_notifications, card
    assert card.supported_interfaces[0].protocol_version == "1.0", card
    auth = [AuthInterceptor(ApiKey())]

    # Send, blocking: one completed task whose artifact is the answer.
    blocking = ClientFactory(ClientConfig(streaming=False)).create(card, auth)
    events = [event async for event in blocking.send_message(request("Where is order 4182?"))]
    assert len(events) == 1 and events[0].HasField("task"), events
    task = events[0].task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, task
    assert answer_of(task) == ANSWER, task
    assert task.context_id, task

    # Get the task back.
    again = await blocking.get_task(GetTaskRequest(id=task.id))
    assert again.status.state == TaskState.TASK_STATE_COMPLETED and answer_of(again) == ANSWER, again

    # Stream: the task first, then updates, the last one the terminal status.
    streaming = ClientFactory(ClientConfig(streaming=True)).create(card, auth)
    frames = [event async for event in streaming.send_message(request("Stream the status of 4182."))]
    assert frames[0].HasField("task"), frames
    kinds = [event.WhichOneof("payload") for event in frames]
    assert "artifact_update" in kinds, kinds
    last_artifact = [e.artifact_update for e in frames if e.HasField("artifact_update")][-1]
    assert "".join(p.text for p in last_artifact.artifact.parts) == ANSWER, last_artifact
    assert frames[-1].HasField("status_update"), frames[-1]
    assert frames[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED, frames[-1]

    # A background task with a push notification, polled to completion.
    push = TaskPushNotificationConfig(url=PUSH_URL, token="sdk-push-token")
    background = ClientFactory(ClientConfig(streaming=False, polling=True, push_notification_config=push)).create(
        card, auth
    )
    accepted = [event async for event in background.send_message(request("Check 4182 in the background."))]
    queued = accepted[0].task
    assert queued.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING), queued
    print(f"push task: {queued.id}", flush=True)
    configs = await background.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=queued.id)
    )
    assert [c.url for c in configs.configs] == [PUSH_URL], configs
    polled = queued
    for _ in range(300):
        polled = await background.get_task(GetTaskRequest(id=queued.id))
        if polled.status.state in TERMINAL:
            break
        await asyncio.sleep(0.1)
    assert polled.status.state == TaskState.TASK_STATE_COMPLETED, polled
    assert answer_of(polled) == ANSWER, polled

    for client in (blocking, streaming, background):
        await client.close()
    print("a2a: ok")


asyncio.run(main())
