import torch, json, sys
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
dev = 'cuda'
for cellname, cls in [('rnn-tanh', torch.nn.RNN), ('lstm', torch.nn.LSTM), ('gru', torch.nn.GRU)]:
    for H in [512, 1152, 1792, 2304]:
        B, T = 4, 256
        m = cls(H, H).to(dev)
        x = torch.randn(T, B, H, device=dev, requires_grad=True)
        for _ in range(3):
            y = m(x)[0]; y.sum().backward()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        fw, fb = [], []
        for _ in range(10):
            s.record(); 
            with torch.no_grad(): m(x)
            e.record(); torch.cuda.synchronize(); fw.append(s.elapsed_time(e))
            s.record(); y = m(x)[0]; y.backward(torch.ones_like(y)); e.record(); torch.cuda.synchronize(); fb.append(s.elapsed_time(e))
        fw.sort(); fb.sort()
        print(json.dumps({'cudnn': cellname, 'hidden': H, 'batch': B, 'fwd_ms': fw[5], 'fb_ms': fb[5]}), flush=True)
