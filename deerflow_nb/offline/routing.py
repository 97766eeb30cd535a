"""The offline model's tool routing: which tool calls a user's message asks for.

Words decide: "describe", "columns of" and backticked names (checked against the notebook
variables the lead's system prompt lists), "cell 3", "run" before a code fence, "in
parallel" or "sub-agents" (``task``), "write code to …" (``propose_cell``), and the
memory tools' phrases ("remember that …", "what do you know about me", "what did we
discuss …").
"""

from __future__ import annotations

import hashlib
import json
import keyword
import re
from typing import Any

from ..llm.base import ToolCall
from .words import STOPWORDS, WORD_RE, content_words

# Words after "describe"/"look at" that are not variable names.
_NOT_NAME_TEXT = """
    variable variables dataframe dataframes data frame everything first second third last
    only table dataset columns column
"""
_NOT_NAMES = STOPWORDS | frozenset(_NOT_NAME_TEXT.split())

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
# The lead's system prompt lists the notebook's variables (see agent/notebook_tools.py):
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


def _call(name: str, arguments: dict[str, Any], seed: str, index: int) -> ToolCall:
    args = json.dumps(arguments, ensure_ascii=False)
    digest = hashlib.sha1(f"{seed}\0{name}\0{args}".encode()).hexdigest()[:12]
    return ToolCall(id=f"call_{digest}_{index}", name=name, arguments=args)


def choose_tools(
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


def error_calls(
    text: str,
    variables: list[str],
    names: set[str],
    position: int,
    known: tuple[dict[str, str], bool] | None,
) -> list[ToolCall]:
    """For a message carrying a failed cell (``cell_reports.find_error``): describe the
    notebook variables its failing line names (``variables``, at most three), so the answer
    can say what they hold (a DataFrame's columns against a missing key); none without the
    tool or the notebook's list of variables."""
    if "describe_variable" not in names or known is None:
        return []
    wanted = [v for v in variables if v in known[0]][:3]
    seed = f"{position}\0{text}"
    return [_call("describe_variable", {"name": v}, seed, i) for i, v in enumerate(wanted)]


def _memory_calls(text: str, names: set[str]) -> list[tuple[str, dict[str, Any]]]:
    """The memory tool calls a message asks for: "remember that …" (one ``remember`` per
    fact it states), "what do you know about me …" (``search_memory``), a question about
    earlier conversations (``recall``, with the words that say "earlier" left out)."""
    if "remember" in names and (match := _REMEMBER_RE.match(text)):
        return [
            ("remember", {"content": c, "category": k})
            for c, k in facts_to_remember(match.group(1))
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


def facts_to_remember(statement: str) -> list[tuple[str, str]]:
    """(content, category) for what "remember that …" states, in the third person: the
    offline extractor's reading of the statement (public protocol: ``extract_diff``) when
    it finds facts in it, else the statement with its pronouns turned and a category
    from simple word rules."""
    from .extractor import extract_diff

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


def known_variables(system: str) -> tuple[dict[str, str], bool] | None:
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
            name = variable_name(match.group(1))
            if name and name not in guessed:
                guessed.append(name)
    for match in _OWNER_RE.finditer(text):
        name = variable_name(match.group(1))
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


def variable_name(candidates: str) -> str | None:
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
    words = [w.lower() for w in WORD_RE.findall(request) if w.lower() not in STOPWORDS]
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


def unknown_variable(question: str, system: str) -> tuple[str, list[str]] | None:
    """For "describe df" when the listed variables (complete) have no ``df``: that name and
    the variables there are; None otherwise."""
    known = known_variables(system)
    if known is None or not known[1] or not _INTENT_RE.search(question):
        return None
    guessed = [
        variable_name(m.group(1))
        for pattern in (_DESCRIBE_RE, _ABOUT_RE)
        for m in pattern.finditer(question)
    ]
    guessed = [g for g in guessed if g and g not in known[0]]
    if not guessed:
        return None
    return guessed[0], list(known[0])
