"""The system prompts of the tasks (``tansaku.envs.tasks``) and the compact tool settings for small models.

Each task renders one of its ``system_prompts`` in every view (SFT rows, RL prompts, evaluation); editing a
prompt here changes what every one of them shows, so bump the task's ``version`` with it.
"""

from __future__ import annotations

# The system prompt is the switch of the blog's recipe: the agentic rows of SFT, the RL prompts and evaluation
# all render the task's own (``Task.system_prompt``), and every one asks for reasoning in Japanese; general
# chat rows carry none. ``Task.with_system_prompt`` swaps in a user's text everywhere at once.
ANSWER_RULE = "最終回答は最後のメッセージに {{答え}} の形で一つだけ書いてください（例: {{東京都}}）。"
THINK_IN_JAPANESE = "考えは必ず日本語で書いてください。"

MULTIHOP_SYSTEM = (
    "あなたは日本語の検索エージェントです。質問に答えるために search で文書を検索し、open_doc で本文を読み、"
    "必要なら何度でも検索を繰り返してください。各ステップの前に <think> で考えを整理してください。"
    + THINK_IN_JAPANESE + ANSWER_RULE,
    "あなたは検索ツールを使って複数の文書をたどり、質問に正確に答えるアシスタントです。推測で答えず、"
    "検索結果と本文で確かめてから答えてください。" + THINK_IN_JAPANESE + ANSWER_RULE,
)
# The compact variant's prompt: the tiny model's tokenizer spends 1–3 tokens per Japanese character.
MULTIHOP_COMPACT_SYSTEM = ("あなたは検索エージェントです。日本語で考え、search で調べてから、{{答え}} "
                           "の形で答えてください。",)
# Compact tools for small models (a 135M model has a few hundred tokens per episode): two hits of 80
# characters (the fact sentences of a short article fit), terse tool descriptions (~170 schema tokens
# instead of 460–630) in one fixed variant, few calls.
COMPACT_TOOLS_CONFIG = {"top_k": 2, "max_k": 5, "chars_per_hit": 80, "chars_per_call": 400, "page_chars": 300,
                        "description_variant": 0, "short_descriptions": True}
EGOV_SYSTEM = (
    "あなたは日本の法令に詳しい検索エージェントです。search と open_doc で e-Gov "
    "の条文を調べ、四つの選択肢から正しいものを一つ選んでください。考えは日本語で書いてください。"
    "最終回答は選択肢の番号を {{2}} のように一つだけ書いてください。",
)
DEEPRESEARCH_SYSTEM = (
    "あなたは日本語の調査エージェントです。search と open_doc で複数の文書を調べ、指示に沿ったレポートを"
    "日本語で書いてください。" + THINK_IN_JAPANESE
    + "調べ終えたら、最後のメッセージにレポート本文だけを書いてください（ツール呼び出しなし）。"
      "根拠にした文書の doc_id をレポート中に示してください。",
)
