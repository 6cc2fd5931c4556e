"""Start the 100k workspace (copy) with timers around each phase. Usage: python start.py WS [--close]"""
import sys, time, asyncio, json, threading, gc, os
sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__import__("os").path.abspath(__file__)), ".."))
from pathlib import Path
import search as B
from reme_procedure_memory import store as S
from reme_procedure_memory.search.view import store as F, state as VS, graph as G
from reme_procedure_memory.search.vector import matrix as V
from reme_procedure_memory.operations import recovery as R
from reme_procedure_memory.search import views as VW
from reme_procedure_memory.search.keyword import bm25 as K
T = {}; L = threading.Lock()
def acc(k, dt):
    with L: T[k] = T.get(k, 0.0) + dt
def wrap(obj, name, key=None):
    if os.environ.get('NOWRAP') or not hasattr(obj, name): return  # absent in this revision
    f = getattr(obj, name); key = key or f"{getattr(obj,'__name__',obj)}.{name}"
    if asyncio.iscoroutinefunction(f):
        async def w(*a, **k):
            t = time.perf_counter()
            try: return await f(*a, **k)
            finally: acc(key, time.perf_counter() - t)
    else:
        def w(*a, **k):
            t = time.perf_counter()
            try: return f(*a, **k)
            finally: acc(key, time.perf_counter() - t)
    import inspect
    if isinstance(inspect.getattr_static(obj, name), staticmethod): w = staticmethod(w)
    setattr(obj, name, w)
def wrap_gen(obj, name, key):
    if os.environ.get('NOWRAP') or not hasattr(obj, name): return
    f = getattr(obj, name)
    def w(*a, **k):
        it = f(*a, **k)
        while True:
            t = time.perf_counter()
            try: x = next(it)
            except StopIteration: acc(key, time.perf_counter() - t); return
            acc(key, time.perf_counter() - t); yield x
    setattr(obj, name, w)
if not os.environ.get('NOWRAP'):
  pass
# view load
wrap(VS.ViewState, "read", "view: ViewState.read (manifest, np.load vectors.npz, log)")
wrap_gen(VS.ViewState, "_records", "view: records zstd+json.loads (generator)")
wrap(F.ProcedureFileStore, "_chunk_of", "view: _chunk_of (FileChunk.model_validate)")
wrap(VS.ViewState, "_read_parts", "view: ViewState._read_parts (format 3: parts + CRC, records JSON)")
wrap(VS.ViewState, "_read_legacy", "view: ViewState._read_legacy (format 2 read into columns)")
wrap(F, "restore_columns", "view: restore_columns (chunks + graph nodes from columns)")
wrap(F.ProcedureFileStore, "dump", "view: ProcedureFileStore.dump")
wrap(V.VectorMatrix, "restore", "view: VectorMatrix.restore")
wrap(K.ProcedureBM25Index, "restore", "view: BM25 restore")
wrap(G.ProcedureFileGraph, "restore", "view: graph restore")
wrap(F.ProcedureFileStore, "_drop_texts", "view: _drop_texts")
wrap(F.ProcedureFileStore, "_restore", "view: _restore total")
wrap(F.ProcedureFileStore, "load", "view: load total")
# reconcile
wrap(R.Recovery, "reconcile", "rec: reconcile total")
wrap(R.Recovery, "recover_intents", "rec: recover_intents")
wrap(R.Recovery, "settle_journal", "rec: settle_journal")
wrap(R.Recovery, "index_many", "rec: index_many")
wrap(VW.Views, "indexed", "rec: views.indexed")
wrap(VW.Views, "foreign_tokenizer", "rec: views.foreign_tokenizer")
wrap(VW.Views, "remove", "rec: views.remove")
wrap(VW.Views, "dump", "rec: views.dump")
wrap(S.ExperienceFiles, "paths", "rec: scan paths() scandir+sort")
wrap(S.ExperienceFiles, "_read", "rec: scan _read total")  # before branch reconcile
wrap(S.ExperienceFiles, "_judge", "rec: scan _judge (validate) total")
from reme_procedure_memory.storage import experiences as E  # noqa: E402
if hasattr(E, "read_ahead"):
    wrap_gen(E, "read_ahead", "rec: scan read_ahead (bytes, waits on readers)")
wrap(S.ExperienceFiles, "_source_problem", "rec: _read source_problem")
for n in ("parse_experience", "check_name", "version_of"):
    wrap(S, n, f"rec: _read {n}")
_open = os.open
def timed_open(*a, **k):
    t = time.perf_counter()
    try: return _open(*a, **k)
    finally: acc("os.open (all)", time.perf_counter() - t)
os.open = timed_open if not os.environ.get('NOWRAP') else os.open
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"): return int(line.split()[1]) / 1024
def deep(o, seen=None):
    """Approximate deep size (objects not yet seen)."""
    seen = set() if seen is None else seen
    if id(o) in seen: return 0
    seen.add(id(o)); n = sys.getsizeof(o)
    import numpy as np
    if isinstance(o, np.ndarray): return n if o.base is not None else n
    if isinstance(o, dict): n += sum(deep(k, seen) + deep(v, seen) for k, v in o.items())
    elif isinstance(o, (list, tuple, set, frozenset)): n += sum(deep(x, seen) for x in o)
    elif hasattr(o, "__dict__"): n += deep(o.__dict__, seen)
    if hasattr(o, "__pydantic_fields_set__"):
        for a in ("__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__"):
            n += deep(getattr(o, a, None), seen)
    return n
def sizes(app):
    import numpy as np, random
    mem = app.context.components["procedure_memory"]["default"]
    for view, store in mem.views.stores.items():
        vm = store.vectors
        rows = sum(b.rows.nbytes for b in vm._blocks); codes = sum(b.index.codes.size() for b in vm._blocks)
        chunks = list(store.file_chunks.values()); sample = random.Random(0).sample(chunks, 300)
        seen = set()
        for c in sample:  # exclude the shared embedding view (counted as matrix rows)
            seen.add(id(c.embedding))
        per_chunk = sum(deep(c, seen) for c in sample) / len(sample)
        g = store.file_graph; gp = list(g._nodes.items()); gs = random.Random(0).sample(gp, 300); seen2 = set()
        per_node = sum(deep(k, seen2) + deep(v, seen2) for k, v in gs) / len(gs)
        ki = store.keyword_index
        arrs = 0
        for name, val in vars(ki).items():
            if isinstance(val, np.ndarray): arrs += val.nbytes
            elif isinstance(val, dict):
                for x in val.values():
                    if isinstance(x, np.ndarray): arrs += x.nbytes
                    elif isinstance(x, tuple): arrs += sum(y.nbytes for y in x if isinstance(y, np.ndarray))
        ki_py = {name: (len(val) if hasattr(val, "__len__") else None) for name, val in vars(ki).items() if not name.startswith("__")}
        print(f"[{view}] matrix float16 rows alloc {rows/2**20:.0f} MiB (used {len(vm)*vm.dimensions*2/2**20:.0f}), faiss int8 codes {codes/2**20:.0f} MiB, norms {vm._norms.nbytes/2**20:.1f} MiB, ids+row_of ~{(deep(vm._ids)+deep(vm._row_of))/2**20:.0f} MiB")
        print(f"[{view}] file_chunks {len(chunks)} x ~{per_chunk:.0f} B = {len(chunks)*per_chunk/2**20:.0f} MiB; graph nodes {len(gp)} x ~{per_node:.0f} B = {len(gp)*per_node/2**20:.0f} MiB; BM25 numpy arrays {arrs/2**20:.0f} MiB; bm25 attrs {ki_py}")
    es = mem.embedding_store
    print("embedding store attrs:", {k: (len(v) if hasattr(v, "__len__") else type(v).__name__) for k, v in vars(es).items() if not k.startswith("__")})
async def main(ws, close):
    model = B.HashedProjectionEmbedding(B.DIMENSIONS, seed=7)
    app = B.build_application(Path(ws) / "ws", Path(ws) / "tok" / "tokenizer.json", None, model, stock=False)
    from reme.components.base_component import BaseComponent
    orig = BaseComponent.start
    async def st(self):
        t = time.perf_counter(); await orig(self); acc(f"component {self.component_type}:{self.name}", time.perf_counter() - t)
    BaseComponent.start = st
    if os.environ.get("TRACE"):
        import tracemalloc; tracemalloc.start(1)
    gc.collect(); r0 = rss()
    t = time.perf_counter(); await app.start(); el = time.perf_counter() - t
    gc.collect()
    print(json.dumps({"start_s": el, "rss_before": r0, "rss_after": rss(), "embedding_model_calls": model.calls}))
    for k, v in sorted(T.items()): print(f"  {v:8.3f}  {k}")
    if os.environ.get("SIZES"):
        sizes(app)
    if os.environ.get("TRACE"):
        import tracemalloc
        snap = tracemalloc.take_snapshot(); tot = sum(st.size for st in snap.statistics("filename"))
        print(f"tracemalloc total traced {tot/2**20:.0f} MiB; top by line:")
        for st in snap.statistics("lineno")[:22]: print(f"  {st.size/2**20:8.1f} MiB  {st.count:9d} blocks  {st.traceback[0].filename.split('site-packages/')[-1]}:{st.traceback[0].lineno}")
    if os.environ.get("HOLD"):
        open("/tmp/profile-work/ready", "w").write(str(os.getpid())); await asyncio.sleep(float(os.environ["HOLD"]))
    if close:
        t = time.perf_counter(); await app.close(); print("close", time.perf_counter() - t)
asyncio.run(main(sys.argv[1], "--close" in sys.argv))
