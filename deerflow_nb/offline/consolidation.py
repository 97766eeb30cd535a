"""The offline model's consolidation: near-duplicate facts merged deterministically.

``memory/updates/aging.py`` writes the consolidation prompt; a real model answers it with its own
judgment, the offline model with the rule below, so the loop runs in demos and tests.
"""

from __future__ import annotations

from typing import Any

from ..similarity import signature

_MERGE_CATEGORY_GROUPS = {
    "preference": "habit",
    "behavior": "habit",
    "knowledge": "habit",
    "context": "habit",
    "goal": "goal",
}

_HEAD_RANK = {"preference": 4, "knowledge": 3, "behavior": 2, "context": 1}


def offline_merges(facts: list[tuple[str, str, str, float]]) -> list[dict[str, Any]]:
    """The offline model's deterministic consolidation of ``(handle, category, content,
    confidence)`` lines: a fact whose content words all appear in another fact (signatures,
    as near-duplicate detection reads them: "Uses polars" ⊂ "Prefers polars over pandas")
    links the two; linked facts of compatible categories (goals apart, corrections never)
    form one merge. Its text is the most confident, most specific fact's, followed by the
    others that add words it lacks ("; switched team notebooks to polars"); among equally
    confident facts a preference leads, then knowledge, a habit, context."""
    sigs = [signature(c) for _, _, c, _ in facts]
    groups = [_MERGE_CATEGORY_GROUPS.get(cat) for _, cat, _, _ in facts]
    parent = list(range(len(facts)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(len(facts)):
        for j in range(len(facts)):
            if i == j or groups[i] is None or groups[i] != groups[j]:
                continue
            if sigs[i] and sigs[i] <= sigs[j] and (sigs[i] != sigs[j] or i < j):
                parent[root(i)] = root(j)
    clusters: dict[int, list[int]] = {}
    for i in range(len(facts)):
        clusters.setdefault(root(i), []).append(i)
    merges = []
    for members in clusters.values():
        if len(members) < 2:
            continue
        head = max(
            members, key=lambda i: (facts[i][3], _HEAD_RANK.get(facts[i][1], 0), len(sigs[i]), -i)
        )
        words = set(sigs[head])
        parts = [facts[head][2].rstrip(" .")]
        for i in sorted(members):
            if i != head and not sigs[i] <= words:
                text = facts[i][2].rstrip(" .")
                parts.append(text[:1].lower() + text[1:])
                words |= sigs[i]
        merges.append(
            {
                "facts": [facts[i][0] for i in sorted(members)],
                "content": "; ".join(parts),
                "category": facts[head][1],
                "confidence": max(facts[i][3] for i in members),
            }
        )
    merges.sort(key=lambda m: m["facts"][0])
    return merges
