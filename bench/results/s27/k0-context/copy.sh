#!/bin/bash
cd /work/main
run() {  # $1 tag, $2 = 1: queue copies of the features instead of the target's tensors
  if [ "$2" = 1 ]; then
    sed -i 's/^    if all(h.device.type == "cpu" and h._base is None for h in aux_hidden_states):$/    if False:/' dflash_vllm/proposers/dflash.py
    grep -c '^    if False:' dflash_vllm/proposers/dflash.py
  fi
  flock /tmp/dflash-engine.lock .venv/bin/dflash-vllm bench run --methods none,ours@k=0 --prompt-sets chat,free --concurrency 1,2,4,8,16,32,64 --grid-sets "" --repeats 3 --out /tmp/s27/k0-$1.json > /tmp/s27/k0-$1.log 2>&1
  git checkout -q dflash_vllm/proposers/dflash.py
}
run copy1 1; run ctx3 0; run copy2 1
echo finished
