"""The embedded offline model: deterministic, key-free, and honest about what it is.

It speaks every protocol the real models are asked to speak (see docs/internals.md):
JSON extraction diffs, extractive summaries, notebook tool calls including ``task``
fan-out, answers built from tool results, sub-agent replies, and plain answers that
quote the remembered facts sharing words with the question. That makes every moving
part of the agent visible in a demo and testable without a network.
"""

from __future__ import annotations

import hashlib
import json
import keyword
import math
import re
from typing import Any

from ..llm.base import ChatModel, ChatResult, OnText, ToolCall, counted_usage
from ..tokens import count_tokens, truncate_to_tokens
from ..untrusted import escape_markdown

PREFIX = "(offline model) "
MAX_INPUT_TOKENS = 16_384
EMBEDDING_DIM = 256
SUMMARY_MAX_TOKENS = 300
TOOL_RESULT_MAX_TOKENS = 300
SUBAGENT_MARKER = "You are a sub-agent"
SUMMARY_TAG = "<conversation_to_summarize>"

_STOPWORD_TEXT = """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself
    just me more most my myself no nor not now of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves please tell know want
    like use using used also get got let lets make one two show give need any thing things really
"""
# Words too common to tie a question to a remembered fact ("every", "always", "thanks"):
# sharing one of them is not relevance.
_GENERIC_TEXT = """
    every always never often usually sometimes ever much many lot lots still even quite rather
    maybe perhaps something anything everything nothing someone anyone everyone way kind sort
    stuff etc per via across within without yes yeah okay ok thanks thank hi hello hey sure
    just well
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split()) | frozenset(_GENERIC_TEXT.split())
# Words after "describe"/"look at" that are not variable names.
_NOT_NAME_TEXT = """
    variable variables dataframe dataframes data frame everything first second third last
    only table dataset columns column
"""
_NOT_NAMES = STOPWORDS | frozenset(_NOT_NAME_TEXT.split())

_WORD_RE = re.compile(r"[A-Za-z0-9_]+")
_PIECE_RE = re.compile(r"\S+\s*|\s+")
_BULLET_RE = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+(.+?)\s*$", re.MULTILINE)
_FENCE_RE = re.compile(
    r"```[ \t]*(?:python|py|ipython)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE
)
_RUN_RE = re.compile(r"\b(?:run|execute)\b", re.IGNORECASE)
_LIST_RE = re.compile(r"\bvariables?\b|\bwhat data\b", re.IGNORECASE)
_NAMES = r"((?:`?[A-Za-z_][A-Za-z0-9_.]*`?\s*){1,3})"
_DESCRIBE_RE = re.compile(
    r"\b(?:describe|look\s+at|summari[sz]e|inspect)\s+" + _NAMES, re.IGNORECASE
)
# "what columns does sales have", "shape of sales", "how many rows in df", "sales's dtypes"
_ABOUT_RE = re.compile(
    r"\b(?:columns?|shape|dtypes?|schema|rows)\s+(?:does|do|did|of|in|for|are\s+in|has|have)\s+"
    + _NAMES,
    re.IGNORECASE,
)
_OWNER_RE = re.compile(
    r"(`?[A-Za-z_][A-Za-z0-9_]*`?)(?:'s|'|\u2019s)\s+(?:columns|shape|dtypes|schema|rows)\b",
    re.IGNORECASE,
)
# Asking about a variable: a describe verb, or its columns, shape, dtypes or rows.
_INTENT_RE = re.compile(
    r"\b(?:describe|look\s+at|summari[sz]e|inspect|columns?|shape|dtypes?|schema|"
    r"how\s+many\s+rows)\b",
    re.IGNORECASE,
)
_TICKED_RE = re.compile(r"(?<!`)`([A-Za-z_][A-Za-z0-9_]*)(?:\.[A-Za-z0-9_.]*)?`(?!`)")
_ORDINAL_RE = re.compile(
    r"\b(first|second|third|last|only)\s+(data\s*frame|frame|table|series|array|list|"
    r"dict(?:ionary)?|variable)s?\b",
    re.IGNORECASE,
)
_DATA_NOUN_RE = re.compile(
    r"\b(?:data\s*frames?|tables?|datasets?|arrays?|data)\b|\b(?:first|second|third|last)\b",
    re.IGNORECASE,
)
_REQUEST_LEADS = (
    ".",
    "!",
    "?",
    ":",
    ",",
    "please",
    "can you",
    "could you",
    "would you",
    "will you",
    "pls",
    "now",
    "then",
    "and",
    "also",
    "help me",
    "i need you to",
    "i'd like you to",
    "i want you to",
)
# The lead's system prompt lists the notebook's variables (see agent/tools.py):
# ``<notebook_variables>`` … ``- name: type`` lines …, and a ``- … and N more`` line when capped.
_VARIABLES_RE = re.compile(r"<notebook_variables>(.*?)</notebook_variables>", re.DOTALL)
_VARIABLE_LINE_RE = re.compile(r"^-\s*([^\W\d]\w*)\s*:\s*(\S.*)$")
_KIND_OF = {
    "dataframe": "DataFrame",
    "frame": "DataFrame",
    "table": "DataFrame",
    "series": "Series",
    "array": "ndarray",
    "list": "list",
    "dict": "dict",
    "dictionary": "dict",
}
_WRITE_CODE_RE = re.compile(
    r"\b(?:write|generate|draft|give\s+me|create)\s+(?:me\s+)?(?:a\s+|an\s+|some\s+|the\s+)?"
    r"(?:python\s+|small\s+|short\s+|simple\s+|quick\s+)*"
    r"(?:code|function|snippet|script|helper|cell|class)\b"
    r"(?:[ \t]+(?:that|to|which|for|in\s+order\s+to)\b)?",
    re.IGNORECASE,
)
_CELL_RE = re.compile(r"\bcell\s*(?:#|number\s*)?(\d+)\b|\bIn\s*\[\s*(\d+)\s*\]", re.IGNORECASE)
_TASK_RE = re.compile(r"\bsub-?\s?agents?\b|\bin parallel\b|\bdelegat", re.IGNORECASE)
# Memory tools (the lead's): "remember that …" → remember; "what do you know about me" →
# search_memory; a question about earlier conversations → recall.
_QUESTION_WORDS = r"(?:what|when|where|who|whom|how|whether|if|why|which)\b"
_REMEMBER_RE = re.compile(
    r"^\s*(?:(?:please|ok(?:ay)?|and|also|now|hey)[,\s]+)*"
    r"(?:(?:can|could|would|will)\s+you\s+)?(?:please\s+)?"
    r"(?:remember|note|keep\s+in\s+mind|don'?t\s+forget|make\s+a\s+note)"
    r"(?:\s+that\b)?[\s:,]+(?!" + _QUESTION_WORDS + r")(\S.*)$",
    re.IGNORECASE | re.DOTALL,
)
_SEARCH_MEMORY_RE = re.compile(
    r"\bwhat\s+(?:else\s+)?(?:do|did|can)\s+you\s+(?:remember|know|recall)\s+about\s+"
    r"(?=(?:me|myself|us|my|our)\b)|"
    r"\bwhat\s+(?:have\s+you|did\s+you)\s+(?:remembered|learned|learnt|stored|memori[sz]ed)\b"
    r"(?:\s+about\b)?|"
    r"\bwhat(?:'s|\s+is)\s+in\s+(?:your\s+)?memory\b(?:\s+about\b)?|"
    r"\bsearch\s+(?:your\s+)?memory\s+(?:for\s+)?",
    re.IGNORECASE,
)
_RECALL_VERBS = (
    r"(?:discuss(?:ed)?|talk(?:ed)?|say|said|tell|told|mention(?:ed)?|decide[d]?|write|wrote|"
    r"agree[d]?|chat(?:ted)?|plan(?:ned)?|cover(?:ed)?)"
)
_RECALL_RE = re.compile(
    r"\b(?:what|which|when|where|how)\b(?:\s+\w+){0,3}?\s+(?:did|have|had)\s+(?:we|i|you)\s+"
    r"(?:ever\s+|already\s+)?" + _RECALL_VERBS + r"\b(?:\s+(?:to\s+)?(?:you|me))?"
    r"(?:\s+(?:about|on|regarding|for))?|"
    r"\b(?:did|have)\s+(?:we|i)\s+(?:ever\s+|already\s+)?" + _RECALL_VERBS + r"\b"
    r"(?:\s+(?:to\s+)?(?:you|me))?(?:\s+(?:about|on|regarding))?|"
    r"\bdo\s+you\s+remember\s+(?!(?:me|myself)\b)(?:what|when|where|how|whether|if)?\b"
    r"(?:\s+(?:we|i|you)\s+" + _RECALL_VERBS + r"(?:\s+(?:about|on))?)?|"
    r"\bremember\s+(?:what|when|where|how|whether|if)\b"
    r"(?:\s+(?:we|i|you)\s+" + _RECALL_VERBS + r"(?:\s+(?:about|on))?)?|"
    r"\bremind\s+me\s+(?:what|of|about)\b|"
    r"\b(?:last|the\s+other)\s+(?:time|day|week|session)\b|"
    r"\b(?:earlier|previously|before)\b(?=[^?.!]*\b(?:we|i|you)\s+" + _RECALL_VERBS + r"\b)",
    re.IGNORECASE,
)
_PLAIN_PRONOUNS = {
    "i": "they", "me": "them", "my": "their", "mine": "theirs", "myself": "themself",
    "i'm": "they're", "i've": "they've", "i'd": "they'd", "i'll": "they'll",
    "we": "they", "us": "them", "our": "their", "ours": "theirs", "we're": "they're",
}  # fmt: skip
_CATEGORY_RULES = (
    ("correction", re.compile(r"\b(?:no longer|not anymore|stopped|instead)\b", re.I)),
    ("preference", re.compile(r"\b(?:prefers?|likes?|loves?|favou?rite|rather|enjoys?)\b", re.I)),
    ("goal", re.compile(r"\b(?:wants? to|plans? to|goal|needs? to|deadline|aims? to)\b", re.I)),
    ("behavior", re.compile(r"\b(?:always|usually|often|never|uses?|runs?)\b", re.I)),
    ("knowledge", re.compile(r"\b(?:knows?|expert|studied|specializ)\w*", re.I)),
)
_MEMORY_RE = re.compile(r"<memory>(.*?)</memory>", re.DOTALL)
_FACT_RE = re.compile(r"^-\s*(?:\[[^\]]*\]\s*)?(?:\([^)]*\)\s*)?(.+)$")
_ROLE_RE = re.compile(r"^(User|Assistant|Human|AI|Tool result)\s*:", re.MULTILINE | re.IGNORECASE)
_SUMMARY_HEAD = "Summary of earlier conversation:\n"
_BULLET_SAID = "- The user said: "
_SENTENCE_RE = re.compile(r"(.+?[.!?])(?:\s|$)", re.DOTALL)


def message_text(message: Any) -> str:
    """The text of a message whatever shape its content has (str, content parts, None)."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def _stem(word: str) -> str:
    """A crude suffix strip so 'prefers'/'prefer' and 'dataframes'/'dataframe' match."""
    word = word.lower()
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def content_words(text: str) -> list[str]:
    """Stemmed words of ``text`` without stopwords, in order, without repeats."""
    seen: dict[str, None] = {}
    for word in _WORD_RE.findall(text):
        if word.lower() in STOPWORDS or len(word) < 2:
            continue
        seen.setdefault(_stem(word), None)
    return list(seen)


def hashed_embedding(text: str, dim: int = EMBEDDING_DIM) -> list[float]:
    """A deterministic L2-normalised hashed bag of words: shared words give high cosine."""
    vector = [0.0] * dim
    for word in _WORD_RE.findall(text.lower()):
        digest = hashlib.blake2b(_stem(word).encode(), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        vector[value % dim] += 1.0 if (value >> 63) & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector] if norm else vector


def _key_terms(text: str, limit: int = 6) -> list[str]:
    """Content words in their original spelling, first occurrences, at most ``limit``."""
    terms: dict[str, str] = {}
    for word in _WORD_RE.findall(text):
        if word.lower() in STOPWORDS or len(word) < 3:
            continue
        terms.setdefault(_stem(word), word)
    return list(terms.values())[:limit]


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    match = _SENTENCE_RE.match(text)
    return match.group(1) if match else text


def _tool_names(tools: list[dict[str, Any]] | None) -> set[str]:
    names = set()
    for tool in tools or []:
        if not isinstance(tool, dict):
            continue
        fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        if isinstance(fn.get("name"), str):
            names.add(fn["name"])
    return names


class OfflineModel(ChatModel):
    """A deterministic stand-in for a chat model; every reply says it is the offline model."""

    name = "offline"
    max_input_tokens = MAX_INPUT_TOKENS

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        json_mode: bool = False,
        on_text: OnText | None = None,
    ) -> ChatResult:
        """Dispatch on the protocol the messages follow; stream the text word by word."""
        messages = [m for m in messages or [] if isinstance(m, dict)]
        content, calls = self._respond(messages, tools, json_mode)
        if on_text is not None:
            for piece in _PIECE_RE.findall(content):
                on_text(piece)
        return ChatResult(
            content=content,
            tool_calls=calls,
            usage=counted_usage(messages, content, calls),
            model=self.name,
            finish_reason="tool_calls" if calls else "stop",
        )

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Hashed bag-of-words vectors, the same ones the loopback server returns."""
        return [hashed_embedding(t if isinstance(t, str) else "") for t in texts]

    def _respond(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, json_mode: bool
    ) -> tuple[str, list[ToolCall]]:
        if json_mode:
            from .extraction import extract_diff

            return json.dumps(extract_diff(messages)), []
        last = messages[-1] if messages else {}
        role = last.get("role")
        text = message_text(last)
        if role == "user" and not tools and text.lstrip().startswith(SUMMARY_TAG):
            return _summary(text), []
        names = _tool_names(tools)
        system = "\n".join(message_text(m) for m in messages if m.get("role") == "system")
        if names and role == "user":
            calls = _choose_tools(text, names, len(messages), _known_variables(system))
            if calls:
                return "", calls
        if role == "tool":
            return _answer_from_tools(messages), []
        if SUBAGENT_MARKER in system:
            return _subagent_answer(_last_user_text(messages)), []
        return _plain_answer(_last_user_text(messages), system), []


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return message_text(message)
    return ""


def _summary(text: str) -> str:
    """One bullet per user turn (its first sentence), oldest dropped first to fit the budget.

    Bullets of a previous summary quoted in the conversation are carried over, so
    summarizing twice does not forget what the first summary kept.
    """
    body = text.split(SUMMARY_TAG, 1)[1].split("</conversation_to_summarize>", 1)[0]
    blocks = _ROLE_RE.split(body)
    carried = [line.strip() for line in blocks[0].splitlines() if _BULLET_SAID in line]
    carried = [line[line.index(_BULLET_SAID) :] for line in carried]
    said = [
        f"{_BULLET_SAID}{_first_sentence(blocks[i + 1])}"
        for i in range(1, len(blocks) - 1, 2)
        if blocks[i].lower() in ("user", "human") and blocks[i + 1].strip()
    ]
    if not said and not carried:
        said = [f"{_BULLET_SAID}{_first_sentence(ln)}" for ln in body.splitlines() if ln.strip()]
    bullets = carried + said or ["- (nothing to summarize)"]
    while (
        len(bullets) > 1 and count_tokens(_SUMMARY_HEAD + "\n".join(bullets)) > SUMMARY_MAX_TOKENS
    ):
        bullets.pop(0)
    return truncate_to_tokens(_SUMMARY_HEAD + "\n".join(bullets), SUMMARY_MAX_TOKENS)


def _call(name: str, arguments: dict[str, Any], seed: str, index: int) -> ToolCall:
    args = json.dumps(arguments, ensure_ascii=False)
    digest = hashlib.sha1(f"{seed}\0{name}\0{args}".encode()).hexdigest()[:12]
    return ToolCall(id=f"call_{digest}_{index}", name=name, arguments=args)


def _choose_tools(
    text: str,
    names: set[str],
    position: int,
    known: tuple[dict[str, str], bool] | None = None,
) -> list[ToolCall]:
    """Pick tools from the words of the user's message; several may fire at once.

    ``known`` is the notebook's variables (name → type) and whether that list is
    complete, when the system prompt carries them (the lead's does); with it, the
    variables the message names are described, not the words after "describe".
    """
    seed = f"{position}\0{text}"
    if "task" in names and _TASK_RE.search(text):
        bullets = _BULLET_RE.findall(text) or [text.strip()]
        return [
            _call(
                "task",
                {
                    "description": _short(bullet),
                    "prompt": bullet,
                    "subagent_type": "general-purpose",
                },
                seed,
                i,
            )
            for i, bullet in enumerate(b for b in bullets if b.strip())
        ]
    if "propose_cell" in names and (request := _code_request(text)) is not None:
        return [_call("propose_cell", {"code": _code_stub(request, text)}, seed, 0)]
    if memory := _memory_calls(text, names):
        return [_call(name, args, seed, i) for i, (name, args) in enumerate(memory)]
    wanted: list[tuple[str, dict[str, Any]]] = []
    if "list_variables" in names and _LIST_RE.search(text):
        wanted.append(("list_variables", {}))
    if "describe_variable" in names:
        targets, list_instead = _describe_targets(text, known)
        for name in targets:
            wanted.append(("describe_variable", {"name": name}))
        if list_instead and "list_variables" in names and ("list_variables", {}) not in wanted:
            wanted.insert(0, ("list_variables", {}))
    if "read_cell" in names:
        for match in _CELL_RE.finditer(text):
            part = "output" if "output" in text.lower() else "source"
            number = int(match.group(1) or match.group(2))
            wanted.append(("read_cell", {"number": number, "part": part}))
    if "run_code" in names:
        run = _RUN_RE.search(text)
        fence = _FENCE_RE.search(text)
        if run and fence and run.start() < fence.start():
            wanted.append(("run_code", {"code": fence.group(1).rstrip("\n")}))
    return [_call(name, args, seed, i) for i, (name, args) in enumerate(wanted)]


def _memory_calls(text: str, names: set[str]) -> list[tuple[str, dict[str, Any]]]:
    """The memory tool calls a message asks for: "remember that …" (one ``remember`` per
    fact it states), "what do you know about me …" (``search_memory``), a question about
    earlier conversations (``recall``, with the words that say "earlier" left out)."""
    if "remember" in names and (match := _REMEMBER_RE.match(text)):
        return [
            ("remember", {"content": c, "category": k})
            for c, k in _facts_to_remember(match.group(1))
        ]
    if "search_memory" in names and (match := _SEARCH_MEMORY_RE.search(text)):
        rest = text[match.end() :]
        rest = re.sub(r"^\s*(?:me|myself|us)\b[\s,]*(?:and\s+)?", "", rest, flags=re.I)
        rest = re.sub(r"\b(?:so\s+far|yet|until\s+now|already)\b", " ", rest, flags=re.I)
        query = " ".join(rest.split()).strip(" ?.!,;:")
        return [("search_memory", {"query": query if content_words(query) else ""})]
    if "recall" in names and _RECALL_RE.search(text):
        query = " ".join(_RECALL_RE.sub(" ", text).split()).strip(" ?.!,;:")
        query = re.sub(r"^(?:about|on|regarding|the\s+time)\s+", "", query, flags=re.I)
        if not content_words(query):
            query = " ".join(text.split()).strip(" ?.!")
        return [("recall", {"query": query})]
    return []


def _facts_to_remember(statement: str) -> list[tuple[str, str]]:
    """(content, category) for what "remember that …" states, in the third person: the
    offline extractor's reading of the statement (public protocol: ``extract_diff``) when
    it finds facts in it, else the statement with its pronouns turned and a category
    from simple word rules."""
    from .extraction import extract_diff

    statement = " ".join(statement.split()).strip(" .!;")
    prompt = (
        f"<current_memory>\n</current_memory>\n<conversation>\nUser: {statement}\n</conversation>"
    )
    diff = extract_diff([{"role": "user", "content": prompt}])
    found = [
        (str(f["content"]), str(f["category"]))
        for f in diff.get("newFacts", [])
        if isinstance(f, dict) and f.get("content")
    ]
    if found:
        return found
    words = re.sub(
        r"(?<![\w'])[A-Za-z]+(?:'[A-Za-z]+)?(?![\w'])",
        lambda m: (
            _PLAIN_PRONOUNS.get(m.group(0).lower(), m.group(0))
            if m.group(0) != "US"
            else m.group(0)
        ),
        statement,
    )
    content = words[:1].upper() + words[1:]
    category = next((c for c, rule in _CATEGORY_RULES if rule.search(statement)), "context")
    return [(content, category)]


def _known_variables(system: str) -> tuple[dict[str, str], bool] | None:
    """The variables the system prompt lists (name → type) and whether the list is whole."""
    match = _VARIABLES_RE.search(system)
    if match is None:
        return None
    variables: dict[str, str] = {}
    complete = True
    for line in match.group(1).splitlines():
        line = line.strip()
        if line.startswith("- …") or line.startswith("- ..."):
            complete = False
        elif found := _VARIABLE_LINE_RE.match(line):
            variables.setdefault(found.group(1), found.group(2).strip())
    return variables, complete


def _describe_targets(
    text: str, known: tuple[dict[str, str], bool] | None
) -> tuple[list[str], bool]:
    """The variables a message asks about, and whether to list the variables instead.

    Backticked names win; then the known variables the message names (or "the first
    dataframe"); without a (complete) list of them, the word after "describe", "columns
    of", ... that is not a filler word. A question about data that names nothing the
    notebook has lists the variables rather than guess.
    """
    if not _INTENT_RE.search(text):
        return [], False
    ticked = list(dict.fromkeys(m.group(1) for m in _TICKED_RE.finditer(text)))
    if ticked:
        return ticked, False
    if known is not None:
        variables, complete = known
        named = _named_variables(text, variables)
        if named:
            return named, False
        if ordinal := _ordinal_variable(text, variables):
            return [ordinal], False
        if complete:
            return [], bool(_DATA_NOUN_RE.search(text))
    guessed: list[str] = []
    for pattern in (_DESCRIBE_RE, _ABOUT_RE):
        for match in pattern.finditer(text):
            name = _variable_name(match.group(1))
            if name and name not in guessed:
                guessed.append(name)
    for match in _OWNER_RE.finditer(text):
        name = _variable_name(match.group(1))
        if name and name not in guessed:
            guessed.append(name)
    if guessed:
        return guessed, False
    return [], bool(_DATA_NOUN_RE.search(text))


def _named_variables(text: str, variables: dict[str, str]) -> list[str]:
    """Known variable names the message uses as words, in order (exact case first; a
    name that is also a filler word, like ``a`` or ``it``, only when exact)."""
    words = re.findall(r"[^\W\d]\w*", text)
    named = [w for w in words if w in variables and w.lower() not in STOPWORDS]
    if not named:
        lower = {}
        for name in variables:
            lower.setdefault(name.lower(), []).append(name)
        named = [
            lower[w.lower()][0]
            for w in words
            if len(lower.get(w.lower(), ())) == 1 and w.lower() not in STOPWORDS
        ]
    return list(dict.fromkeys(named))


def _ordinal_variable(text: str, variables: dict[str, str]) -> str | None:
    """ "the first dataframe", "the last list", "the only array": by the listed order."""
    match = _ORDINAL_RE.search(text)
    if match is None:
        return None
    wanted = _KIND_OF.get(re.sub(r"\s+", "", match.group(2).lower()))
    pool = [
        name
        for name, type_name in variables.items()
        if wanted is None or type_name.split(",")[0].strip().split(".")[-1] == wanted
    ]
    which = match.group(1).lower()
    if not pool or (which == "only" and len(pool) != 1):
        return None
    index = {"first": 0, "second": 1, "third": 2, "last": -1, "only": 0}[which]
    return pool[index] if -len(pool) <= index < len(pool) else None


def _variable_name(candidates: str) -> str | None:
    """The first identifier after 'describe' that is not a filler word ('the', 'my', ...)."""
    for raw in candidates.split():
        word = raw.strip("`").split(".")[0]
        if word.isidentifier() and word.lower() not in _NOT_NAMES:
            return word
        if raw.startswith("`"):
            return None
    return None


def _code_request(text: str) -> str | None:
    """What "write code to …" asks for, when it is a request ("Please write a function
    that …", "Can you write code to …"), not a statement ("I write code for a living")."""
    for match in _WRITE_CODE_RE.finditer(text):
        before = text[: match.start()].rstrip().lower()
        if not before or before.endswith(_REQUEST_LEADS):
            return text[match.end() :]
    return None


def _code_stub(request: str, text: str) -> str:
    """What the offline model proposes for "write code to …": an honest stub named after
    the request (it writes no real code), the request only in a comment and a literal."""
    request = " ".join(request.split()).rstrip(" .!?:") or " ".join(text.split())
    request = "".join(ch for ch in request if ch.isprintable())[:200]
    words = [w.lower() for w in _WORD_RE.findall(request) if w.lower() not in STOPWORDS]
    name = "_".join(words[:4]) or "proposed"
    if name[0].isdigit():
        name = "step_" + name
    if keyword.iskeyword(name):
        name += "_"
    return (
        f"# Proposed by the offline model for: {request}\n"
        "# It writes no real code: fill in this stub, or configure a real model\n"
        "# (OPENAI_API_KEY, or OPENAI_BASE_URL for another server) to have it written.\n"
        f"def {name}():\n"
        f"    raise NotImplementedError({request!r})\n"
    )


def _short(text: str, words: int = 6) -> str:
    parts = text.split()
    short = " ".join(parts[:words])
    return short + ("…" if len(parts) > words else "")


def _answer_from_tools(messages: list[dict[str, Any]]) -> str:
    """Restate the trailing tool results, each truncated, naming the tool that produced it
    (a sub-agent by its task's description; its report loses its own offline-model mark),
    each one list item: a one-line result inline, a longer one (a DataFrame's dtypes and
    head, a report) as a fenced code block under its item, so Markdown keeps its lines."""
    results = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        results.append(message)
    results.reverse()
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                names[str(call.get("id"))] = _result_label(call["function"])
    lines = [f"{PREFIX}Here is what the tools returned:"]
    for message in results:
        name = names.get(str(message.get("tool_call_id")), message.get("name") or "tool")
        text = message_text(message).strip().removeprefix(PREFIX)
        lines.append(_result_item(name, truncate_to_tokens(text, TOOL_RESULT_MAX_TOKENS)))
    return "\n".join(lines)


def _result_item(name: str, text: str) -> str:
    """``- name: result`` for one line; for more, ``- name:`` and the lines as a code block
    indented under the item, fenced longer than any backtick run inside."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").strip("\n")
    if not text.strip():
        return f"- {name}: (no output)"
    if "\n" not in text:
        return f"- {name}: {text.strip()}"
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    lines = text.expandtabs(4).split("\n")
    body = "\n".join(f"  {line}" if line.strip() else "" for line in lines)
    return f"- {name}:\n  {fence}text\n{body}\n  {fence}"


def _result_label(function: dict[str, Any]) -> str:
    """How an answer names a call's result: the tool, or for ``task`` the sub-agent's job."""
    name = str(function.get("name", "tool"))
    if name != "task":
        return name
    try:
        description = json.loads(function.get("arguments") or "{}").get("description")
    except (ValueError, AttributeError):
        description = None
    if not isinstance(description, str) or not description:
        return name
    return f"sub-agent **{escape_markdown(description)}**"  # the model's words, read literally


def _subagent_answer(task: str) -> str:
    terms = _key_terms(task)
    words = len(task.split())
    detail = f"key terms: {', '.join(terms)}" if terms else "no key terms"
    return f"{PREFIX}Sub-agent result for: {' '.join(task.split())}\n({words} words; {detail}.)"


def _plain_answer(question: str, system: str) -> str:
    """Say which variables exist when the question asks about one the notebook lacks; quote
    remembered facts sharing content words with the question; else acknowledge it."""
    if missing := _missing_variable(question, system):
        return missing
    wanted = set(content_words(question))
    quoted = []
    for block in _MEMORY_RE.findall(system):
        for line in block.partition("\nFacts:\n")[2].splitlines():
            match = _FACT_RE.match(line.strip())
            if match and wanted & set(content_words(match.group(1))):
                quoted.append(match.group(1).strip().rstrip("."))
    if quoted:
        return f"{PREFIX}From memory: " + "; ".join(dict.fromkeys(quoted)) + "."
    if not question.strip():
        return f"{PREFIX}I received an empty message."
    terms = _key_terms(question)
    about = f" about {', '.join(terms)}" if terms else ""
    return (
        f"{PREFIX}I read your message{about}. I am the built-in offline model: I can call "
        "notebook tools and quote remembered facts. For real answers, configure a real "
        "model (OPENAI_API_KEY, or OPENAI_BASE_URL for another server)."
    )


def _missing_variable(question: str, system: str) -> str | None:
    """For "describe df" when the listed variables have no ``df``: name what there is."""
    known = _known_variables(system)
    if known is None or not known[1] or not _INTENT_RE.search(question):
        return None
    guessed = [
        _variable_name(m.group(1))
        for pattern in (_DESCRIBE_RE, _ABOUT_RE)
        for m in pattern.finditer(question)
    ]
    guessed = [g for g in guessed if g and g not in known[0]]
    if not guessed:
        return None
    names = list(known[0])
    shown = ", ".join(f"`{n}`" for n in names[:10]) + (" …" if len(names) > 10 else "")
    has = f"it has {shown}" if names else "it has no variables yet"
    example = f" (for example: describe `{names[0]}`)" if names else ""
    return (
        f"{PREFIX}Your notebook has no variable named `{guessed[0]}`; {has}. "
        f"Name one to look at it{example}."
    )
