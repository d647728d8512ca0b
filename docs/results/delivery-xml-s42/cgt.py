import subprocess,sys,re
# usage: cgt.py DUMP N PATTERN [depth]
f,n,pat=sys.argv[1],int(sys.argv[2]),sys.argv[3]
out=subprocess.run(["callgrind_annotate","--inclusive=yes","--tree=calling","--threshold=100",f],capture_output=True,text=True,errors="replace").stdout
show=False
for line in out.splitlines():
    m=re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+([*>])\s+(\S.*)$",line)
    if not m: continue
    v=int(m.group(1).replace(",",""))/n; kind=m.group(2); name=m.group(3)
    name=re.sub(r"\s*\[/[^\]]*\]$","",name)
    short=name.split(":",1)[-1] if ":" in name else name
    if kind=="*":
        show=bool(re.search(pat,name))
        if show and v>=20: print(f"{v:9.0f}  * {short[:140]}")
    elif show and v>=20: print(f"{v:9.0f}      > {short[:140]}")
