"""Imported into a harness engine process to break vLLM's rejection sampler on purpose:
rejected positions are resampled from the target law p instead of the residual (p - q)+.
The exactness test must detect it."""

import torch

import vllm.v1.sample.rejection_sampler as rs


def _recovered_from_p(max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids, draft_probs,
                      target_probs, sampling_metadata, device, use_fp64_gumbel=False):
    return torch.multinomial(target_probs.float(), 1).view(-1).to(draft_token_ids.dtype)


rs.sample_recovered_tokens = _recovered_from_p
