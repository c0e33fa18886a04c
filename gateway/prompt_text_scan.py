"""Scans of a prompt's text for the prompt token cache (gateway/prompt_token_cache.py):
where its last cut points end, and how long a prefix it shares with a kept one; each in C
where it can, its cost following what is probed or shared, not the whole text.
"""
from __future__ import annotations

GALLOP_START_CHARS = 1024


def last_cuts(text: str, cut_texts: tuple[str, ...], limit: int) -> list[int]:
    """Where the last `limit` occurrences of the `cut_texts` in `text` end, descending
    (each text's occurrences found from the end, so the cost follows what is probed)."""
    ends: list[int] = []
    for cut_text in cut_texts:
        at = len(text)
        for _ in range(limit):
            at = text.rfind(cut_text, 0, at)
            if at < 0:
                break
            ends.append(at + len(cut_text))
    ends.sort(reverse=True)
    return ends[:limit]


def shared_prefix_length(a: str, b: str) -> int:
    """The length of the longest common prefix of `a` and `b`: windows that double in
    size until one differs, then halving that window (each comparison runs in C, and
    the cost follows the shared length, not the strings': most kept prompts of a tenant
    part from a new one right after its system prompt)."""
    end = min(len(a), len(b))
    low, size = 0, GALLOP_START_CHARS
    while True:   # a[:low] == b[:low]
        high = min(end, low + size)
        if a[low:high] != b[low:high]:
            break
        if high == end:
            return end
        low, size = high, size * 2
    while high - low > 1:   # a[:low] == b[:low], and a[low:high] != b[low:high]
        middle = (low + high) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle
    return low
