"""Task prompts: the text an instruction-tuned embedder's card says to put before each input, by kind of task.

Today's embedders are trained with a prompt that depends on the task (e5: ``query: `` / ``passage: ``; nomic-embed:
``search_query: ``, ``classification: ``; e5-mistral, gte-Qwen2, Qwen3-Embedding: ``Instruct: ...\\nQuery:`` on the
query side only). A model embedded without its prompt gives numbers that are quietly wrong, so the prompts are part
of the model's spec (``prompts:`` in a catalog entry), hence of its spec hash, its units' fingerprints and its text
stores (one store per prompt: :func:`evalfarm.embed.store_key`).

A catalog writes them by **task type**, as sentence-transformers (a model's ``prompts``, chosen with
``prompt_name``) and MTEB (model prompts keyed by task type, task name and prompt type) do::

    prompts: {default: "query: ", classification: "query: ", retrieval-document: "passage: "}

Keys (:data:`PROMPT_KEYS`): ``default``; the task types (:data:`TASK_TYPES`, MTEB's STS / Classification /
Clustering / Retrieval); the sides of an asymmetric task (:data:`SIDES`, MTEB's prompt types ``query`` and
``document``), alone or after a type (``retrieval-query``); and ``tasks``, per-task overrides by task id (a prompt,
or ``{query: ..., document: ...}`` for the two sides of an EvalRank or DefSent task). A value is a prompt (a
non-empty string, prepended to the text as sentence-transformers does), ``{prompt_name: NAME}`` (the model's own
prompt of that name, from its ``config_sentence_transformers.json``), or null: no prompt there (not the default).

Which prompt a text gets (:func:`resolve`), most specific first, as MTEB's ``get_instruction``:

- a symmetric task (both sides of one kind of text: similarity, classification, clustering): the task's override,
  its type, ``default``;
- a side of an asymmetric task (DefSent's definition -> word; EvalRank's query -> pool when its override names
  sides): the task's override for the side, the task's override, ``<type>-<side>``, the type, the side,
  ``default``.

No key matching: no prompt.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, model_validator

TaskType = Literal["similarity", "classification", "clustering", "retrieval"]
TASK_TYPES: tuple[TaskType, ...] = ("similarity", "classification", "clustering", "retrieval")
"""The kinds of task evalfarm's task kinds fall into (each scorer declares one: ``Scorer.prompt_type``), named after
MTEB's task types: similarity (STS, EvalRank, HEROS), classification (the SentEval-style downstream tasks),
clustering (the geometry diagnostics), retrieval (DefSent's definition -> word)."""

Side = Literal["query", "document"]
SIDES: tuple[Side, ...] = ("query", "document")
"""The two sides of an asymmetric task (MTEB's prompt types; sentence-transformers' ``query`` / ``document``)."""

PROMPT_KEYS: tuple[str, ...] = (
    "default",
    *SIDES,
    *TASK_TYPES,
    *(f"{t}-{s}" for t in TASK_TYPES for s in SIDES),
)
"""Every key a ``prompts:`` mapping may hold besides ``tasks``."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


@dataclass(frozen=True)
class Prompt:
    """One resolved prompt: a literal ``text`` prepended to each input, or ``name``: the model's own prompt of that
    name (sentence-transformers' ``prompt_name``), whose text the model supplies when it loads. The empty prompt
    (:data:`NO_PROMPT`) is no prompt at all."""

    text: str = ""
    name: str | None = None

    @property
    def key(self) -> str:
        """What keys the prompt's text store (:func:`evalfarm.embed.store_key`): ``""`` for no prompt (the store of
        a model without prompts), else canonical JSON of the literal text or the name, so no literal can pass for a
        name."""
        if self.name is not None:
            return json.dumps({"prompt_name": self.name}, sort_keys=True, separators=(",", ":"))
        if not self.text:
            return ""
        return json.dumps({"text": self.text}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def describe(self) -> str:
        """How a person reads it: the text as Python would write it (newlines visible), or the name."""
        if self.name is not None:
            return f"prompt_name {self.name!r} (the model's own)"
        return repr(self.text) if self.text else "(none)"

    def __bool__(self) -> bool:
        return bool(self.text) or self.name is not None


NO_PROMPT = Prompt()


class PromptName(BaseModel):
    """``{prompt_name: NAME}``: the model's own prompt (``config_sentence_transformers.json``'s ``prompts``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    prompt_name: str = Field(pattern=_NAME.pattern, max_length=100)


def _value(raw: Any, where: str) -> str | PromptName | None:
    """A prompt value: a non-empty string, ``{prompt_name: ...}`` or null (no prompt)."""
    if raw is None:
        return None
    if isinstance(raw, str):
        if not raw.strip():
            raise ValueError(
                f"prompts: {where}: an empty prompt; write null for no prompt there, or leave the key out to use "
                "the default"
            )
        return raw
    if isinstance(raw, dict) and set(raw) == {"prompt_name"}:
        try:
            return PromptName.model_validate(raw)
        except Exception:
            raise ValueError(f"prompts: {where}: prompt_name {raw['prompt_name']!r} is not a prompt name") from None
    if isinstance(raw, PromptName):
        return raw
    raise ValueError(
        f"prompts: {where}: {raw!r} is not a prompt (a string, {{prompt_name: NAME}} for the model's own, or null)"
    )


def _task_value(raw: Any, task: str) -> Any:
    """A per-task override: a prompt value, or ``{query: ..., document: ...}`` (either side may be left out)."""
    if isinstance(raw, dict) and raw and set(raw) <= set(SIDES):
        return {side: _value(v, f"tasks.{task}.{side}") for side, v in raw.items()}
    if isinstance(raw, dict) and not (set(raw) == {"prompt_name"}):
        bad = sorted(set(raw) - set(SIDES)) or ["(nothing)"]
        raise ValueError(
            f"prompts: tasks.{task}: {', '.join(map(str, bad))} is not a side; a task's override is a prompt, or "
            "{query: ..., document: ...} for the two sides of an asymmetric task"
        )
    return _value(raw, f"tasks.{task}")


class Prompts(RootModel[dict[str, Any]]):
    """A model's ``prompts:`` mapping, validated (module docstring). Dumped as written (values normalised), so it
    hashes as the entry reads."""

    model_config = ConfigDict(frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        if isinstance(data, Prompts):
            return data.root
        if not isinstance(data, dict):
            raise ValueError(
                "prompts: a mapping of task types to prompts, e.g. {default: 'query: ', retrieval-document: "
                "'passage: '}"
            )
        if not data:
            raise ValueError("prompts: an empty mapping says nothing; drop the key")
        out: dict[str, Any] = {}
        for key, raw in data.items():
            if key == "tasks":
                out["tasks"] = _tasks(raw)
            elif key in PROMPT_KEYS:
                out[key] = _value(raw, str(key))
            else:
                raise ValueError(
                    f"prompts: unknown task type {key!r} (known: {', '.join(PROMPT_KEYS)}; per-task overrides go "
                    "under 'tasks')"
                )
        return out

    # -- reading --------------------------------------------------------------------------------------------------
    def get(self, key: str) -> tuple[bool, str | PromptName | None]:
        """(whether ``key`` is set, its value)."""
        return (key in self.root, self.root.get(key))

    def task(self, task_id: str) -> tuple[bool, Any]:
        """(whether the task has an override, the override: a value or a {side: value} mapping)."""
        tasks = self.root.get("tasks") or {}
        return (task_id in tasks, tasks.get(task_id))

    @property
    def task_ids(self) -> list[str]:
        return list(self.root.get("tasks") or {})

    def sided_tasks(self) -> list[str]:
        """The tasks whose override names sides (``{query: ..., document: ...}``)."""
        return [t for t, v in (self.root.get("tasks") or {}).items() if isinstance(v, dict)]

    def names(self) -> list[str]:
        """Every model prompt name the mapping refers to (``{prompt_name: ...}``)."""
        out: list[str] = []
        values = [v for k, v in self.root.items() if k != "tasks"]
        for v in (self.root.get("tasks") or {}).values():
            values.extend(v.values() if isinstance(v, dict) else [v])
        for v in values:
            if isinstance(v, PromptName):
                out.append(v.prompt_name)
        return list(dict.fromkeys(out))

    def literals(self) -> list[str]:
        """Every literal prompt text the mapping holds."""
        values = [v for k, v in self.root.items() if k != "tasks"]
        for v in (self.root.get("tasks") or {}).values():
            values.extend(v.values() if isinstance(v, dict) else [v])
        return list(dict.fromkeys(v for v in values if isinstance(v, str)))


def _tasks(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict) or not raw:
        raise ValueError("prompts: tasks: a mapping of task ids to prompts ({sts-b: '...'})")
    out = {}
    for task, value in raw.items():
        if not isinstance(task, str) or not _TASK_ID.match(task):
            raise ValueError(f"prompts: tasks: {task!r} is not a task id")
        out[task] = _task_value(value, task)
    return out


def _as_prompt(value: str | PromptName | None) -> Prompt:
    if value is None:
        return NO_PROMPT
    if isinstance(value, PromptName):
        return Prompt(name=value.prompt_name)
    return Prompt(text=value)


def resolve(prompts: Prompts | None, *, task: str, task_type: str, side: Side | None = None) -> Prompt:
    """The prompt of one task's texts (``side`` None: a symmetric task) under ``prompts`` (module docstring)."""
    if prompts is None:
        return NO_PROMPT
    chain: list[str] = []
    has, override = prompts.task(task)
    if has:
        if isinstance(override, dict):
            if side is not None and side in override:
                return _as_prompt(override[side])
        else:
            return _as_prompt(override)
    if side is not None:
        chain += [f"{task_type}-{side}", task_type, side, "default"]
    else:
        chain += [task_type, "default"]
    for key in chain:
        has, value = prompts.get(key)
        if has:
            return _as_prompt(value)
    return NO_PROMPT


@dataclass(frozen=True)
class TaskPrompts:
    """The prompts of one task's texts for one model: ``document`` for every text the task embeds (all of a symmetric
    task's), and ``query`` for its query side when the model embeds that side otherwise (None: symmetric)."""

    document: Prompt = NO_PROMPT
    query: Prompt | None = None

    @property
    def asymmetric(self) -> bool:
        return self.query is not None

    def describe(self) -> dict[str, str]:
        """{side: prompt as a person reads it}: one entry ``prompt`` for a symmetric task."""
        if self.query is None:
            return {"prompt": self.document.describe()}
        return {"query": self.query.describe(), "document": self.document.describe()}


def task_prompts(prompts: Prompts | None, *, task: str, task_type: str, sides: bool, asymmetric: bool) -> TaskPrompts:
    """A task's prompts under ``prompts``: ``sides`` says whether the task kind has a query side at all (EvalRank,
    DefSent), ``asymmetric`` whether it embeds its sides apart by default (DefSent; EvalRank only when the task's
    override names sides). Both sides resolving to one prompt make the task symmetric (one vector per text)."""
    if prompts is None:
        return TaskPrompts()
    has, override = prompts.task(task)
    split = sides and (asymmetric or (has and isinstance(override, dict)))
    if not split:
        return TaskPrompts(resolve(prompts, task=task, task_type=task_type))
    doc = resolve(prompts, task=task, task_type=task_type, side="document")
    query = resolve(prompts, task=task, task_type=task_type, side="query")
    return TaskPrompts(doc, None if query == doc else query)


def lineage_prompts(chain: Any) -> Prompts | None:
    """The prompts a model embeds with: its own, else its nearest base's (a derived model reads its base's vectors,
    embedded under the base's prompts)."""
    for spec in chain:
        got = getattr(spec, "prompts", None)
        if isinstance(got, Prompts):
            return got
    return None


def literal_prompts_only(prompts: Prompts | None, *, model: str, kind: str) -> None:
    """A kind whose models carry no prompts of their own takes only literal prompts: a ``prompt_name`` is an error
    naming the model."""
    if prompts is not None and (names := prompts.names()):
        raise ValueError(
            f"model {model!r}: a {kind} model has no prompts of its own to name ({', '.join(names)}): write the "
            "prompt's text (prompt_name: kinds sentence-transformers and transformers read "
            "config_sentence_transformers.json)"
        )


def describe_prompts(prompts: Prompts | None) -> str:
    """One line for a table cell: ``default='query: '; retrieval-document='passage: '; tasks: defsent``."""
    if prompts is None:
        return ""
    parts = []
    for key, value in prompts.root.items():
        if key == "tasks":
            parts.append(f"tasks: {', '.join(value)}")
        else:
            parts.append(f"{key}={_as_prompt(value).describe()}")
    return "; ".join(parts)


__all__ = [
    "NO_PROMPT",
    "PROMPT_KEYS",
    "SIDES",
    "TASK_TYPES",
    "Prompt",
    "PromptName",
    "Prompts",
    "Side",
    "TaskPrompts",
    "TaskType",
    "describe_prompts",
    "literal_prompts_only",
    "lineage_prompts",
    "resolve",
    "task_prompts",
]
