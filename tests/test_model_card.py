"""The model card a training run writes names its base model: TRL leaves a local base model as
``[None](https://huggingface.co/None)``; ``tansaku.trainer.model_card`` names it (no model is loaded here;
``tests/test_trainer_sft.py -m slow`` checks the card of a real run).

Run: pytest tests/test_model_card.py
"""

from __future__ import annotations

from types import SimpleNamespace

from huggingface_hub import ModelCard

from tansaku.trainer.model_card import UNNAMED, BaseModel, base_model, fix_card, name_base_model


def trl_card(folder, base: str | None) -> None:
    """The card TRL itself writes for a run whose base model it could (``base``) or could not name."""
    from trl.trainer.utils import generate_model_card

    generate_model_card(base_model=base, model_name=folder.name, hub_model_id=None, dataset_name=None, tags=[],
                        wandb_url=None, trackio_url=None, trainer_name="SFT").save(folder / "README.md")


def test_base_model_names_hub_ids_snapshots_local_folders_and_the_tiny_model(tmp_path):
    assert base_model("Qwen/Qwen3-0.6B") == BaseModel("Qwen/Qwen3-0.6B", "Qwen/Qwen3-0.6B")
    assert base_model("tiny", str(tmp_path / "smollm2-135m-instruct")) == BaseModel("SmolLM2-135M-Instruct")
    snapshot = tmp_path / "hub" / "models--HuggingFaceTB--SmolLM2-135M" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    assert base_model(str(snapshot)) == BaseModel("HuggingFaceTB/SmolLM2-135M", "HuggingFaceTB/SmolLM2-135M")
    (tmp_path / "runs" / "sft-merged").mkdir(parents=True)
    assert base_model(str(tmp_path / "runs" / "sft-merged")) == BaseModel("sft-merged")


def test_an_unnamed_base_model_is_named_in_the_card(tmp_path):
    trl_card(tmp_path, None)
    assert UNNAMED in (tmp_path / "README.md").read_text(encoding="utf-8")  # TRL's own card, as it was
    fix_card(tmp_path / "README.md", BaseModel("SmolLM2-135M-Instruct"))
    text = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert "huggingface.co/None" not in text and "`SmolLM2-135M-Instruct`" in text
    assert ModelCard.load(tmp_path / "README.md").data.base_model is None  # no Hub id: none declared

    trl_card(tmp_path, None)
    fix_card(tmp_path / "README.md", BaseModel("org/base", "org/base"))
    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.base_model == "org/base" and "[org/base](https://huggingface.co/org/base)" in card.text


def test_a_card_trl_named_is_left_as_it_is(tmp_path):
    trl_card(tmp_path, "org/base")
    before = (tmp_path / "README.md").read_text(encoding="utf-8")
    fix_card(tmp_path / "README.md", BaseModel("other"))
    assert (tmp_path / "README.md").read_text(encoding="utf-8") == before


def test_name_base_model_wraps_every_card_the_trainer_writes(tmp_path):
    class Trainer:  # the two things name_base_model uses of a TRL trainer
        args = SimpleNamespace(output_dir=str(tmp_path))

        def create_model_card(self, model_name=None, **kwargs):
            trl_card(tmp_path, None)

        def is_world_process_zero(self):
            return True

    trainer = name_base_model(Trainer(), "tiny", str(tmp_path / "smollm2-135m-instruct"))
    trainer.create_model_card(model_name="run")
    assert "SmolLM2-135M-Instruct" in (tmp_path / "README.md").read_text(encoding="utf-8")
