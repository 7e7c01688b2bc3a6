"""The fixture itself: two processes of one node share its identity and its records."""

from __future__ import annotations

from tests.node.multiproc.conftest import TwoProcesses


async def test_two_processes_are_one_node(two_processes: TwoProcesses) -> None:
    a, b = two_processes.a, two_processes.b
    assert a.node.node_id == b.node.node_id
    created = await a.node.agents.create("ada", "Ada")
    headers = {"Authorization": f"Bearer {created.api_key}"}
    posted = await a.client.post(
        "/v1/entries", json={"entry_type": "finding", "performative": "inform", "content": "one log"}, headers=headers
    )
    assert posted.status == 201, await posted.text()
    entry_id = (await posted.json())["id"]
    read = await b.client.get(f"/v1/entries/{entry_id}", headers=headers)  # the key is the node's: b knows it too
    assert read.status == 200, await read.text()
    assert (await read.json())["entries"][0]["content"] == "one log"
