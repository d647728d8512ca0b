import sys,csv
def load(d,r):
    v={}
    for line in open(f"{d}/rank{r}.csv"):
        p=line.strip().split(',')
        if len(p)<3 or line.startswith('#'): continue
        try: v[p[2]]=float(p[0])
        except: pass
    return v
a,b,n=sys.argv[1],sys.argv[2],float(sys.argv[3])
for r in (0,1):
    x,y=load(a,r),load(b,r)
    print(f"rank {r}: " + "  ".join(f"{k.replace('syscalls:sys_enter_','').replace('raw_syscalls:sys_enter','syscalls')}={(y[k]-x[k])/n:.2f}" for k in x if abs(y[k]-x[k])>0.001*n))
for d in (a,b):
    print(d, open(f"{d}/res0.txt").read().strip())
