"""In-process search path (``run_job``, no HTTP): wall and process CPU per request, 1 task vs 8 concurrent tasks.

    N=2000 python benchmarks/profile/svccpu.py      # the search benchmark's corpus and fake embedding model
"""
import asyncio, sys, tempfile, time, os, statistics
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
import search
from search import Corpus, HashedProjectionEmbedding, DIMENSIONS, experience_bytes, build_application

async def main():
    n = int(os.environ.get("N", 2000))
    root = Path(tempfile.mkdtemp(prefix="svccpu-")); ws = root / "ws"
    tok = search.write_word_tokenizer(root / "tok" / "tokenizer.json")
    corpus = Corpus(seed=1); exps = [corpus.experience(i) for i in range(n)]
    queries = [corpus.query(exps) for _ in range(200)]
    tr = ws / "session" / "trajectories" / "bench-run.jsonl"; tr.parent.mkdir(parents=True)
    tr.write_text('{"role": "user", "content": "x"}\n')
    (ws / "procedures").mkdir()
    for e in exps: (ws / "procedures" / e["filename"]).write_bytes(experience_bytes(e, "session/trajectories/bench-run.jsonl"))
    app = build_application(ws, tok, None, HashedProjectionEmbedding(DIMENSIONS, seed=1), False)
    await app.start()
    calls = [(queries[i % 200], ("when_to_use", "when_to_use_content")[i % 2]) for i in range(800)]
    for q, v in calls[:400]:
        await app.run_job("procedure_search", query=q, index=v, limit=5)
    out = {1: [], 8: []}
    for _ in range(3):
        for clients in (1, 8):
            async def worker(share):
                for q, v in share:
                    await app.run_job("procedure_search", query=q, index=v, limit=5)
            t, c = time.perf_counter(), time.process_time()
            await asyncio.gather(*(worker(calls[k::clients]) for k in range(clients)))
            out[clients].append(((time.perf_counter() - t) / 800 * 1e3, (time.process_time() - c) / 800 * 1e3))
    for clients, rows in out.items():
        print(f"{clients} task(s): wall/req {statistics.median(r[0] for r in rows):.3f} ms, CPU/req {statistics.median(r[1] for r in rows):.3f} ms  {[(round(a,2), round(b,2)) for a, b in rows]}")
    await app.close()
    import shutil
    shutil.rmtree(root, ignore_errors=True)
asyncio.run(main())
