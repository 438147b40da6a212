"""Torch versions of sgl-kernel's CPU attention ops, registered as `torch.ops.sgl_kernel.*`, test-only.

SGLang 0.5.23's intel_amx attention backend (sglang/srt/layers/attention/intel_amx_backend.py) binds
`torch.ops.sgl_kernel.decode_attention_cpu` / `extend_attention_cpu` and calls them positionally; the
schemas below follow those call sites argument for argument. Plain softmax attention in float32 over
the paged KV cache (GQA, logit cap, tree masks for speculative verify). Features the tiny test models
never use (cross-attention, encoder offsets, sliding windows, attention sinks) raise instead of
computing something unverified.
"""

from __future__ import annotations

import torch

_LIB = torch.library.Library("sgl_kernel", "FRAGMENT")  # kept alive: the ops live as long as this module

_LIB.define(
    "decode_attention_cpu(Tensor query, Tensor(a!) k_cache, Tensor(b!) v_cache, float k_scale, float v_scale, "
    "Tensor(c!) output, Tensor? key, Tensor? value, Tensor loc, Tensor(d!) attn_logits, Tensor req_to_token, "
    "Tensor req_pool_indices, Tensor seq_lens, float sm_scale, float logit_cap, bool is_cross_attn, "
    "int sliding_window_size, Tensor? encoder_lens, Tensor? sinks) -> ()"
)
_LIB.define(
    "extend_attention_cpu(Tensor q_extend, Tensor? k_extend, Tensor? v_extend, Tensor(a!) o_extend, "
    "Tensor k_buffer, Tensor v_buffer, float k_scale, float v_scale, Tensor req_to_token, "
    "Tensor req_pool_indices, Tensor seq_lens, Tensor extend_seq_lens, Tensor extend_start_loc, "
    "int max_len_extend, float sm_scale, float logit_cap, bool is_cross_attn, int sliding_window_size, "
    "Tensor? encoder_lens, Tensor? sinks, Tensor? custom_mask, bool is_causal) -> ()"
)


def _reject_unused_features(is_cross_attn: bool, sliding_window_size: int, encoder_lens, sinks) -> None:
    # The backend passes layer.sliding_window_size + 1, so 0 means "no window".
    if is_cross_attn or encoder_lens is not None or sliding_window_size > 0 or sinks is not None:
        raise NotImplementedError(
            "sgl_kernel test stand-in: cross-attention, encoder_lens, sliding windows and attention sinks "
            f"are not implemented (is_cross_attn={is_cross_attn}, sliding_window_size={sliding_window_size}, "
            f"encoder_lens={encoder_lens is not None}, sinks={sinks is not None})"
        )


def _attend(q, k, v, sm_scale: float, logit_cap: float, mask):
    """q [Lq, H, D], k [Lk, Hkv, D], v [Lk, Hkv, Dv] (float32), mask [Lq, Lk] bool or None -> [Lq, H, Dv]."""
    group = q.shape[1] // k.shape[1]
    if group > 1:  # GQA: query head h reads KV head h // group
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) * sm_scale
    if logit_cap > 0:
        scores = logit_cap * torch.tanh(scores / logit_cap)
    if mask is not None:
        scores = scores.masked_fill(~mask.unsqueeze(0), float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1), v)


def _kv_rows(buffer: torch.Tensor, rows: torch.Tensor, scale: float) -> torch.Tensor:
    return buffer[rows].float() * scale


def decode_attention_cpu(
    query, k_cache, v_cache, k_scale, v_scale, output, key, value, loc, attn_logits,
    req_to_token, req_pool_indices, seq_lens, sm_scale, logit_cap, is_cross_attn,
    sliding_window_size, encoder_lens, sinks,
) -> None:
    """One new token per sequence: write its K/V at `loc` (when given; the backend passes None after
    writing an FP8 cache itself), then attend over the sequence's first seq_lens[i] slots of
    req_to_token, the new token included. attn_logits is the C++ kernel's scratch; not needed here."""
    _reject_unused_features(is_cross_attn, sliding_window_size, encoder_lens, sinks)
    if key is not None and value is not None:
        k_cache[loc] = key.reshape(loc.numel(), *k_cache.shape[1:]).to(k_cache.dtype)
        v_cache[loc] = value.reshape(loc.numel(), *v_cache.shape[1:]).to(v_cache.dtype)
    reqs, lens = req_pool_indices.tolist(), seq_lens.tolist()
    for b, (req, n) in enumerate(zip(reqs, lens, strict=True)):
        rows = req_to_token[req, :n].to(torch.int64)
        out = _attend(
            query[b : b + 1], _kv_rows(k_cache, rows, k_scale), _kv_rows(v_cache, rows, v_scale),
            sm_scale, logit_cap, None,
        )
        output[b].copy_(out[0].to(output.dtype))


def extend_attention_cpu(
    q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, k_scale, v_scale, req_to_token,
    req_pool_indices, seq_lens, extend_seq_lens, extend_start_loc, max_len_extend, sm_scale, logit_cap,
    is_cross_attn, sliding_window_size, encoder_lens, sinks, custom_mask, is_causal,
) -> None:
    """Per sequence: its extend_seq_lens[i] new tokens attend to the cached prefix (seq_lens[i] minus the
    extend length, read through req_to_token) and to the new tokens: causally, or through custom_mask
    when given (speculative verify with a token tree: per sequence a row-major [extend, seq_len] block,
    blocks back to back). The new tokens' K/V come from k_extend/v_extend, or from the cache when those
    are None (the backend writes the cache before calling)."""
    _reject_unused_features(is_cross_attn, sliding_window_size, encoder_lens, sinks)
    mask_offset = 0
    for req, total, ext, start in zip(
        req_pool_indices.tolist(), seq_lens.tolist(), extend_seq_lens.tolist(), extend_start_loc.tolist(), strict=True
    ):
        if ext == 0:
            continue
        prefix = total - ext
        rows = req_to_token[req, :total].to(torch.int64)
        k = _kv_rows(k_buffer, rows, k_scale)
        v = _kv_rows(v_buffer, rows, v_scale)
        if k_extend is not None and v_extend is not None:
            k[prefix:] = k_extend[start : start + ext].reshape(ext, *k_buffer.shape[1:]).float()
            v[prefix:] = v_extend[start : start + ext].reshape(ext, *v_buffer.shape[1:]).float()
        if custom_mask is not None:
            mask = custom_mask[mask_offset : mask_offset + ext * total].reshape(ext, total).bool()
            mask_offset += ext * total
        elif is_causal:
            mask = torch.arange(total).view(1, total) <= (prefix + torch.arange(ext)).view(ext, 1)
        else:
            mask = None
        out = _attend(q_extend[start : start + ext], k, v, sm_scale, logit_cap, mask)
        o_extend[start : start + ext] = out.to(o_extend.dtype)


_LIB.impl("decode_attention_cpu", decode_attention_cpu, "CPU")
_LIB.impl("extend_attention_cpu", extend_attention_cpu, "CPU")
