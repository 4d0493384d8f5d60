"""Session 36: ours/native T_d per cell of `dflash-vllm bench` JSONs (tasks). Usage: python dcsum.py FILE.json..."""
import json,sys
for f in sys.argv[1:]:
    d=json.load(open(f))
    cells={(c['concurrency'],c['method']):c for c in d['cells']}
    r=[]
    for cc in [1,2,4,8,16,32,64]:
        o=cells[(cc,'ours')];n=cells[(cc,'native')]
        r.append(f"c{cc}:{o['step_ms']['T_d']/n['step_ms']['T_d']:.3f}")
    print(f.split('/')[-1], ' '.join(r), 'steps', [cells[(cc,'ours')]['num_steps'] for cc in [1,8,64]])
