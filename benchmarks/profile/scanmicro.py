import os, time, json, hashlib
root = "/tmp/profile-ws100k/ws/procedures"
t = time.perf_counter()
with os.scandir(root) as it:
    ents = [e for e in it if e.name.endswith(".json")]
t1 = time.perf_counter()
st = [(e.name, e.stat(follow_symlinks=False)) for e in ents]
t2 = time.perf_counter()
keys = {n: (s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns) for n, s in st}
t3 = time.perf_counter()
print(f"scandir {len(ents)}: {t1-t:.3f}s; lstat each (DirEntry.stat): {t2-t1:.3f}s; key tuples: {t3-t2:.3f}s")
names = [e.name for e in ents]
t = time.perf_counter(); tot = 0
for n in names:
    fd = os.open(f"{root}/{n}", os.O_RDONLY | os.O_NOFOLLOW)
    try: data = os.read(fd, 1 << 20)
    finally: os.close(fd)
    tot += len(data)
t1 = time.perf_counter()
print(f"os.open+os.read+close x{len(names)}: {t1-t:.3f}s ({tot/len(names):.0f} B avg)")
t = time.perf_counter()
for n in names:
    fd = os.open(f"{root}/{n}", os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as h: data = h.read()
print(f"os.open+fdopen+read (current): {time.perf_counter()-t:.3f}s")
datas = []
for n in names[:100000]:
    with open(f"{root}/{n}", "rb") as h: datas.append(h.read())
t = time.perf_counter(); [json.loads(d) for d in datas]; print(f"json.loads(bytes) x{len(datas)}: {time.perf_counter()-t:.3f}s")
t = time.perf_counter(); [hashlib.sha256(d).hexdigest()[:16] for d in datas]; print(f"sha256: {time.perf_counter()-t:.3f}s")
