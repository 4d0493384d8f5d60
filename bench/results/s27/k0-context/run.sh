#!/bin/bash
# scratch: K=0 with/without the context write, two alternated pairs; the hack is reverted after each run
cd /work/main
run() {  # $1 = tag, $2 = 1 to skip the context write
  if [ "$2" = 1 ]; then
    sed -i 's/^        self._write_context(features, positions, slot_mapping, num_tokens, defer=True, owners=owners)$/        import os as _os\n        if not _os.environ.get("DFLASH_SCRATCH_NO_CTX"): self._write_context(features, positions, slot_mapping, num_tokens, defer=True, owners=owners)/' dflash_vllm/proposers/dflash.py
    grep -c DFLASH_SCRATCH_NO_CTX dflash_vllm/proposers/dflash.py
  fi
  DFLASH_SCRATCH_NO_CTX=$([ "$2" = 1 ] && echo 1) flock /tmp/dflash-engine.lock .venv/bin/dflash-vllm bench run --methods none,ours@k=0 --prompt-sets chat,free --concurrency 1,2,4,8,16,32,64 --grid-sets "" --repeats 3 --out /tmp/s27/k0-$1.json > /tmp/s27/k0-$1.log 2>&1
  git checkout -q dflash_vllm/proposers/dflash.py
}
run ctx1 0; run noctx1 1; run ctx2 0; run noctx2 1
echo finished
