"""e-Gov law XML → article records → four-choice questions (``synth build egov``).

Modules: ``xml_safety`` (hardened lxml), ``parse`` (law files → article records), ``leak`` (independent
leak checker), ``cloze`` and ``statements`` (rule-based question kinds), ``generate`` (the LLM generator,
scoring, dedup, balance), ``config``
(``EgovConfig``: every setting of the build), ``build`` (the pipeline and ``build_egov``).
"""
