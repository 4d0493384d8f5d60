"""Session 43 (#10): the policy's `_optimum` and `CostModel.t_verify` of this checkout against the
module at 26e23ed (written to dflash_vllm/_adaptive_old.py for the run, removed after), on a pickled
in-process engine policy (`PROFILE=1 SET=code python bench/results/s43/scratch/stale_why.py 1`
writes /tmp/s43_policy.pkl: the policy after the run, and the arguments of its last `_optimum`):
the same values to the bit, on the pickled state and on 200 random points (non-zero hinges in
three of four blocks); then the hot-loop time of each (300 calls, 3 times).

    python bench/results/s43/scratch/optimum_same.py
"""
import os, pickle, subprocess, time
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
OLD = os.path.join(ROOT, "dflash_vllm", "_adaptive_old.py")


class _Tuple(tuple):
    def __new__(cls, *a):
        return tuple.__new__(cls, a)


def main():
    with open(OLD, "w") as f:
        f.write(subprocess.check_output(["git", "-C", ROOT, "show", "26e23ed:dflash_vllm/adaptive.py"], text=True))
    try:
        import dflash_vllm._adaptive_old as O
        import dflash_vllm.adaptive as A

        class Load(pickle.Unpickler):
            def __init__(self, f, mod):
                super().__init__(f)
                self.mod = mod

            def find_class(self, mod, name):
                if mod == "dflash_vllm.adaptive":
                    if name == "_CachedOptimum":  # (its fields changed; _optimum does not read it)
                        return _Tuple
                    return getattr(self.mod, name)
                return super().find_class(mod, name)

        def load(mod):
            with open("/tmp/s43_policy.pkl", "rb") as f:
                return Load(f, mod).load()

        (p, a, k), (q, _, _) = load(A), load(O)
        p.cost._th_memo = getattr(p.cost, "_th_memo", (None, None))
        new, old = p._optimum(*a, **k), q._optimum(*a, **k)
        for x, y in zip(new, old):
            assert np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y, (x, y)
        rng = np.random.default_rng(0)
        cn, co = p.cost, q.cost
        for trial in range(200):
            if trial % 50 == 49:
                h = rng.normal(0, 1e-3, 3)
                for c in (cn, co):
                    c.verify._theta = c.verify._theta.copy()
                    c.verify._theta[2:5] = h
            n0, d = float(rng.integers(1, 2000)), int(rng.integers(0, 1000))
            for stale in (True, False):
                assert cn.t_verify(n0, d, stale=stale) == co.t_verify(n0, d, stale=stale)
            dd = rng.integers(0, 1000, 12)
            assert np.array_equal(cn.t_verify_drafted(cn.t_verify(n0), n0, dd), co.t_verify(n0, dd))
        print("the same values: _optimum on the engine's state, t_verify on 200 random points")
        (p, a, k), (q, _, _) = load(A), load(O)
        p.cost._th_memo = getattr(p.cost, "_th_memo", (None, None))
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(300):
                p._optimum(*a, **k)
            t1 = time.perf_counter()
            for _ in range(300):
                q._optimum(*a, **k)
            t2 = time.perf_counter()
            print(f"_optimum hot: new {1e6 * (t1 - t0) / 300:.0f} us, old {1e6 * (t2 - t1) / 300:.0f} us")
    finally:
        os.remove(OLD)


if __name__ == "__main__":
    main()
