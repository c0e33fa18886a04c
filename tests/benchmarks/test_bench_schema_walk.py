"""bench_schema_walk's shapes: the door refuses them past OpenAI's limits, and the walk
writes a reply object for each whatever the door says."""
from benchmarks.bench_schema_walk import big_enum, char_class, door, same_ref_branches, walk


def test_the_door_refuses_each_shape_past_the_limits_and_serves_it_below():
    assert [door(big_enum(n)) for n in (10, 1000, 1001)] == ["ok", "ok", "400"]
    assert [door(same_ref_branches(d)) for d in (4, 16)] == ["ok", "400"]
    assert door(char_class(100)) == "ok"


def test_the_walk_writes_a_reply_object_past_the_door_too():
    for schema in (same_ref_branches(40), big_enum(5000), char_class(3000)):
        walk(schema)   # raises when the reply is no JSON
