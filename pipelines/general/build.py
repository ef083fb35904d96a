"""``synth build general``: the general half of the system-prompt switch — the base model's own answers to
general prompts, as SFT chat rows with no system prompt.

    from tansaku.pipelines.general.build import GeneralConfig, build_general
    build_general(GeneralConfig(prompts="examples/general_prompts.jsonl", llm="transformers:tiny",
                                max_tokens=256), out="out/general")
    # CLI: synth build general --prompts FILE|hf:OWNER/NAME --llm SPEC --out DIR [--reasoning]
    #      [--max-tokens N] [--temperature T] [--limit N] [--seed S] [--heldout-share F] [--license ID] [-q]
    # (every option is a GeneralConfig field: tansaku.pipelines.general.config)

Why: SFT that teaches a model to search again and to reason in Japanese pulls it far from its own output
distribution, and its general skills drop (the blog's SFTでの精度劣化). The fix is to train two things at
once: the Japanese agentic rows *with* the agentic system prompt (``synth build trajectories``), and general
rows *without* one whose answers stay close to what the base model already says. This pipeline writes the
second: each prompt goes to ``--llm`` (the base model you will fine-tune) as it is, no system prompt added,
and its answer becomes the assistant turn. ``synth build trajectories --general DIR`` mixes the ``train``
split in; ``train sft`` reads it as a data source; ``train eval --task general --dataset DIR`` scores the
held-out ``test`` split (prompts SFT never saw) for retention.

Input (``--prompts``): a ``.jsonl`` / ``.json`` (list) / ``.parquet`` file, a dataset folder (its ``train``
split), or a Hub dataset ``hf:OWNER/NAME[:CONFIG][@REVISION][#SPLIT]`` read from the local HF cache, never
downloaded (``tansaku.core.chat_sources``: the manifest's ``inputs`` and ``hub_inputs`` and the card
record its commit sha; its card's license is the default). Each row is mapped from the common chat columns
(``chat_sources.chat_messages``): ``messages``, ``conversations`` (ShareGPT ``from``/``value``), ``prompt``
(text, or TRL's list of messages) [+ ``response``/``completion``], ``instruction`` [+ ``input``] [+
``output``]; trailing assistant turns are dropped, so a chat set's reference answers are replaced by the base
model's own. An optional ``id`` names the prompt (default: a hash of its turns). A row with a system message
is dropped: the general half is generated and trained without one.

Stages and drop reasons: ``prompts`` (``unmappable``: none of those columns; ``bad_prompt``: not an object,
a malformed column, a system or tool message, an empty user turn, a bad JSON line — one record, not the
build), ``dedup`` (``duplicate_id``), ``generate`` (``llm_error``, ``truncated``: the backend stopped at
``max_tokens``, ``empty_answer``). Row of both splits::

    {id: "general-<prompt_id>", prompt_id, kind: "general", finish_reason,
     messages: [{role, content, reasoning_content}, …, {role: "assistant", content: answer,
                reasoning_content: the model's reasoning with --reasoning, else null}]}
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from tansaku.core import jsontext
from tansaku.core.chat_sources import (
    FORMATS,
    HubData,
    UnusableRow,
    chat_messages,
    load_hub_rows,
    parse_hub_source,
    repo_id_hint,
    snapshot,
)
from tansaku.core.context import BuildContext
from tansaku.core.engine import Drop, batch_stage, global_stage, map_stage
from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.heldout import HeldOut
from tansaku.core.jsonl import BadLine, iter_jsonl
from tansaku.core.licenses import choose_license
from tansaku.core.llm import ChatRequest
from tansaku.core.out_folder import precheck_out
from tansaku.core.parsing import split_think, strip_end_markers
from tansaku.core.provenance import describe_input
from tansaku.core.store import StoreError, build_dataset, read_records
from tansaku.pipelines.general.config import GeneralConfig

PIPELINE = "general"
# 2: the config is GeneralConfig's fields (prompts, llm, seed, heldout_share, keep_rejected, license_file,
# batch_size, chunk_size join reasoning/max_tokens/temperature/limit/license)
# 3: rows are mapped from the common chat columns (chat_sources.chat_messages: messages first, then
# conversations, prompt, instruction); a row with none of them is dropped as `unmappable`
PIPELINE_VERSION = "3"
MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string()), ("reasoning_content", pa.string())])
COLUMN_TYPES = {"messages": pa.list_(MESSAGE), "prompt_id": pa.string(), "kind": pa.string(),
                "finish_reason": pa.string()}
ROLES = ("user", "assistant")
# What fixes a build that kept no answer (tansaku.core.out_folder.refuse_empty).
EMPTY_HINTS = {
    "input": "the prompt file has no rows",
    "generate:truncated": "every answer stopped at --max-tokens: raise --max-tokens",
    "generate:empty_answer": "the model wrote no answer text: check --llm (a chat model) and --max-tokens "
                             "(a reasoning model may spend them all thinking; keep it with --reasoning)",
    "generate:llm_error": "the backend failed on every prompt: check --llm",
    "generate": "check --llm and --max-tokens",
}


@dataclass
class Prompts:
    """The prompt rows of ``--prompts`` and what the build records about where they came from."""

    records: list[dict]  # {"row": value, "where": …} | {"bad": why, "where": …}
    name: str  # the dataset's name: general-<this>
    input: dict  # the manifest's inputs entry
    folder: Path | None  # the input folder (its card's license is the default; --out never goes in it)
    hub: HubData | None = None


def read_prompts(value: str | Path) -> Prompts:
    """The rows of a prompt file, dataset folder (its ``train`` split) or Hub dataset (``hf:…``, read from the
    local cache; ``tansaku.core.chat_sources``). A bad JSON line is a ``bad`` record (dropped later); a
    file of another type, a folder that is no dataset, a missing path or an uncached Hub dataset raises (one
    line, exit 2)."""
    source = parse_hub_source(value, "--prompts")
    if source is not None:
        hub = load_hub_rows(source, "--prompts")
        records = [{"row": row, "where": f"{hub.text()} row {i}"} for i, row in enumerate(hub.rows)]
        return Prompts(records, source.repo_id.split("/")[-1], hub.input(), hub.folder, hub)
    p = Path(value)
    if not p.exists():
        raise MissingInputError(f"--prompts {p}: no such file or dataset folder{repo_id_hint(value)}")
    if p.is_file() and ".jsonl" in p.suffixes:  # line by line: one bad line costs that line only
        records = [{"bad": line.where, "where": line.where} if isinstance(line, BadLine) else
                   {"row": line, "where": f"{p}:{number}"}
                   for number, line in iter_jsonl(p, on_bad="yield", objects=False)]
    else:
        try:
            rows = read_records(p, split="train")
        except StoreError as exc:
            raise InputError(f"--prompts: {exc}") from None
        records = [{"row": row, "where": f"{p} row {i}"} for i, row in enumerate(rows)]
    return Prompts(records, p.name.split(".")[0], describe_input(p, len(records)), p if p.is_dir() else None)


def _messages(value: list, key: str) -> list | str:
    """A prompt's messages (from the row's ``key`` column, mapped by ``chat_messages``), or why there are
    none."""
    out = []
    for i, message in enumerate(value):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "system":
            return f"message {i} is a system message: the general half has none (the agentic rows carry it)"
        if role not in ROLES or not isinstance(message.get("content"), str):
            return f"'{key}' message {i} needs a role in {ROLES} and text content, got {str(message)[:80]!r}"
        out.append({"role": role, "content": message["content"], "reasoning_content": None})
    while out and out[-1]["role"] == "assistant":  # the reference answer: the base model writes its own
        out.pop()
    if not out or not out[-1]["content"].strip():
        return "the conversation has no user turn with text to answer"
    return out


def parse_prompt(record: dict) -> dict | Drop:
    """``{prompt_id, messages}`` of one input row, or the reason it is dropped (``unmappable``: none of the
    chat columns ``chat_messages`` reads; ``bad_prompt``: naming where and why)."""
    where = record["where"]
    if "bad" in record:
        return Drop("bad_prompt", detail=record["bad"])
    row = record["row"]
    try:
        key, mapped = chat_messages(row)
    except UnusableRow as exc:
        return Drop("unmappable" if exc.reason == "unmappable" else "bad_prompt",
                    detail=f"{where}: {exc.detail}")
    messages = _messages(mapped, key)
    if isinstance(messages, str):
        return Drop("bad_prompt", detail=f"{where}: {messages}")
    given = row.get("id")
    if isinstance(given, bool) or not isinstance(given, (str, int, type(None))):
        return Drop("bad_prompt", detail=f"{where}: 'id' must be text or a whole number")
    if given is None or str(given).strip() == "":  # stable across reorderings and growing files
        text = jsontext.dumps([[m["role"], m["content"]] for m in messages])
        given = "p" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    return {"prompt_id": str(given), "messages": messages}


def unique_ids(records):
    """Global stage ``dedup``: the first row of each prompt id (the held-out key and the row id)."""
    seen: set[str] = set()
    for record in records:
        if record["prompt_id"] in seen:
            yield Drop("duplicate_id", record, f"prompt id {record['prompt_id']} again")
            continue
        seen.add(record["prompt_id"])
        yield record


def answer_row(record: dict, result, keep_reasoning: bool) -> dict | Drop:
    """The SFT row of one prompt and its answer, or the reason it is dropped."""
    if result.error is not None:
        return Drop("llm_error", detail=result.error)
    if result.finish_reason == "length":  # a cut answer would teach the model to stop mid-sentence
        return Drop("truncated",
                    detail=f"the answer stopped at max_tokens ({len(result.content)} characters)")
    reasoning, answer = split_think(strip_end_markers(result.content or ""))
    reasoning = result.server_reasoning or reasoning  # what a server's reasoning parser split off
    if not answer.strip():
        return Drop("empty_answer", detail=f"reasoning {len(reasoning or '')} characters, no answer text")
    assistant = {"role": "assistant", "content": answer.strip(),
                 "reasoning_content": (reasoning or None) if keep_reasoning else None}
    return {"id": f"general-{record['prompt_id']}", "prompt_id": record["prompt_id"], "kind": "general",
            "finish_reason": result.finish_reason, "messages": [*record["messages"], assistant]}


def generate_fn(client, max_tokens: int, temperature: float, seed: int, keep_reasoning: bool):
    """``generate``: one request per prompt, exactly its messages (no system prompt added)."""

    def run(batch: list[dict]) -> list[dict | Drop]:
        requests = [ChatRequest(messages=[{"role": m["role"], "content": m["content"]}
                                          for m in r["messages"]],
                                max_tokens=max_tokens, temperature=temperature,
                                seed=seed if temperature > 0 else None) for r in batch]
        return [answer_row(r, result, keep_reasoning) for r,
                result in zip(batch, client.chat(requests), strict=True)]

    return run


def _from_hub(hub: HubData | None) -> str:
    """The card's words on a Hub dataset's prompts: which dataset, at which commit, and its license."""
    if hub is None:
        return ""
    license = f", license `{hub.license}` (its card)" if hub.license else ", no license on its card"
    return (f" Prompts: the Hub dataset "
            f"[{hub.source.repo_id}](https://huggingface.co/datasets/{hub.source.repo_id}) (config "
            f"`{hub.config}`, split `{hub.split}`, revision `{hub.revision}`{license}); its reference "
            "answers, if any, were replaced by the model's own.")


def _first_problem(records: list[dict]) -> str | None:
    """None when some record is a usable prompt; else the first record's problem (all are unusable)."""
    problems = []
    for record in records:
        parsed = parse_prompt(record)
        if not isinstance(parsed, Drop):
            return None
        problems.append(parsed.detail)
    return problems[0] if problems else "no rows"


def build_general(config: GeneralConfig, out: str | Path = "out/general",
                  context: BuildContext | None = None) -> dict:
    """Build the general chat set in ``out`` from ``config.prompts`` answered by ``config.llm`` (a spec or
    client: the base model); returns the manifest (a rerun with the same ``out`` resumes, a finished one is
    returned as it is).

    ``config`` holds every setting (``GeneralConfig``: its help texts are the CLI's). ``reasoning``: keep the
    model's reasoning (``<think>`` text or the server's ``reasoning_content``) in the assistant message's
    ``reasoning_content``; otherwise only the answer. ``heldout_share`` of the prompt ids form the ``test``
    split (``tansaku.core.heldout``). ``limit``: the first N prompt rows. ``license``: the card's license
    (default: the license the prompt folder's or Hub dataset's card declares, else ``other`` until
    ``--license`` names one). ``chunk_size``:
    prompts per checkpoint. ``context``: LLM options and progress (``BuildContext``; this build does not
    shard)."""
    context = context or BuildContext()
    c = config.check()  # every option's declared bounds, before any work
    heldout = HeldOut(c.heldout_share, "prompt_id", c.seed)
    hub = parse_hub_source(c.prompts, "--prompts")  # a malformed hf: value: refused before --out is looked at
    # a Hub dataset: its cached snapshot
    given = snapshot(hub, "--prompts")[0] if hub is not None else c.prompts
    out = precheck_out(out, pipeline=PIPELINE, inputs={"--prompts": given, "--license-file": c.license_file})
    prompts = read_prompts(c.prompts)
    chosen = choose_license(c.license, c.license_file, prompts.folder)
    records = prompts.records
    if not records:
        raise InputError(f"--prompts {c.prompts} holds no prompts")
    problem = _first_problem(records[:c.limit])
    if problem is not None:
        needs = ("" if FORMATS in problem
                 else f"; each row needs {FORMATS}, the conversation ending in a user turn")
        raise InputError(f"--prompts {c.prompts}: no usable prompt ({problem}){needs}")
    client = context.client(c.llm)
    manifest = build_dataset(
        out=out, name=f"general-{prompts.name}", pipeline=PIPELINE,
        pipeline_version=PIPELINE_VERSION, config={**c.recipe(), **chosen.recipe()}, seed=c.seed,
        inputs=[prompts.input], source=records[:c.limit], llm=client,
        chunk_size=c.chunk_size, context=context, keep_rejected=c.keep_rejected,
        stages=[map_stage("prompts", parse_prompt), global_stage("dedup", unique_ids),
                batch_stage("generate", generate_fn(client, c.max_tokens, c.temperature, c.seed, c.reasoning),
                            c.batch_size, params=c.pick("max_tokens", "temperature", "reasoning"),
                            llm=client)],
        heldout=heldout, column_types=COLUMN_TYPES, empty_hints=EMPTY_HINTS,
        summarize=(lambda manifest: {"hub_inputs": [prompts.hub.record()]}) if prompts.hub else None,
        card={"pretty_name": "tansaku general chat (the base model's own answers)", **chosen.card,
              "task_categories": ["text-generation"], "tags": ["sft", "general-chat", "system-prompt-switch"],
              "description": "General prompts answered by the base model itself (the manifest's `llm`), with "
                             "no system prompt: the general half of the system-prompt switch. Mix the "
                             "`train` split into agentic SFT (`synth build trajectories --general DIR`, or a "
                             "`train sft` data source); score retention on the held-out `test` split (`train "
                             "eval --task general`)."
                             + _from_hub(prompts.hub)
                             + (" Assistant turns keep the model's reasoning in `reasoning_content`."
                                if c.reasoning else " Assistant turns hold the answer only (no reasoning)."),
              "limitations": ["Answers are what the model wrote, unchecked: their quality is the base "
                              "model's.",
                              "Answers cut at max_tokens are dropped (`truncated`), so long answers are "
                              "under-represented unless max_tokens is large."]})
    return chosen.write(out, manifest)
