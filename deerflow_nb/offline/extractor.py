"""The offline model's memory extraction: explicit first-person statements → a DeerFlow diff.

Reads the extraction prompt (``<current_memory>`` fact lines with handles and the
``<conversation>``'s ``User:`` blocks), and turns what the user plainly said about
themself into third-person facts with DeerFlow's confidence bands: stated preferences
and context 0.9, goals 0.85, habits 0.8, hedges 0.5 (under the threshold on purpose).
"I no longer …" adds a correction and removes the facts it contradicts; "forget that …"
only removes. Statements are read in order, so a later correction or "forget" also
cancels a fact stated earlier in the same conversation. Same input, same output.

The scope gate (issues 20, 28): a statement with a one-time marker ("for this cell", "just
now", "this time", "for now", "just for this answer") is labelled ``durability:
"one-time"`` and ``scope: "task"``; one about this conversation only ("for this
session") ``scope: "task"``. One about the project ("in this project", "the project's",
"our team", "for this notebook", "in this analysis", "for this dataset") is ``scope:
"project"``: what it says is read as any statement, and when no rule reads it (a project
fact is rarely about the user: "In this project, the target column is churned") it is
kept as said, pronouns turned to the third person; the project's facts of the
conversation, after the summary the prompt shows, are its ``projectContext``. An
instruction in the imperative with a one-time marker ("Use 3 decimals for this cell") is
proposed too, labelled, so the fold report shows it left out. Other facts carry no
label, which the gate reads as user-level and durable.

A prompt holding ``<consolidate_facts>`` (``memory/updates/aging.py``) is answered with the
deterministic merges of ``consolidation.offline_merges`` instead of a diff.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..schema.constants import CONSOLIDATE_TAG, HISTORY_SECTIONS, USER_SECTIONS
from ..schema.sections import compose, section_of
from ..similarity import overlap, signature
from .consolidation import offline_merges
from .words import is_question

_FACT_LINE = re.compile(r"^- \[(\w+)\] \((\w+), ([\d.]+)\) (.*)$")
_BLOCK = re.compile(r"^(User|Assistant):[ \t]?", re.MULTILINE)
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")

EXPLICIT, GOAL, HABIT, HEDGE = 0.9, 0.85, 0.8, 0.5
_IRREGULAR = {"be": "is", "am": "is", "'m": "is", "have": "has", "do": "does", "go": "goes"}
_PRONOUNS = {
    "my": "their",
    "i": "they",
    "me": "them",
    "mine": "theirs",
    "myself": "themself",
    "i'm": "they're",
    "i've": "they've",
    "i'd": "they'd",
    "i'll": "they'll",
    "our": "their",
    "ours": "theirs",
    "ourselves": "themselves",
    "we": "they",
    "us": "them",
    "we're": "they're",
    "we've": "they've",
    "we'd": "they'd",
    "we'll": "they'll",
}
_PRONOUN_WORD = re.compile(r"(?<![\w'])[A-Za-z]+(?:'[A-Za-z]+)?(?![\w'])")
# "I prefer X, and I always use Y": two statements, each read on its own.
_CLAUSE = re.compile(r",?\s+(?:and|but|so|while|plus)\s+(?=i(?:\s|'))", re.IGNORECASE)
# "I'm Maya", "My name is Maya Chen", "I'm Maya, a data scientist at Acme" (the name must
# be capitalised, so "I'm tired" is no name).
_NAME = re.compile(
    r"^(?i:i'm|i am|my name is|call me)\s+([A-Z][\w-]*(?:\s+[A-Z][\w-]*)?)(?:\s*,\s*(.+))?$"
)
_NOT_A_NAME_TEXT = """
    working building writing analyzing analysing trying going looking not also still
    just now here back sure happy glad sorry fine done ready new interested using from
    in at on with
"""
_NOT_A_NAME = frozenset(_NOT_A_NAME_TEXT.split())
_HEDGE = re.compile(r"^(?:i think i might|i think maybe i|maybe i|perhaps i|i might)\s+(.+)$")
_FORGET = re.compile(r"^(?:please\s+)?forget\s+(?:that\s+|about\s+|the fact that\s+)?(.+)$")
_NO_LONGER = re.compile(r"^i\s+(no longer|don't|do not)\s+(.+)$")
_STOPPED = re.compile(r"^i(?:'ve| have)?\s+stopped\s+(.+)$")
_ACTUALLY = re.compile(r"^actually,?\s+i\s+(.+?)(?:\s+instead(?:\s+of\s+(.+))?)?$")
_RULES: list[tuple[re.Pattern[str], str, float, str]] = [
    # (pattern, category, confidence, template); {v} is the verb phrase in third person.
    (
        re.compile(r"^i\s+(prefer|like|love|enjoy|always use)\s+(.+)$"),
        "preference",
        EXPLICIT,
        "{v}",
    ),
    (
        re.compile(r"^i\s+(use|usually|often|typically|tend to|normally)\s+(.+)$"),
        "behavior",
        HABIT,
        "{v}",
    ),
    (
        re.compile(r"^i(?:'m| am)\s+(working on|building|writing|analy[sz]ing)\s+(.+)$"),
        "context",
        EXPLICIT,
        "Is {v}",
    ),
    (
        re.compile(r"^i\s+(work on|work at|work for|work with|work in|work as)\s+(.+)$"),
        "context",
        EXPLICIT,
        "{v}",
    ),
    (
        re.compile(r"^my\s+(team|project|company|role|job|dataset|stack|manager|lab)\s+(.+)$"),
        "context",
        EXPLICIT,
        "Their {v}",
    ),
    (re.compile(r"^i(?:'m| am)\s+(an?|the)\s+(.+)$"), "context", EXPLICIT, "Is {v}"),
    (
        re.compile(r"^i\s+(know|am an expert in|specialize in|studied)\s+(.+)$"),
        "knowledge",
        EXPLICIT,
        "{v}",
    ),
    (
        re.compile(
            r"^(?:my goal is(?: to)?|i want to|i plan to|i'd like to|i hope to|i aim to|"
            r"i intend to|i need to)\s+(.+)$"
        ),
        "goal",
        GOAL,
        "Wants to {x}",
    ),
]


# One-time and task-only markers (the scope gate). Matched on the lower-cased statement.
_ONE_TIME = re.compile(
    r"\b(?:for|in|on) (?:this|the next|the following|that) (?:cell|answer|reply|response|"
    r"plot|chart|figure|table|run|query|output|one|step|message)\b|\bjust now\b|"
    r"\bthis time\b|\bfor now\b|\bright now\b|\bjust (?:for )?this once\b|"
    r"\bonly (?:this|once)\b|\b(?:for )?today\b|\bthis once\b"
)
_TASK = re.compile(
    r"\b(?:for|in|on|throughout) (?:this|the current) (?:session|conversation|thread|chat)\b"
)
_PROJECT = re.compile(
    r"\b(?:for|in|on|throughout) (?:this|the current|our) (?:notebook|task|analysis|dataset|"
    r"data ?set|exercise|assignment|report|file|project)\b|"
    r"\b(?:this|our|the) project(?:'s)?\b|\bproject's\b|\b(?:our|the) team\b"
)
_LEAD_IN = re.compile(
    r"^(?:just\s+)?(?:(?:for|in|on|throughout)\s+(?:this|the next|the current)\s+[\w ]{1,30}?|"
    r"this time|just now|for now|right now|today|this once)\s*,\s*"
)
# A request for something done now ("Show me the project's columns", "Let's plot the
# project's results", "Can you describe the dataset"): an action asked of the assistant,
# never a fact about the project (an instruction that sets a convention, "Use AUC in this
# project", is one).
_REQUEST = re.compile(
    r"^(?:please\s+|let's\s+|let\s+us\s+|(?:can|could|would|will)\s+you\s+|"
    r"(?:describe|explain|show|list|load|read|run|train|fit|compute|calculate|check|find|"
    r"tell|help|add|remove|drop|create|fix|compare|split|merge|filter|count|summari[sz]e|"
    r"look|open|save|export|import|clean|draw|plot|visuali[sz]e|predict|evaluate|try|"
    r"rename|convert|print|display|give|write|generate|search|recall|remind)\b)"
)
_IMPERATIVE = re.compile(
    r"^(?:please\s+)?(?:use|show|round|format|give|keep|print|plot|write|sort|display|"
    r"answer|reply|limit|make|don't|do not|avoid|only)\s+\S"
)


@dataclass
class _Fact:
    content: str
    category: str
    confidence: float
    scope: str = "user"
    durability: str = "durable"


def extract_diff(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The DeerFlow diff for the extraction prompt in ``messages`` (see docs/internals.md);
    for a consolidation prompt, ``{"merges": [...]}``."""
    prompt = _last_user_text(messages)
    if f"<{CONSOLIDATE_TAG}>" in prompt:
        return consolidate_reply(prompt)
    current = _between(prompt, "current_memory")
    existing = _existing_facts(current)
    facts: list[_Fact] = []
    removed: list[str] = []
    for statement in _user_statements(_between(prompt, "conversation")):
        _read_statement(statement, existing, facts, removed)
    diff = _diff(existing, facts, removed)
    said = [f.content for f in facts if f.scope == "project" and f.confidence >= 0.7]
    if said:
        before = re.search(r"^projectContext: (.*)$", current, re.MULTILINE)
        sentences = _SENTENCE.split(before.group(1)) if before else []
        lines = list(dict.fromkeys(s.strip() for s in [*sentences, *said] if s.strip()))
        diff["projectContext"] = {"summary": compose(lines), "shouldUpdate": True}
    return diff


def forget_requests(texts: list[str]) -> list[str]:
    """What the user asked to forget in ``texts`` (their messages), as they said it: "that I
    log experiments in MLflow" gives "I log experiments in MLflow". A reply must not quote
    such a fact back while the fold that removes it is still queued."""
    asked = []
    for text in texts:
        for sentence in _SENTENCE.split(text):
            for statement in _CLAUSE.split(sentence):
                clean = _clean(statement)
                low = clean.lower()
                if match := _FORGET.match(low):
                    asked.append(_groups(match, clean if len(low) == len(clean) else low)[0])
    return asked


def consolidate_reply(prompt: str) -> dict[str, Any]:
    """The offline consolidation: near-duplicates merged deterministically (``aging.py``)."""
    lines = []
    for line in _between(prompt, CONSOLIDATE_TAG).splitlines():
        if match := _FACT_LINE.match(line.strip()):
            handle, category, confidence, content = match.groups()
            lines.append((handle, category, content, float(confidence)))
    return {"merges": offline_merges(lines)}


def _scope_of(low: str) -> tuple[str, str]:
    """(scope, durability) of one statement, from its markers."""
    if _ONE_TIME.search(low):
        return "task", "one-time"
    if _TASK.search(low):
        return "task", "durable"
    if _PROJECT.search(low):
        return "project", "durable"
    return "user", "durable"


def _read_statement(
    text: str, existing: dict[str, tuple[str, str]], facts: list[_Fact], removed: list[str]
) -> None:
    before = len(facts)
    low = _clean(text).lower()
    # "For this cell, I prefer 3 decimals": the statement is read without its lead-in.
    lead = _LEAD_IN.match(low)
    _read_one(_clean(text)[lead.end() :] if lead else text, existing, facts, removed)
    scope, durability = _scope_of(low)
    if len(facts) == before and durability == "one-time" and _IMPERATIVE.match(low):
        # "Use 3 decimals for this cell": an instruction, proposed so the gate can say why
        # it is not kept.
        facts.append(_Fact(_sentence(_pronouns(_clean(text))), "preference", EXPLICIT))
    said = _clean(text)[lead.end() :] if lead else _clean(text)
    if (
        len(facts) == before
        and scope == "project"
        and not _FORGET.match(low)
        and not _REQUEST.match(said.lower())
        and len(said.split()) >= 3
    ):
        # "In this project, the target column is churned": kept as the user said it.
        facts.append(_Fact(_sentence(_pronouns(said)), "context", EXPLICIT))
    for fact in facts[before:]:
        fact.scope, fact.durability = scope, durability


def _read_one(
    text: str, existing: dict[str, tuple[str, str]], facts: list[_Fact], removed: list[str]
) -> None:
    text = _clean(text)
    low = text.lower()
    if len(low) != len(text):  # case folding changed the length: give up on keeping case
        text = low
    if not low:
        return
    if match := _FORGET.match(low):
        _remove_matching(_groups(match, text)[0], existing, facts, removed)
        return
    if (match := _NAME.match(text)) and match.group(1).split()[0].lower() not in _NOT_A_NAME:
        facts.append(_Fact(_sentence(f"Their name is {match.group(1)}"), "context", EXPLICIT))
        rest = match.group(2)
        if rest and re.match(r"(?i)(?:an?|the)\s", rest):
            _read_one(f"I am {rest}", existing, facts, removed)
        return
    correction = _correction(low, text)
    if correction is not None:
        content, target = correction
        _remove_matching(target, existing, facts, removed)
        facts.append(_Fact(content, "correction", EXPLICIT))
        return
    if match := _HEDGE.match(low):
        phrase = _third_person(_groups(match, text)[0], conjugate=False)
        facts.append(_Fact(_sentence("Might " + phrase), "goal", HEDGE))
        return
    for pattern, category, confidence, template in _RULES:
        if match := pattern.match(low):
            groups = _groups(match, text)
            phrase = _third_person(" ".join(groups), conjugate=template == "{v}")
            content = template.format(v=phrase, x=_pronouns(groups[-1]))
            facts.append(_Fact(_sentence(content), category, confidence))
            return


def _groups(match: re.Match[str], text: str) -> tuple[str, ...]:
    """The groups matched on the lower-cased text, cut from the original (case kept)."""
    return tuple(
        text[match.start(i) : match.end(i)] if match.start(i) >= 0 else None
        for i in range(1, (match.lastindex or 0) + 1)
    )  # type: ignore[return-value]


def _correction(low: str, text: str) -> tuple[str, str] | None:
    """(new fact, what it contradicts) for "I no longer …", "I stopped …", "Actually … instead"."""
    if match := _NO_LONGER.match(low):
        negation, rest = _groups(match, text)
        lead = "No longer " if negation.lower() == "no longer" else "Does not "
        return _sentence(lead + _third_person(rest, lead == "No longer ")), _object(rest)
    if match := _STOPPED.match(low):
        rest = _groups(match, text)[0]
        return _sentence("Stopped " + _pronouns(rest)), _object(rest)
    if match := _ACTUALLY.match(low):
        rest, replaced = (_groups(match, text) + (None, None))[:2]
        if replaced is None and " instead" not in low:
            return None
        content = _third_person(rest)
        if replaced:
            content += " instead of " + _pronouns(replaced)
        target = replaced or _verb(rest)
        return _sentence(content), target
    return None


def _remove_matching(
    query: str, existing: dict[str, tuple[str, str]], facts: list[_Fact], removed: list[str]
) -> None:
    """Remove the existing facts (and earlier new ones) sharing the most content words."""
    scores = {h: overlap(query, content) for h, (content, _) in existing.items()}
    best = max(scores.values(), default=0.0)
    if best >= 0.5:
        removed.extend(h for h, s in scores.items() if s == best and h not in removed)
    facts[:] = [f for f in facts if overlap(query, f.content) < 0.5]


def _object(phrase: str) -> str:
    """The part of "use pandas for data work" that names the thing: drop the leading verb."""
    words = phrase.split()
    return " ".join(words[1:]) if len(words) > 1 else phrase


def _verb(phrase: str) -> str:
    return phrase.split()[0] if phrase.split() else phrase


def _third_person(phrase: str, conjugate: bool = True) -> str:
    """'use pandas for my work' → 'uses pandas for their work'."""
    words = _pronouns(phrase).split()
    if conjugate and words:
        adverbs = {"always", "usually", "often", "typically", "normally", "really", "also"}
        i = 0
        while i < len(words) - 1 and words[i] in adverbs:
            i += 1
        words[i] = _conjugate(words[i])
    return " ".join(words)


def _conjugate(verb: str) -> str:
    if verb.lower() in _IRREGULAR:
        return _IRREGULAR[verb.lower()]
    if verb.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if verb.endswith("y") and len(verb) > 1 and verb[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def _pronouns(phrase: str) -> str:
    """First person (singular and plural) to third: 'my team and our 40 stores' → 'their
    team and their 40 stores'. An upper-case 'US' is the country, not 'us'."""

    def swap(match: re.Match[str]) -> str:
        word = match.group(0)
        if word.lower() == "us" and word != "us":
            return word
        return _PRONOUNS.get(word.lower(), word)

    return " ".join(_PRONOUN_WORD.sub(swap, phrase).split())


def _sentence(text: str) -> str:
    text = " ".join(text.split()).rstrip(" .!?;,")
    return text[:1].upper() + text[1:]


def _clean(text: str) -> str:
    return " ".join(text.replace("’", "'").split()).strip(" .!?;")


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages or []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else ""
    return ""


def _between(text: str, tag: str) -> str:
    match = re.search(rf"<{tag}>\n?(.*?)\n?</{tag}>", text, re.DOTALL)
    return match.group(1) if match else ""


def _existing_facts(block: str) -> dict[str, tuple[str, str]]:
    """``handle -> (content, category)`` from the ``- [f3] (category, 0.90) content`` lines."""
    facts = {}
    for line in block.splitlines():
        if match := _FACT_LINE.match(line.strip()):
            facts[match.group(1)] = (match.group(4), match.group(2))
    return facts


def _user_statements(conversation: str) -> list[str]:
    """The sentences of the ``User:`` blocks that state something, in order: a question
    ("What metric did we decide on for this project?") is never a fact, nor is assistant
    text."""
    parts = _BLOCK.split(conversation)
    statements = []
    for label, body in zip(parts[1::2], parts[2::2], strict=False):
        if label == "User":
            for sentence in _SENTENCE.split(body):
                if is_question(sentence):
                    continue
                statements.extend(c for c in _CLAUSE.split(sentence) if c.strip())
    return statements


def _diff(
    existing: dict[str, tuple[str, str]], facts: list[_Fact], removed: list[str]
) -> dict[str, Any]:
    """The classic diff; section summaries are rebuilt from the facts that remain."""
    kept = [(c, cat, 0.9) for h, (c, cat) in existing.items() if h not in removed]
    stored_sigs = {signature(c) for c, _, _ in kept}
    seen: set[frozenset[str]] = set()
    new_facts = []
    stored = []  # what the scope gate lets through: the summaries are rebuilt from it
    for fact in facts:
        sig = signature(fact.content)
        if sig in seen:
            continue
        seen.add(sig)
        durable = fact.scope in ("user", "project") and fact.durability == "durable"
        if sig in stored_sigs and not durable:
            continue
        # A stored fact said again is proposed again: the updater reinforces it (a
        # confirmation) instead of adding a second one.
        proposal: dict[str, Any] = {
            "content": fact.content,
            "category": fact.category,
            "confidence": fact.confidence,
        }
        if fact.scope != "user" or not durable:  # unlabelled: user-level and durable
            proposal.update(scope=fact.scope, durability=fact.durability)
        new_facts.append(proposal)
        mine = fact.scope == "user"  # the user's summaries hold the user's facts only
        if fact.confidence >= 0.7 and durable and mine and sig not in stored_sigs:
            kept.append((fact.content, fact.category, fact.confidence))
            stored.append(new_facts[-1])
    touched = {section_of(f["category"]) for f in stored if f["confidence"] >= 0.7}
    touched |= {section_of(existing[h][1]) for h in removed}
    user = {}
    for section in USER_SECTIONS:
        summary = compose([c for c, cat, _ in kept if section_of(cat) == section])
        user[section] = {"summary": summary, "shouldUpdate": section in touched and bool(summary)}
    history = {name: {"summary": "", "shouldUpdate": False} for name in HISTORY_SECTIONS}
    return {"user": user, "history": history, "newFacts": new_facts, "factsToRemove": removed}
