"""Service profile: the service.py setup, then per-thread CPU of the service per request (1 vs 8 clients)."""
import sys, os, time, json, subprocess, tempfile
sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__import__("os").path.abspath(__file__)), ".."))
from pathlib import Path
import service as SV, search
from search import DIMENSIONS, Corpus, HashedProjectionEmbedding, experience_bytes

def threads_cpu(pid):
    out = {}
    tck = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = open(f"/proc/{pid}/task/{tid}/stat").read()
            comm = stat[stat.index("(")+1:stat.rindex(")")]
            f = stat[stat.rindex(")")+2:].split()
            out[(int(tid), comm)] = (int(f[11]) + int(f[12])) / tck
        except FileNotFoundError: pass
    return out
def self_cpu():
    t = os.times(); return t.user + t.system + t.children_user + t.children_system  # the load client is a child

def main():
    n = int(os.environ.get("N", 10000)); requests = int(os.environ.get("REQ", 800))
    root = Path(tempfile.mkdtemp(prefix="profile-svc-", dir="/tmp")); ws = root / "ws"
    tokenizer = search.write_word_tokenizer(root / "tokenizer" / "tokenizer.json")
    corpus = Corpus(seed=1); exps = [corpus.experience(i) for i in range(n)]
    queries = [corpus.query(exps) for _ in range(200)]
    tr = ws / "session" / "trajectories" / "bench-run.jsonl"; tr.parent.mkdir(parents=True)
    tr.write_text('{"role": "user", "content": "benchmark trajectory"}\n', encoding="utf-8")
    (ws / "procedures").mkdir()
    for e in exps: (ws / "procedures" / e["filename"]).write_bytes(experience_bytes(e, "session/trajectories/bench-run.jsonl"))
    with SV.EmbeddingServer(HashedProjectionEmbedding(DIMENSIONS, seed=1)) as emb:
        env = SV.reme_env(emb, tokenizer)
        env.update({k: v for k, v in json.loads(os.environ.get("SVC_ENV", "{}")).items()})
        t = time.perf_counter()
        p = subprocess.run([str(SV.REME), "start", "job=procedure_reindex", *SV.reme_args(ws)], cwd=root, env=env, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr[-2000:]
        print(f"reindex {time.perf_counter()-t:.1f}s", flush=True)
        port = SV.free_port(); log = root / "service.log"
        svc = subprocess.Popen([str(SV.REME), "start", *SV.reme_args(ws), "service.host=127.0.0.1", f"service.port={port}"],
                               cwd=root, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
        try:
            SV.wait_for_service(svc, port, log, timeout=600)
            open("/tmp/profile-work/svc.pid", "w").write(str(svc.pid))
            SV.run_round(port, queries, 400, 1)
            for rnd in range(int(os.environ.get("ROUNDS", 2))):
                for clients in (1, 8):
                    c0, s0 = threads_cpu(svc.pid), self_cpu()
                    el = SV.run_round(port, queries, requests, clients)
                    c1, s1 = threads_cpu(svc.pid), self_cpu()
                    per = {}
                    for k, v in c1.items():
                        d = v - c0.get(k, 0.0)
                        if d > 0: per[f"{k[1]}{'(main)' if k[0]==svc.pid else ''}"] = per.get(f"{k[1]}{'(main)' if k[0]==svc.pid else ''}", 0) + d
                    ms = {k: round(v / requests * 1e3, 3) for k, v in sorted(per.items(), key=lambda x: -x[1])}
                    print(f"round {rnd} clients={clients}: {requests/el:.1f} req/s  wall/req {el/requests*1e3:.2f} ms  "
                          f"service CPU ms/req {sum(per.values())/requests*1e3:.2f} by thread {ms}  client+emb CPU ms/req {(s1-s0)/requests*1e3:.2f}", flush=True)
            if os.environ.get("PYSPY"):
                for clients in (1, 8):
                    out = f"/tmp/profile-work/svc-pyspy-{clients}.txt"
                    spy = subprocess.Popen(["/tmp/profile-work/py-spy", "record", "--pid", str(svc.pid), "--threads", "--format", "raw", "-r", "200", "-o", out, "--nonblocking"],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(1.5)
                    el = SV.run_round(port, queries, requests, clients)
                    spy.send_signal(2); spy.wait(timeout=60)
                    print(f"py-spy clients={clients}: {requests/el:.1f} req/s -> {out}", flush=True)
        finally:
            svc.terminate(); svc.wait(timeout=30)
    import shutil; shutil.rmtree(root, ignore_errors=True)
main()
