"""`cache_kwargs` names the KV cache the way the installed transformers' forward takes it."""

from __future__ import annotations

from types import SimpleNamespace

from art_train.hf_compat import cache_kwargs, output_cache


class Old:  # transformers 5.17: only `past_key_values` (a `cache=` keyword would be swallowed by **kwargs)
    def forward(self, input_ids=None, past_key_values=None, use_cache=None, **kwargs):  # noqa: ANN001, ANN003, ANN201
        return None


class New:  # transformers 5.2x
    def forward(self, input_ids=None, cache=None, use_cache=None, **kwargs):  # noqa: ANN001, ANN003, ANN201
        return None


def test_cache_keyword_follows_the_forward_signature(tiny_model_path) -> None:  # noqa: ANN001
    from art_train.models import load_causal_lm

    cache = object()
    assert cache_kwargs(Old(), cache) == {"past_key_values": cache}
    assert cache_kwargs(New(), cache) == {"cache": cache}
    model = load_causal_lm(tiny_model_path, dtype="float32", device="cpu")
    (name,) = cache_kwargs(model, cache)
    (decoder_name,) = cache_kwargs(model.get_decoder(), cache)
    assert name == decoder_name and name in ("cache", "past_key_values")


def test_output_cache_reads_either_field() -> None:
    assert output_cache(SimpleNamespace(cache="new", past_key_values=None)) == "new"
    assert output_cache(SimpleNamespace(past_key_values="old")) == "old"
