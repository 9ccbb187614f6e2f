"""Tiny random Hugging Face ``transformers`` models for the zoo: decoder
LMs (GPT-2, Llama, Mistral, Qwen2, Gemma), encoders (BERT, RoBERTa,
DistilBERT), encoder-decoders (T5, BART), ViT, and speech: Whisper (log-mel
features in, text out) and Wav2Vec2 (raw audio in, a class out).

Sizes: hidden 64, 2 layers, 4 heads (2 key/value heads where the model
has grouped-query attention), vocabulary 128, sequence 16, batch 2. All
dropout probabilities are 0; special token ids lie inside the vocabulary.
"""

from __future__ import annotations

import torch

from model_zoo.spec import ZooModel

__all__ = ["MODELS"]

VOCAB, SEQ, BATCH, DEC_SEQ, LABELS = 128, 16, 2, 8, 5
_TOKENS = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)


def _tokens(n: int = SEQ) -> torch.Tensor:
    return torch.randint(3, VOCAB, (BATCH, n))


def _causal_lm(name: str, config_cls: str, model_cls: str, **cfg: object) -> ZooModel:
    def build() -> torch.nn.Module:
        import transformers

        config = getattr(transformers, config_cls)(vocab_size=VOCAB, **_TOKENS, **cfg)
        return getattr(transformers, model_cls)(config)

    return ZooModel(
        name=name, library="transformers",
        config=f"{model_cls}: " + ", ".join(f"{k}={v}" for k, v in cfg.items()
                                           if not k.endswith(("dropout", "pdrop"))),
        build=build, inputs=lambda: (_tokens(),),
        target=lambda b: torch.roll(b[0], -1, dims=1),  # next token
        logits=lambda m, x: m(input_ids=x).logits)


_DECODER = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


def _encoder(name: str, config_cls: str, model_cls: str, **cfg: object) -> ZooModel:
    def build() -> torch.nn.Module:
        import transformers

        config = getattr(transformers, config_cls)(vocab_size=VOCAB, num_labels=LABELS,
                                                   **_TOKENS, **cfg)
        return getattr(transformers, model_cls)(config)

    def logits(m: object, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return m(input_ids=x, attention_mask=mask).logits  # type: ignore[operator,no-any-return]

    def inputs() -> tuple[torch.Tensor, ...]:
        x = _tokens()
        mask = torch.ones_like(x)
        mask[1, SEQ - 4:] = 0  # the second sequence is padded
        return x, mask

    return ZooModel(name=name, library="transformers",
                    config=f"{model_cls}: " + ", ".join(f"{k}={v}" for k, v in cfg.items()
                                                       if "dropout" not in k),
                    build=build, inputs=inputs,
                    target=lambda b: torch.randint(0, LABELS, (BATCH,)), logits=logits)


def _seq2seq(name: str, config_cls: str, model_cls: str, **cfg: object) -> ZooModel:
    def build() -> torch.nn.Module:
        import transformers

        config = getattr(transformers, config_cls)(vocab_size=VOCAB, decoder_start_token_id=0,
                                                   **_TOKENS, **cfg)
        return getattr(transformers, model_cls)(config)

    return ZooModel(
        name=name, library="transformers",
        config=f"{model_cls}: " + ", ".join(f"{k}={v}" for k, v in cfg.items()
                                           if "dropout" not in k),
        build=build, inputs=lambda: (_tokens(), _tokens(DEC_SEQ)),
        target=lambda b: torch.roll(b[1], -1, dims=1),
        logits=lambda m, x, d: m(input_ids=x, decoder_input_ids=d).logits)


def _vit() -> ZooModel:
    def build() -> torch.nn.Module:
        import transformers

        config = transformers.ViTConfig(
            image_size=32, patch_size=8, num_channels=3, hidden_size=64, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=128, num_labels=10,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        return transformers.ViTForImageClassification(config)

    return ZooModel(name="hf-vit", library="transformers",
                    config="ViTForImageClassification: image 32x32, patch 8, hidden_size=64, "
                           "2 layers, 4 heads",
                    build=build, inputs=lambda: (torch.randn(BATCH, 3, 32, 32),),
                    target=lambda b: torch.randint(0, 10, (BATCH,)),
                    logits=lambda m, x: m(pixel_values=x).logits)


def _whisper() -> ZooModel:
    cfg = dict(num_mel_bins=16, d_model=64, encoder_layers=2, decoder_layers=2,
               encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
               decoder_ffn_dim=128, max_source_positions=32, max_target_positions=64)

    def build() -> torch.nn.Module:
        import transformers

        config = transformers.WhisperConfig(
            vocab_size=VOCAB, decoder_start_token_id=1, dropout=0.0, attention_dropout=0.0,
            activation_dropout=0.0, **_TOKENS, **cfg)
        return transformers.WhisperForConditionalGeneration(config)

    return ZooModel(
        name="hf-whisper", library="transformers",
        config="WhisperForConditionalGeneration: " + ", ".join(f"{k}={v}" for k, v in cfg.items())
        + "; 16x64 log-mel features",
        build=build, inputs=lambda: (torch.randn(BATCH, 16, 64), _tokens(DEC_SEQ)),
        target=lambda b: torch.roll(b[1], -1, dims=1),
        logits=lambda m, x, d: m(input_features=x, decoder_input_ids=d).logits)


def _wav2vec2() -> ZooModel:
    cfg = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=128, conv_dim=(32, 32, 32), conv_stride=(5, 2, 2),
               conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
               num_conv_pos_embedding_groups=4)

    def build() -> torch.nn.Module:
        import transformers

        config = transformers.Wav2Vec2Config(
            vocab_size=VOCAB, num_labels=LABELS, hidden_dropout=0.0, attention_dropout=0.0,
            activation_dropout=0.0, feat_proj_dropout=0.0, final_dropout=0.0, layerdrop=0.0,
            mask_time_prob=0.0, mask_feature_prob=0.0, classifier_proj_size=32, **cfg)
        return transformers.Wav2Vec2ForSequenceClassification(config)

    return ZooModel(
        name="hf-wav2vec2", library="transformers",
        config="Wav2Vec2ForSequenceClassification: " + ", ".join(
            f"{k}={v}" for k, v in cfg.items()) + "; 800 samples of audio",
        build=build, inputs=lambda: (torch.randn(BATCH, 800),),
        target=lambda b: torch.randint(0, LABELS, (BATCH,)),
        logits=lambda m, x: m(input_values=x).logits)


MODELS: list[ZooModel] = [
    _causal_lm("hf-gpt2", "GPT2Config", "GPT2LMHeadModel", n_embd=64, n_layer=2, n_head=4,
               n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
    _causal_lm("hf-llama", "LlamaConfig", "LlamaForCausalLM", **_DECODER),
    _causal_lm("hf-mistral", "MistralConfig", "MistralForCausalLM", **_DECODER),
    _causal_lm("hf-qwen2", "Qwen2Config", "Qwen2ForCausalLM", **_DECODER),
    _causal_lm("hf-gemma", "GemmaConfig", "GemmaForCausalLM", head_dim=16, **_DECODER),
    _encoder("hf-bert", "BertConfig", "BertForSequenceClassification", hidden_size=64,
             num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
             max_position_embeddings=64, hidden_dropout_prob=0.0,
             attention_probs_dropout_prob=0.0),
    _encoder("hf-roberta", "RobertaConfig", "RobertaForSequenceClassification", hidden_size=64,
             num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
             max_position_embeddings=64, hidden_dropout_prob=0.0,
             attention_probs_dropout_prob=0.0),
    _encoder("hf-distilbert", "DistilBertConfig", "DistilBertForSequenceClassification",
             dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=64,
             dropout=0.0, attention_dropout=0.0, seq_classif_dropout=0.0),
    _seq2seq("hf-t5", "T5Config", "T5ForConditionalGeneration", d_model=64, d_kv=16, d_ff=128,
             num_layers=2, num_heads=4, dropout_rate=0.0),
    _seq2seq("hf-bart", "BartConfig", "BartForConditionalGeneration",
             d_model=64,
             encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
             decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
             max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
             activation_dropout=0.0),
    _vit(),
    _whisper(),
    _wav2vec2(),
]
