"""``synth build general``: the base model's own answers to general prompts, as SFT chat rows with no system
prompt (the general half of the system-prompt switch).

Modules: ``config`` (``GeneralConfig``: every setting of the build), ``build`` (prompt mapping, dedup,
generation and ``build_general``).

    from tansaku.pipelines.general.build import build_general
    from tansaku.pipelines.general.config import GeneralConfig
    build_general(GeneralConfig(prompts="examples/general_prompts.jsonl", llm="transformers:tiny"),
                  out="out/general")
"""
