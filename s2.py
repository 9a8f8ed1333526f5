exec(open('/tmp/rm/gen.py').read())
S=int(open('/tmp/rm/pidS').read())
write('/tmp/rm/s2.json',[gpu(0,[mig(0,1,0,[p(A,5120)]),mig(1,2,0,[p(B,7168)]),mig(2,3,0,[p(S,2048,"always")])])])
