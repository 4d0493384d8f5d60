"""Our DFlash proposer: one drafter pass per step emits K drafts per request.

Per step, for the batch the target just verified:
1. the target hidden states of the selected layers for the tokens it just ran are fused and
   written as drafter context K/V into the paged cache (tokens later found rejected are
   written too, past each request's verified length: they are never read, and the next
   verified token at that position overwrites them; this keeps the step free of host syncs);
2. each request gets a query block ``[anchor, mask x K]`` at positions
   ``ctx_len .. ctx_len + K``, where ctx_len counts verified tokens and the anchor is the
   token the target just sampled;
3. one drafter forward, the target's LM head on the K mask slots, drafts out.

vLLM's scheduler, block manager and rejection sampler stay in charge of everything else,
which is what keeps the add-on correct under continuous batching, chunked prefill, prefix
caching and preemption: drafter context lives in the same KV blocks as the target's tokens.
"""

from __future__ import annotations

import torch

from vllm.config import VllmConfig, get_layers_from_vllm_config
from vllm.forward_context import set_forward_context
from vllm.logger import init_logger
from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
from vllm.model_executor.models.interfaces import supports_multimodal
from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

from ..config import DrafterConfig, validate_pair

logger = init_logger("vllm.dflash_vllm.proposer")


class DFlashProposer(SpecDecodeBaseProposer):
    def __init__(self, vllm_config: VllmConfig, device: torch.device, runner=None):
        spec = vllm_config.speculative_config
        assert spec is not None and spec.method == "dflash"
        self.drafter_config = DrafterConfig.from_pretrained(spec.draft_model_config.model)
        target_hf = vllm_config.model_config.hf_text_config
        validate_pair(
            self.drafter_config,
            target_num_layers=target_hf.num_hidden_layers,
            target_hidden_size=target_hf.hidden_size,
            target_vocab_size=vllm_config.model_config.get_vocab_size(),
            num_speculative_tokens=spec.num_speculative_tokens,
        )
        super().__init__(vllm_config=vllm_config, device=device, pass_hidden_states_to_model=True, runner=runner)
        self.mask_token_id = self.drafter_config.mask_token_id
        self.max_query_len = 1 + self.num_speculative_tokens
        self._block_offsets = torch.arange(self.max_query_len, device=device)

    # -- loading --------------------------------------------------------------------------
    def load_model(self, target_model: torch.nn.Module) -> None:
        target_layers = set(get_layers_from_vllm_config(self.vllm_config, AttentionLayerBase))
        self.model = self._get_model()
        all_layers = get_layers_from_vllm_config(self.vllm_config, AttentionLayerBase)
        self._draft_attn_layer_names = set(all_layers) - target_layers
        if supports_multimodal(target_model):
            target_model = target_model.get_language_model()
        self.model.bind_target(target_model)

    # -- the step --------------------------------------------------------------------------
    def propose(
        self,
        num_speculative_tokens: int,
        target_token_ids: torch.Tensor,  # [num_tokens]
        target_positions: torch.Tensor,  # [num_tokens]
        target_hidden_states: torch.Tensor,  # [num_tokens, n_target_layers * H]
        next_token_ids: torch.Tensor,  # [num_reqs] the anchors
        token_indices_to_sample: torch.Tensor | None,
        common_attn_metadata: CommonAttentionMetadata,
        sampling_metadata,
        mm_embed_inputs=None,
        num_rejected_tokens_gpu: torch.Tensor | None = None,  # [num_reqs]
        slot_mappings=None,
    ) -> torch.Tensor:
        self.num_speculative_tokens = k = num_speculative_tokens
        self._last_draft_probs = None
        cad = common_attn_metadata
        num_reqs, num_tokens = cad.num_reqs, target_token_ids.shape[0]

        self.model.write_context_kv(
            target_hidden_states[:num_tokens], target_positions[:num_tokens], cad.slot_mapping[:num_tokens]
        )
        if k == 0:
            return torch.empty(num_reqs, 0, dtype=torch.int64, device=self.device)

        ctx_lens = cad.seq_lens[:num_reqs]
        if num_rejected_tokens_gpu is not None:
            ctx_lens = ctx_lens - num_rejected_tokens_gpu[:num_reqs]
        q_len = k + 1
        # [num_reqs, K+1]; near max_model_len the tail positions are clamped: those drafts
        # can never be accepted (the request ends first), they only need valid RoPE rows.
        positions = (ctx_lens[:, None] + self._block_offsets[:q_len]).clamp_max(self.max_model_len - 1)
        input_ids = torch.full((num_reqs, q_len), self.mask_token_id, dtype=torch.int32, device=self.device)
        input_ids[:, 0] = next_token_ids[:num_reqs]

        query_start_loc = self.arange[: num_reqs + 1] * q_len
        block_cad = CommonAttentionMetadata(
            query_start_loc=query_start_loc,
            query_start_loc_cpu=torch.from_numpy(self.token_arange_np[: num_reqs + 1] * q_len),  # no device sync
            seq_lens=ctx_lens,  # our backend reads these as context lengths
            num_reqs=num_reqs,
            num_actual_tokens=num_reqs * q_len,
            max_query_len=q_len,
            max_seq_len=cad.max_seq_len,  # an upper bound on every ctx_len; no host sync
            block_table_tensor=cad.block_table_tensor,
            slot_mapping=cad.slot_mapping[:0],
            causal=False,
        )
        _, per_layer_metadata = self.build_per_group_and_layer_attn_metadata(block_cad)
        with set_forward_context(per_layer_metadata, self.vllm_config, num_tokens=num_reqs * q_len):
            hidden = self.model(input_ids.view(-1), positions.view(-1))  # [num_reqs * (K+1), H]
        mask_hidden = hidden.view(num_reqs, q_len, -1)[:, 1:].reshape(num_reqs * k, -1)
        draft_ids, draft_probs = self._sample_draft_tokens(mask_hidden, sampling_metadata)
        if draft_probs is not None:
            self._last_draft_probs = draft_probs.view(num_reqs, k, -1)
        return draft_ids.view(num_reqs, k)

    def _sample_draft_tokens(self, hidden_states: torch.Tensor, sampling_metadata):
        """Drafts and their law q: greedy rows take the argmax (q unused: vLLM compares argmaxes);
        sampled rows draw from q = softmax(top-k/top-p(logits / T)), the request's own
        processing, so q puts no mass where the target's p cannot (higher acceptance than
        temperature-only q, same exactness). Seeded requests draw with their own generator,
        which makes them reproducible run to run with speculation on."""
        if not self._enable_probabilistic_draft_probs or sampling_metadata.all_greedy:
            return self.model.compute_logits(hidden_states).argmax(dim=-1), None
        from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p

        logits = self.model.compute_logits(hidden_states).float()  # [num_reqs * K, V]
        k = logits.shape[0] // sampling_metadata.temperature.shape[0]
        temperature = sampling_metadata.temperature.repeat_interleave(k)
        greedy = temperature < 1e-5
        logits = logits / torch.where(greedy, 1.0, temperature)[:, None]
        top_k = None if sampling_metadata.top_k is None else sampling_metadata.top_k.repeat_interleave(k)
        top_p = None if sampling_metadata.top_p is None else sampling_metadata.top_p.repeat_interleave(k)
        q = apply_top_k_top_p(logits, top_k, top_p).softmax(dim=-1)
        # Exponential race: argmax(q / E), E ~ Exp(1), is a draw from q.
        noise = torch.empty_like(q).exponential_()
        for req_idx, gen in sampling_metadata.generators.items():
            noise[req_idx * k : (req_idx + 1) * k].exponential_(generator=gen)
        drafts = (q / noise).argmax(dim=-1)
        drafts = torch.where(greedy, q.argmax(dim=-1), drafts)
        return drafts, q

    @torch.inference_mode()
    def dummy_run(self, num_tokens: int, use_cudagraphs: bool = True, is_graph_capturing: bool = False, slot_mappings=None) -> None:
        """Memory profiling: the context projection at full width, one block forward."""
        features = torch.zeros(num_tokens, self.model.fc.input_size, dtype=self.dtype, device=self.device)
        positions = torch.zeros(num_tokens, dtype=torch.int64, device=self.device)
        self.model.write_context_kv(features, positions, None)
        num_query = min(num_tokens, self.max_batch_size * self.max_query_len)
        with set_forward_context(None, self.vllm_config, num_tokens=num_query):
            self.model(self.input_ids[:num_query], positions[:num_query])
