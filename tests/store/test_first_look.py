"""Store.first_look: a conversation's head and its clone note in one read."""

from __future__ import annotations

from cursor_byok.store import AnyStore, FirstLook

from .conftest import commit


async def test_first_look_is_head_and_clone_source(store: AnyStore) -> None:
    assert await store.first_look("new") == FirstLook(head=None)
    await store.note_clone("clone", "source", 5)
    assert await store.first_look("clone") == FirstLook(head=None, clone_source="source")
    await commit(store, "c1", "i0", 0, (b"m0",))
    look = await store.first_look("c1")
    assert look == FirstLook(head=await store.head("c1")) and look.head is not None
    assert (look.head.version, look.head.message_count) == (1, 1)
    await commit(store, "clone", "i0", 0, (b"m0",))
    both = await store.first_look("clone")
    assert both.head == await store.head("clone") and both.clone_source == "source"
