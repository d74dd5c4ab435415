# The select's bins as the kernel makes them (xtask/src/kernels/select.rs): for parts of 4096
# columns, how many keys share the bin where the (k+1)-th largest lies, and which way it takes.
import numpy as np
rng=np.random.default_rng(7)
def okey(z):
    b=z.astype(np.float32).view(np.uint32).astype(np.uint64)
    return np.where((b>>31)==1, (~b)&0xffffffff, b|0x80000000).astype(np.int64)
def binof(d):
    e=np.floor(np.log2(np.maximum(d|32,1))).astype(np.int64)
    return np.where(d<32, d, 16*e-48+((d>>(e-4))&15))
V=4096
for want in [21,51,257]:
  for kind in ["model","flat","peaked"]:
    ways=[0,0,0]; Ls=[]
    for T in [0.6,0.7,0.8,0.9,1.0]:
      for r in range(100):
        if kind=="model": l=-1.1*np.log(1+151936*rng.random(V))
        elif kind=="flat": l=1e-3*rng.gumbel(size=V)
        else: l=rng.gumbel(size=V); l[rng.integers(V)]+=25
        z=(l/np.float32(T)).astype(np.float32); k=okey(z); d=k.max()-k
        h=np.bincount(binof(d),minlength=464); c=np.cumsum(h); b=np.searchsorted(c,want)
        w=0 if b<32 else (1 if h[b]<=507 else 2); ways[w]+=1; Ls.append(h[b])
    print(want,kind,"ways one-value/listed/radix",ways,"L median %d p90 %d max %d"%(np.median(Ls),np.percentile(Ls,90),max(Ls)))
