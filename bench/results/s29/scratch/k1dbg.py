import os, sys
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
from dflash_vllm import paths
K = int(sys.argv[1]); B = int(sys.argv[2])
if __name__ == "__main__":
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from transformers import AutoTokenizer
    from dflash_vllm.prompts import prompt_set
    from dflash_vllm.proposers import dflash as D
    orig = D.DFlashProposer.propose
    log = []; drafts = []
    def propose(self, *a, **kw):
        import inspect
        b = inspect.signature(orig).bind(self, *a, **kw).arguments
        cad, nrej, nt, tt, tp = b["common_attn_metadata"], b.get("num_rejected_tokens_gpu"), b["next_token_ids"], b["target_token_ids"], b["target_positions"]
        log.append((cad.num_reqs, cad.seq_lens[:cad.num_reqs].tolist(), None if nrej is None else nrej[:cad.num_reqs].tolist(),
                    nt[:cad.num_reqs].tolist(), tt.shape[0], cad.query_start_loc_cpu[:cad.num_reqs+1].tolist(), tp.tolist()[:12]))
        out = orig(self, *a, **kw)
        ctx = (cad.seq_lens[:cad.num_reqs] - (nrej[:cad.num_reqs] if nrej is not None else 0)).tolist()
        drafts.append([(ctx[i], nt[i].item(), out[i].tolist()) for i in range(cad.num_reqs)])
        return out
    D.DFlashProposer.propose = propose
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set("tasks", tok, 2); ids = ids[:B] if B > 1 else ids[int(sys.argv[3]):int(sys.argv[3])+1]
    llm = LLM(model=str(paths.DEMO_TARGET), speculative_config={"method": "dflash", "model": str(paths.DEMO_DRAFTER),
              "num_speculative_tokens": K, "dflash_adaptive": False}, dtype="float32", enforce_eager=True,
              kv_cache_memory_bytes=2**28, skip_tokenizer_init=True, max_num_seqs=B, max_model_len=1024)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in ids], SamplingParams(max_tokens=12, temperature=0.0), use_tqdm=False)
    import json
    json.dump(drafts, open(f"/tmp/s29/drafts-{K}-{B}.json", "w"))
    print([len(p) for p in ids])
