import json,glob,statistics,collections,sys
d=collections.defaultdict(lambda: collections.defaultdict(list))
for b in "BN":
    for f in sorted(glob.glob(f"docs/results/one-clock-s44/{b}-r*.json")):
        j=json.load(open(f))
        for r in j["results"]:
            if r.get("operation") in ("remote-peers","remote-pipe","open-output-pipe","cached-peers","publish","join-group","create-group","start"):
                d[(r["config"],r["operation"])][b].append(r["ms_median"])
for k in sorted(d):
    B=d[k]["B"]; N=d[k]["N"]
    print(f"| {k[0]} | {k[1]} | {statistics.median(B):.3f} ({min(B):.3f}-{max(B):.3f}) | {statistics.median(N):.3f} ({min(N):.3f}-{max(N):.3f}) |")
