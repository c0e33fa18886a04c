"""Known answers for one page of an OpenAI list endpoint."""
import pytest

from gateway.errors import ApiError
from gateway.list_page import ListPage, list_page

ITEMS = [{"id": f"i{n}"} for n in range(5)]


def ids(page: dict) -> list[str]:
    return [item["id"] for item in page["data"]]


def test_pages_in_either_order_after_an_item():
    assert ids(ListPage().of(ITEMS)) == ["i4", "i3", "i2", "i1", "i0"]  # newest first by default
    first = ListPage(limit=2, order="asc").of(ITEMS)
    assert ids(first) == ["i0", "i1"] and first["has_more"] and (first["first_id"], first["last_id"]) == ("i0", "i1")
    last = ListPage(limit=2, order="asc", after="i2").of(ITEMS)
    assert ids(last) == ["i3", "i4"] and not last["has_more"]
    assert ids(ListPage(limit=3, order="desc", after="i3").of(ITEMS)) == ["i2", "i1", "i0"]
    empty = ListPage(after="i0").of(ITEMS)
    assert empty == {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False}


@pytest.mark.parametrize("query,param,code", [
    ({"limit": "0"}, "limit", "integer_below_min_value"), ({"limit": "101"}, "limit", "integer_above_max_value"),
    ({"limit": "ten"}, "limit", "invalid_value"), ({"order": "up"}, "order", "invalid_value"),
    ({"limit": "1_0"}, "limit", "invalid_value"), ({"limit": " 5"}, "limit", "invalid_value"),   # int() takes both
    ({"limit": "\u0665"}, "limit", "invalid_value")])
def test_bad_query_values_are_400s_naming_the_parameter(query, param, code):
    with pytest.raises(ApiError) as caught:
        list_page(query)
    assert caught.value.status == 400 and caught.value.param == param
    assert caught.value.code == code   # OpenAI's codes, as /v1/traces answers them (was "invalid_request": QA136)


def test_an_unknown_after_id_is_a_400():
    with pytest.raises(ApiError) as caught:
        ListPage(after="nope").of(ITEMS)
    assert caught.value.param == "after"
    assert list_page({"limit": "5", "order": "asc", "after": "i1"}) == ListPage(5, "asc", "i1")
