"""QA224 F2: an item whose own id holds a "/" was kept (ids are 1-256 characters) but its
URL, `/v1/conversations/{id}/items/a%2Fb`, answered 404 "Invalid URL": the router reads
the decoded path, and `{item_id}` matched no "/". The item routes now take the rest of
the path as the id, so GET and DELETE reach it, over HTTP and through the official
client (which sends "/" as %2F); `.../items/` still redirects to the list."""
import httpx
import openai
import pytest

from tests.gateway.conftest import KEYS

IDS = ("a/b", "x//y/", "a%2Fb")   # the last one's "%" is sent as %25


@pytest.fixture()
def http(gateway):
    with httpx.Client(base_url=gateway.base_url, headers=gateway.headers(), timeout=30) as client:
        yield client


def _conversation(http) -> str:
    items = [{"id": item_id, "type": "message", "role": "user", "content": item_id} for item_id in IDS]
    made = http.post("/v1/conversations", json={"items": [*items, {"type": "message", "role": "user",
                                                                   "content": "last", "id": "plain"}]})
    assert made.status_code == 200, made.text
    return made.json()["id"]


def _quoted(item_id: str) -> str:
    return item_id.replace("%", "%25").replace("/", "%2F")


def test_an_id_with_a_slash_is_read_and_deleted_over_http(http):
    conversation = _conversation(http)
    for item_id in IDS:
        found = http.get(f"/v1/conversations/{conversation}/items/{_quoted(item_id)}")
        assert found.status_code == 200, found.text
        assert found.json()["id"] == item_id and found.json()["content"][0]["text"] == item_id
    gone = http.delete(f"/v1/conversations/{conversation}/items/{_quoted('a/b')}")
    assert gone.status_code == 200 and gone.json()["id"] == conversation, gone.text
    left = [item["id"] for item in http.get(f"/v1/conversations/{conversation}/items",
                                            params={"order": "asc"}).json()["data"]]
    assert left == ["x//y/", "a%2Fb", "plain"]
    missing = http.get(f"/v1/conversations/{conversation}/items/{_quoted('a/b')}")
    assert missing.status_code == 404 and "Invalid URL" not in missing.text   # the item's own 404
    assert http.get(f"/v1/conversations/{conversation}/items/plain").json()["id"] == "plain"


def test_an_empty_item_id_still_redirects_to_the_list(http):
    conversation = _conversation(http)
    answer = http.get(f"/v1/conversations/{conversation}/items/", follow_redirects=False)
    assert answer.status_code == 307 and answer.headers["location"].endswith(f"/v1/conversations/{conversation}/items")


def test_the_official_client_reaches_an_id_with_a_slash(gateway, http):
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["alpha"], max_retries=0)
    conversation = _conversation(http)
    for item_id in IDS:
        assert client.conversations.items.retrieve(item_id, conversation_id=conversation).id == item_id
    client.conversations.items.delete("a/b", conversation_id=conversation)
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve("a/b", conversation_id=conversation)
    assert [item.id for item in client.conversations.items.list(conversation, order="asc")] == [
        "x//y/", "a%2Fb", "plain"]


@pytest.mark.parametrize("item_id", ["..", ".", "a/../b", "a/.", "../x"])
def test_an_id_its_url_cannot_name_is_refused_where_it_is_given(http, item_id):
    """QA229: `..` was kept, and its URL `/items/..` is the conversation itself."""
    for path, body in (("/v1/conversations", {"items": [{"id": item_id, "type": "message", "role": "user",
                                                          "content": "x"}]}),
                       ("/v1/responses", {"model": "tiny", "max_output_tokens": 1, "input": [
                           {"id": item_id, "type": "message", "role": "user", "content": "x"}]})):
        error = http.post(path, json=body).json()["error"]
        assert error["param"].endswith("[0].id") and "its URL could not name it" in error["message"], (path, error)
