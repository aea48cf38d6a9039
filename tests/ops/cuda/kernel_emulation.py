#!/usr/bin/python3
"""CPU emulation of the index arithmetic of ops/cuda, checked against plain numpy references, so
that what can be verified without a GPU is verified in every build with CUDA:

 1. attention_flash.cu: forward, dk/dv and dq kernels emulated lane by lane, warp by warp, tile by
    tile, with the ldmatrix (.trans) and mma.m16n8k16 fragment layouts of the PTX ISA, the same
    address helpers (a_frag, b_frag, bt_frag), masks, online softmax and C->A register reuse.
    Padding columns of the shared tiles hold NaN, so reading them would show. Sliding windows too:
    the first tile of a block, the tiles a warp skips or runs unmasked, the per-row masks and the
    guard of the online softmax against rows that have seen no key yet. In f64 the result
    must equal exact attention to rounding; with P and dS rounded to bf16 or f16 (as the kernels do) the
    error must sit well inside the tolerances tests/ops/cuda/test_cuda_ops.cpp uses.
 2. matmul.cpp: the row-major -> column-major cuBLASLt mapping (layouts, ops, problem size).
 3. embedding.cu: the chunked deterministic scatter (every run summed once, into the right row).
 5. sample.cu: the top-k set of the sampling kernel, thread by thread (each thread a strided
    chunk of the vocabulary): the order-keeping float keys and their inverse, the binary search for
    the k-th largest value over counts, the ties' ranks from the threads' exclusive prefix, against
    the k largest by value with ties taken in draw order.
 4. Newton-Schulz over a batch of matrices (CudaBackend::newton_schulz, newton_schulz.cu): the
    batched load/store (transposing or not), the per-matrix normalisation, and the strided-batch
    GEMMs through the same cuBLASLt mapping, each matrix against the definition in ops.h.
 6. Polar Express (CudaBackend::polar_express) the same way, both branches against nanochat's
    iteration; and NorMuon's row/column indexing (optimizer.cu) against numpy's means.
 7. attention_hopper.cu and attention_hopper_backward.cu (the wgmma + TMA forward and backward):
    hopper_emulation.py, their shared memory byte by byte through the 128-byte swizzle, their wgmma
    descriptors and fragments, their mbarrier rings.

The emulation follows the kernels' code structure; a change to a kernel's tiling or fragment
arithmetic must be mirrored here. Runs with Debian's python3-numpy (/usr/bin/python3).
"""
import itertools
import math
import random

import numpy as np

# ---- one warp's lanes and the PTX fragment layouts ---------------------------------------------
lane = np.arange(32)
g = lane // 4  # groupID
t = lane % 4   # thread in group
PAD = 8        # kPad: bf16 elements of padding per shared row

# ldmatrix.x4: lanes 8i..8i+7 address the rows of matrix i; register i of lane L holds matrix i's
# (row L/4, cols 2(L%4), +1), or with .trans its (rows 2(L%4), +1; col L/4).
def ldm(smem, rows, cols, trans):
    regs = np.zeros((4, 32, 2))
    for i in range(4):
        M = np.array([smem[rows[8*i + r], cols[8*i + r]:cols[8*i + r] + 8] for r in range(8)])
        assert M.shape == (8, 8)
        if not trans:
            regs[i, :, 0] = M[g, 2*t]; regs[i, :, 1] = M[g, 2*t + 1]
        else:
            regs[i, :, 0] = M[2*t, g]; regs[i, :, 1] = M[2*t + 1, g]
    return regs

# mma.m16n8k16: rebuild A [16x16] and B [16x8] from the fragments, accumulate D into c.
def mma(c, a, b0, b1):
    A = np.full((16, 16), np.nan); B = np.full((16, 8), np.nan)
    for i in range(4):
        r = g + 8*(i % 2); col = 2*t + 8*(i // 2)
        A[r, col] = a[i][:, 0]; A[r, col + 1] = a[i][:, 1]
    B[2*t, g] = b0[:, 0]; B[2*t + 1, g] = b0[:, 1]; B[2*t + 8, g] = b1[:, 0]; B[2*t + 9, g] = b1[:, 1]
    assert not np.isnan(A).any() and not np.isnan(B).any()
    D = A @ B
    c[:, 0] += D[g, 2*t]; c[:, 1] += D[g, 2*t + 1]; c[:, 2] += D[g + 8, 2*t]; c[:, 3] += D[g + 8, 2*t + 1]

# attention_flash.cu's address helpers, per lane (row, col).
def a_frag(r0, c0): return r0 + (lane & 7) + ((lane >> 3) & 1) * 8, c0 + (lane >> 4) * 8
def b_frag(n0, k0): return n0 + (lane & 7) + (lane >> 4) * 8, k0 + ((lane >> 3) & 1) * 8
def bt_frag(k0, n0): return k0 + (lane & 7) + ((lane >> 3) & 1) * 8, n0 + (lane >> 4) * 8

def c_to_a(c0, c1):
    a = np.zeros((4, 32, 2))
    a[0, :, 0], a[0, :, 1] = c0[:, 0], c0[:, 1]
    a[1, :, 0], a[1, :, 1] = c0[:, 2], c0[:, 3]
    a[2, :, 0], a[2, :, 1] = c1[:, 0], c1[:, 1]
    a[3, :, 0], a[3, :, 1] = c1[:, 2], c1[:, 3]
    return a

def load_tile(R, HD, src, r0, limit):  # src: [rows, d] of one head, d <= HD (the compute width)
    d = src.shape[1]
    tile = np.zeros((R, HD + PAD))  # columns [d, HD) stay zero, as cp.async zero-fills them
    for r in range(R):
        if r0 + r < limit: tile[r, :d] = src[r0 + r]
    tile[:, HD:] = np.nan  # padding must never be read
    return tile

def padded_head_dim(d):  # attention_flash.cu's compute width for a head_dim d
    assert flash_supports_head_dim(d)
    return 64 if d <= 64 else 96 if d <= 96 else 128

def flash_supports_head_dim(d): return d % 8 == 0 and 64 <= d <= 128

def tile_col(pos, tile0, width):  # attention_flash.cu's tile_col, per lane
    return np.clip(pos - tile0, -1, width)


def quad_max(x):  # x [32]
    for o in (1, 2): x = np.maximum(x, x[lane ^ o])
    return x
def quad_sum(x):
    for o in (1, 2): x = x + x[lane ^ o]
    return x

LOG2E = 1.4426950408889634
NO_WINDOW = 1 << 40  # kNoWindow: the window the kernels take for full causal attention

def kernel_window(window): return window if window > 0 else NO_WINDOW  # the launchers' conversion

# ---- flash_forward_kernel (batch 1; q [tq, hq, HD], k, v [tk, hkv, HD]) -------------------------
# Note [two m-tiles per warp]: a warp owns 32 rows as two 16-row m-tiles sharing each K and V
# fragment; it skips a key tile none of its rows sees and the mask on one all of them see whole.
def online_softmax(s, o, row_max, row_sum, first, last, scale):  # one m-tile: s [NT, 32, 4], o [DT, 32, 4]
    NT = s.shape[0]
    for rr in range(2):
        mx = np.full(32, -np.inf)
        for j in range(NT):
            for e in range(2):
                x = s[j, :, rr*2 + e]; col = j*8 + t*2 + e
                x = x * scale * LOG2E if last is None else np.where((col >= first[rr]) & (col <= last[rr]),
                                                                    x * scale * LOG2E, -np.inf)
                s[j, :, rr*2 + e] = x; mx = np.maximum(mx, x)
        mx = quad_max(mx)
        new_max = np.maximum(row_max[rr], mx); base = np.where(new_max == -np.inf, 0.0, new_max)
        SKIPPED["forward unseen row"] += int((new_max == -np.inf).any())  # the guard's path
        corr = np.exp2(row_max[rr] - base)
        row_max[rr] = new_max; ssum = np.zeros(32)
        for j in range(NT):
            for e in range(2):
                x = np.exp2(s[j, :, rr*2 + e] - base); s[j, :, rr*2 + e] = x; ssum += x
        row_sum[rr] = row_sum[rr] * corr + ssum
        o[:, :, rr*2] *= corr; o[:, :, rr*2 + 1] *= corr

def warp_mma_rows(acc, a_tile, a_row, b_tile):  # acc [MS, N8, 32, 4] += A_ms B^T, B fragments shared
    MS, N8 = acc.shape[0], acc.shape[1]
    for kk in range((a_tile.shape[1] - PAD) // 16):
        x = [ldm(a_tile, *a_frag(a_row + ms*16, kk*16), False) for ms in range(MS)]
        for np_ in range(N8 // 2):
            y = ldm(b_tile, *b_frag(np_*16, kk*16), False)
            for ms in range(MS):
                mma(acc[ms, 2*np_], x[ms], y[0], y[1]); mma(acc[ms, 2*np_ + 1], x[ms], y[2], y[3])

def warp_mma_registers_by_tile(acc, c, tile):  # acc [MS, D8, 32, 4] += C_ms B, B fragments shared
    MS, D8, N8 = acc.shape[0], acc.shape[1], c.shape[1]
    for kk in range(N8 // 2):
        a = [c_to_a(c[ms, 2*kk], c[ms, 2*kk + 1]) for ms in range(MS)]
        for dp in range(D8 // 2):
            b = ldm(tile, *bt_frag(kk*16, dp*16), True)
            for ms in range(MS):
                mma(acc[ms, 2*dp], a[ms], b[0], b[1]); mma(acc[ms, 2*dp + 1], a[ms], b[2], b[3])

# the shapes must reach every path
SKIPPED = {"forward": 0, "forward whole": 0, "dq": 0, "dq whole": 0, "dkdv": 0,
           "forward window": 0, "forward first tile": 0, "forward unseen row": 0, "dq window": 0, "dq first tile": 0,
           "dkdv window": 0, "dkdv fewer query tiles": 0}

def forward(q, k, v, kv_len, scale, window=0):
    # q [tq, hq, d], k, v [tk, hkv, d] (batch 1); the kernel instance computes HD >= d columns
    HD = padded_head_dim(q.shape[2])
    tq, hq, _ = q.shape; tk, hkv, _ = k.shape; group = hq // hkv; q_pos0 = kv_len - tq
    out = np.full(q.shape, np.nan); lse = np.full((hq, tq), np.nan)
    M, N, WR = 128, 64, 32; DT, NT = HD // 8, N // 8
    W = kernel_window(window)
    m_tiles = (tq + M - 1) // M
    for bx in range(m_tiles):
        for h in range(hq):
            m0 = (m_tiles - 1 - bx) * M; kh = h // group
            keys = min(q_pos0 + min(m0 + M, tq), kv_len); n_tiles = (keys + N - 1) // N
            nt0 = max(0, q_pos0 + m0 - W) // N; SKIPPED["forward first tile"] += nt0 > 0
            sQ = load_tile(M, HD, q[:, h], m0, tq)
            for warp in range(4):
                w0 = m0 + warp*WR
                warp_last = min(q_pos0 + min(w0 + WR, tq) - 1, kv_len - 1) if w0 < tq else -1
                warp_all = q_pos0 + w0  # below kv_len wherever warp_last >= 0
                warp_first = warp_all - W; all_first = warp_all + WR - 1 - W
                o = np.zeros((2, DT, 32, 4))
                row_max = [[np.full(32, -np.inf)] * 2 for _ in range(2)]; row_sum = [[np.zeros(32)] * 2 for _ in range(2)]
                for nt in range(nt0, n_tiles):
                    n0 = nt * N
                    active = n0 <= warp_last and n0 + N - 1 >= warp_first
                    whole = n0 + N - 1 <= warp_all and n0 >= all_first
                    if not active:
                        SKIPPED["forward" if n0 > warp_last else "forward window"] += 1; continue
                    SKIPPED["forward whole"] += whole
                    sK = load_tile(N, HD, k[:, kh], n0, kv_len); sV = load_tile(N, HD, v[:, kh], n0, kv_len)
                    s = np.zeros((2, NT, 32, 4))
                    warp_mma_rows(s, sQ, warp*WR, sK)
                    for ms in range(2):
                        pos_lo = q_pos0 + w0 + ms*16 + g
                        first = [tile_col(pos_lo + rr*8 - W, n0, N) for rr in range(2)]
                        last = None if whole else [tile_col(np.minimum(pos_lo + rr*8, kv_len - 1), n0, N)
                                                   for rr in range(2)]
                        online_softmax(s[ms], o[ms], row_max[ms], row_sum[ms], first, last, scale)
                    warp_mma_registers_by_tile(o, s, sV)
                for ms in range(2):
                    for rr in range(2):
                        ssum = quad_sum(row_sum[ms][rr]); row = w0 + ms*16 + g + rr*8
                        for L in range(32):
                            if row[L] < tq:
                                for dt in range(q.shape[2] // 8):  # store_rows: the d stored columns
                                    out[row[L], h, dt*8 + t[L]*2] = o[ms, dt, L, rr*2] / ssum[L]
                                    out[row[L], h, dt*8 + t[L]*2 + 1] = o[ms, dt, L, rr*2 + 1] / ssum[L]
                                if t[L] == 0:
                                    lse[h, row[L]] = (row_max[ms][rr][L] + math.log2(ssum[L])) * math.log(2)
    return out, lse

# ---- flash_dkdv_kernel (Note [dk/dv in two phases]) ---------------------------------------------
def store_t(x): return x  # a value stored to shared memory as T (pack2); the 16-bit check rounds it

def warp_mma_rows_by_tile(acc, a_tile, a_row, b_tile, b_col):  # warp_mma_rows<true>: += A_ms B[:, b_col..]
    MS, N8 = acc.shape[0], acc.shape[1]
    for kk in range(acc_k_steps(a_tile)):
        x = [ldm(a_tile, *a_frag(a_row + ms*16, kk*16), False) for ms in range(MS)]
        for np_ in range(N8 // 2):
            y = ldm(b_tile, *bt_frag(kk*16, b_col + np_*16), True)
            for ms in range(MS):
                mma(acc[ms, 2*np_], x[ms], y[0], y[1]); mma(acc[ms, 2*np_ + 1], x[ms], y[2], y[3])

def acc_k_steps(a_tile): return (a_tile.shape[1] - PAD) // 16

def dkdv(q, k, v, dout, lse, delta, scale, window=0):
    HD = padded_head_dim(q.shape[2]); HALF = HD // 2
    T, hq, _ = q.shape; hkv = k.shape[1]; group = hq // hkv
    dk = np.full(k.shape, np.nan); dv = np.full(v.shape, np.nan)
    N, M = 128, 64; W = kernel_window(window)
    for bx in range((T + N - 1) // N):
        for kh in range(hkv):
            n0 = bx * N; m_first = n0 // M; per_head = min(T - 1, n0 + N - 1 + W) // M + 1 - m_first
            count = group * per_head; SKIPPED["dkdv fewer query tiles"] += per_head < (T + M - 1) // M - m_first
            sK = load_tile(N, HD, k[:, kh], n0, T); sV = load_tile(N, HD, v[:, kh], n0, T)
            dkacc = np.zeros((8, 2, HALF // 8, 32, 4)); dvacc = np.zeros((8, 2, HALF // 8, 32, 4))
            hg = mt = 0  # counted, as the kernel does
            for it in range(count):
                h = kh*group + hg; m0 = (m_first + mt) * M
                mt += 1
                if mt == per_head: mt = 0; hg += 1
                q_s = load_tile(M, HD, q[:, h], m0, T); o_s = load_tile(M, HD, dout[:, h], m0, T)
                l_s = np.array([lse[h, m0 + i] if m0 + i < T else 0 for i in range(M)])
                d_s = np.array([delta[h, m0 + i] if m0 + i < T else 0 for i in range(M)])
                sP = np.full((N, M + PAD), np.nan); sS = np.full((N, M + PAD), np.nan)
                for warp in range(8):  # phase 1: keys wk*32.., queries wh*32..
                    wk, wh = warp >> 1, warp & 1
                    key0 = n0 + wk*32; q0 = m0 + wh*32
                    causal = q0 < T and key0 <= min(q0 + 31, T - 1); anyv = causal and q0 <= key0 + 31 + W
                    s = np.zeros((2, 4, 32, 4)); dp = np.zeros((2, 4, 32, 4))
                    if anyv:
                        warp_mma_rows(s, sK, wk*32, q_s[wh*32:]); warp_mma_rows(dp, sV, wk*32, o_s[wh*32:])
                    else:
                        SKIPPED["dkdv" if not causal else "dkdv window"] += 1
                    for ms in range(2):
                        for rr in range(2):
                            kr = wk*32 + ms*16 + g + rr*8
                            first = tile_col(n0 + kr, m0, M); last = tile_col(np.minimum(T - 1, n0 + kr + W), m0, M)
                            for j in range(4):
                                for e in range(2):
                                    qi = wh*32 + j*8 + t*2 + e
                                    valid = (qi >= first) & (qi <= last)
                                    pv = np.where(valid, np.exp2(s[ms, j, :, rr*2 + e] * scale * LOG2E - l_s[qi] * LOG2E),
                                                  0.0)
                                    ds = pv * (dp[ms, j, :, rr*2 + e] - d_s[qi])
                                    sP[kr, qi] = store_t(pv); sS[kr, qi] = store_t(ds)
                assert not np.isnan(sP[:, :M]).any() and not np.isnan(sS[:, :M]).any(), "P^T or dS^T not all written"
                for warp in range(8):  # phase 2: keys wk*32.., head columns wh*HALF..
                    wk, wh = warp >> 1, warp & 1
                    warp_mma_rows_by_tile(dvacc[warp], sP, wk*32, o_s, wh*HALF)
                    warp_mma_rows_by_tile(dkacc[warp], sS, wk*32, q_s, wh*HALF)
            for warp in range(8):
                wk, wh = warp >> 1, warp & 1
                for ms in range(2):
                    for rr in range(2):
                        key = n0 + wk*32 + ms*16 + g + rr*8
                        for L in range(32):
                            if key[L] < T:
                                for dt in range(HALF // 8):
                                    for e in range(2):
                                        col = wh*HALF + dt*8 + t[L]*2 + e
                                        if col < k.shape[2]:  # store_rows: the d stored columns
                                            dk[key[L], kh, col] = dkacc[warp, ms, dt, L, rr*2 + e] * scale
                                            dv[key[L], kh, col] = dvacc[warp, ms, dt, L, rr*2 + e]
    return dk, dv

# ---- flash_dq_kernel -----------------------------------------------------------------------------
def dq_kernel(q, k, v, dout, lse, delta, scale, window=0):
    HD = padded_head_dim(q.shape[2])
    T, hq, _ = q.shape; hkv = k.shape[1]; group = hq // hkv
    dq = np.full(q.shape, np.nan)
    M, N, WR = 128, 32, 32; DT, NT = HD // 8, N // 8
    W = kernel_window(window)
    m_tiles = (T + M - 1) // M
    for bx in range(m_tiles):
        for h in range(hq):
            m0 = (m_tiles - 1 - bx) * M; kh = h // group; n_tiles = (min(m0 + M, T) + N - 1) // N
            nt0 = max(0, m0 - W) // N; SKIPPED["dq first tile"] += nt0 > 0
            sQ = load_tile(M, HD, q[:, h], m0, T); sO = load_tile(M, HD, dout[:, h], m0, T)
            for warp in range(4):
                w0 = m0 + warp*WR; warp_last = min(w0 + WR, T) - 1 if w0 < T else -1
                warp_first = w0 - W; all_first = w0 + WR - 1 - W
                rows = [[w0 + ms*16 + g + rr*8 for rr in range(2)] for ms in range(2)]
                lse_l2 = [[np.where(r < T, lse[h, np.minimum(r, T - 1)] * LOG2E, 0) for r in rs] for rs in rows]
                dl = [[np.where(r < T, delta[h, np.minimum(r, T - 1)], 0) for r in rs] for rs in rows]
                dqacc = np.zeros((2, DT, 32, 4))
                for nt in range(nt0, n_tiles):
                    n0 = nt * N
                    if n0 > warp_last: SKIPPED["dq"] += 1; continue
                    if n0 + N - 1 < warp_first: SKIPPED["dq window"] += 1; continue
                    whole = n0 + N - 1 <= w0 and n0 >= all_first; SKIPPED["dq whole"] += whole
                    k_s = load_tile(N, HD, k[:, kh], n0, T); v_s = load_tile(N, HD, v[:, kh], n0, T)
                    s = np.zeros((2, NT, 32, 4)); dpv = np.zeros((2, NT, 32, 4))
                    warp_mma_rows(s, sQ, warp*WR, k_s); warp_mma_rows(dpv, sO, warp*WR, v_s)
                    for ms in range(2):
                        for rr in range(2):
                            r = rows[ms][rr]
                            first = 0 if whole else tile_col(r - W, n0, N)
                            last = N - 1 if whole else np.where(r < T, tile_col(r, n0, N), -1)
                            for j in range(NT):
                                for e in range(2):
                                    col = j*8 + t*2 + e
                                    valid = (col >= first) & (col <= last)
                                    x = s[ms, j, :, rr*2 + e]
                                    pv = np.where(valid, np.exp2(x * scale * LOG2E - lse_l2[ms][rr]), 0.0)
                                    s[ms, j, :, rr*2 + e] = pv * (dpv[ms, j, :, rr*2 + e] - dl[ms][rr])
                    warp_mma_registers_by_tile(dqacc, s, k_s)
                for ms in range(2):
                    for rr in range(2):
                        row = rows[ms][rr]
                        for L in range(32):
                            if row[L] < T:
                                for dt in range(q.shape[2] // 8):
                                    for e in range(2):
                                        dq[row[L], h, dt*8 + t[L]*2 + e] = dqacc[ms, dt, L, rr*2 + e] * scale
    return dq

# ---- exact references ----------------------------------------------------------------------------
def reference(q, k, v, kv_len, scale, window=0):  # ops.h: position p sees keys max(0, p - window) ..= p
    tq, hq, D = q.shape; hkv = k.shape[1]; group = hq // hkv; q_pos0 = kv_len - tq
    out = np.zeros(q.shape); lse = np.zeros((hq, tq)); P = {}
    for h in range(hq):
        kh = h // group
        S = q[:, h] @ k[:kv_len, kh].T * scale
        for i in range(tq):
            S[i, q_pos0 + i + 1:] = -np.inf
            if window > 0: S[i, :max(0, q_pos0 + i - window)] = -np.inf
        mx = S.max(1, keepdims=True); E = np.exp(S - mx); l = E.sum(1, keepdims=True)
        P[h] = E / l; out[:, h] = P[h] @ v[:kv_len, kh]; lse[h] = (mx + np.log(l))[:, 0]
    return out, lse, P

def ref_backward(q, k, v, dout, scale, window=0):
    T, hq, D = q.shape; hkv = k.shape[1]; group = hq // hkv
    out, lse, P = reference(q, k, v, T, scale, window)
    dq = np.zeros(q.shape); dk = np.zeros(k.shape); dv = np.zeros(v.shape)
    for h in range(hq):
        kh = h // group
        dv[:, kh] += P[h].T @ dout[:, h]
        dP = dout[:, h] @ v[:, kh].T
        dS = P[h] * (dP - (dP * P[h]).sum(1, keepdims=True))
        dq[:, h] = dS @ k[:, kh] * scale; dk[:, kh] += dS.T @ q[:, h] * scale
    delta = np.stack([(dout[:, h] * out[:, h]).sum(1) for h in range(hq)])
    return out, lse, delta, dq, dk, dv

def rel(a, b): return np.abs(a - b).max() / np.abs(b).max()



def bf16(x):
    a = np.asarray(x, dtype=np.float32).copy().view(np.uint32)
    a = (a + np.uint32(0x7fff) + ((a >> 16) & np.uint32(1))) & np.uint32(0xffff0000)
    return a.view(np.float32).astype(np.float64)


def f16(x):  # f32 -> f16 round to nearest even (numpy's cast), as __float2half_rn
    return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float64)


def rel_l2(a, b):
    return np.sqrt(((a - b) ** 2).sum() / (b ** 2).sum())


def check_forward(rng, tq, tk, kv_len, hq, hkv, hd, window):
    q, k, v = (rng.standard_normal(s) for s in [(tq, hq, hd), (tk, hkv, hd), (tk, hkv, hd)])
    scale = 1 / math.sqrt(hd)
    o, l = forward(q, k, v, kv_len, scale, window)
    ro, rl, _ = reference(q, k, v, kv_len, scale, window)
    assert rel(o, ro) < 1e-12 and rel(l, rl) < 1e-12, ("forward", tq, tk, kv_len, hq, hkv, hd, window)


def check_attention():
    rng = np.random.default_rng(0)
    # head_dim 96 and 112 fill their compute width exactly (96, 128 less 16); 80 and 120 leave
    # zero columns in it (96, 128), which must add nothing and never be stored.
    for (tq, tk, kv_len, hq, hkv, hd) in [(70, 100, 90, 2, 1, 128), (130, 130, 130, 4, 2, 64), (1, 64, 40, 2, 2, 64),
                                          (64, 64, 64, 1, 1, 128), (70, 100, 90, 2, 1, 120), (65, 65, 65, 2, 2, 96),
                                          (3, 70, 70, 2, 1, 80), (40, 40, 40, 1, 1, 112),
                                          # kv offsets 50, 30 and 33 put the warps' bounds at every
                                          # place relative to the 64-key tiles: skipped, whole, one key
                                          (200, 260, 250, 2, 1, 64), (200, 230, 230, 2, 1, 64), (100, 133, 133, 1, 1, 64)]:
        check_forward(rng, tq, tk, kv_len, hq, hkv, hd, 0)
    # Sliding windows: a narrow band (37 and 1: whole tiles skipped, rows that meet a tile before
    # any key of theirs), a prefill after 50 cached keys (70), one just over two key tiles (129)
    for (tq, tk, kv_len, hq, hkv, hd, w) in [(200, 200, 200, 1, 1, 64, 37), (130, 130, 130, 2, 1, 64, 1),
                                             (200, 260, 250, 1, 1, 64, 70), (300, 300, 300, 1, 1, 96, 129)]:
        check_forward(rng, tq, tk, kv_len, hq, hkv, hd, w)
    for (t, hq, hkv, hd, w) in [(130, 4, 2, 64, 0), (70, 2, 1, 128, 0), (70, 2, 1, 120, 0), (65, 2, 2, 96, 0),
                                (40, 2, 1, 80, 0),
                                # windows: fewer query tiles per key block, dq blocks that start
                                # past key 0, warps skipped inside the band
                                (260, 1, 1, 64, 70), (130, 2, 1, 64, 1), (200, 1, 1, 96, 100)]:
        q, k, v, dout = (rng.standard_normal(s) for s in [(t, hq, hd), (t, hkv, hd), (t, hkv, hd), (t, hq, hd)])
        scale = 1 / math.sqrt(hd)
        out, lse, delta, rdq, rdk, rdv = ref_backward(q, k, v, dout, scale, w)
        dk, dv = dkdv(q, k, v, dout, lse, delta, scale, w)
        dq = dq_kernel(q, k, v, dout, lse, delta, scale, w)
        for name, a, b in [("dq", dq, rdq), ("dk", dk, rdk), ("dv", dv, rdv)]:
            assert rel(a, b) < 1e-12, ("backward", name, t, hq, hkv, hd, w)
    assert all(n > 0 for n in SKIPPED.values()), ("a path of the kernels was not reached", SKIPPED)


def check_16bit_error_against_test_tolerances():
    # test_cuda_ops.cpp: forward max 4 eps; backward max 8 eps and dq l2 2 eps, eps the type's unit
    # roundoff (2^-8 for bf16, 2^-11 for f16: testing::tol). The kernels are the same for both
    # types; only the rounding of the inputs, of P and dS, and of the outputs differs.
    global c_to_a, store_t
    exact, exact_store = c_to_a, store_t
    try:
        for name, rnd, eps in [("bf16", bf16, 1 / 256), ("f16", f16, 1 / 2048)]:
            c_to_a = lambda c0, c1: rnd(exact(c0, c1))  # P and dS enter their GEMMs as the type
            store_t = rnd  # also through shared memory (the dk/dv kernel)
            rng = np.random.default_rng(1)
            # the last with a window of 1, the fewest keys a row averages (test_cuda_ops' windowed cases)
            for (t, hq, hkv, hd, w) in [(130, 4, 2, 64, 0), (70, 2, 1, 128, 0), (70, 2, 1, 120, 0), (70, 2, 1, 64, 1)]:
                q, k, v, dout = (rnd(rng.standard_normal(s)) for s in [(t, hq, hd), (t, hkv, hd), (t, hkv, hd),
                                                                        (t, hq, hd)])
                scale = 1 / math.sqrt(hd)
                o, l = forward(q, k, v, t, scale, w)
                o = rnd(o)
                ro, _, _ = reference(q, k, v, t, scale, w)
                assert rel(o, ro) < 2 * eps, (name, "forward", rel(o, ro) / eps)
                delta = np.stack([(dout[:, h] * o[:, h]).sum(1) for h in range(hq)])
                _, _, _, rdq, rdk, rdv = ref_backward(q, k, v, dout, scale, w)
                dk, dv = dkdv(q, k, v, dout, l, delta, scale, w)
                dq = rnd(dq_kernel(q, k, v, dout, l, delta, scale, w))
                for g, a, b in [("dq", dq, rdq), ("dk", rnd(dk), rdk), ("dv", rnd(dv), rdv)]:
                    assert rel(a, b) < 4 * eps, (name, "backward max", g, rel(a, b) / eps)
                assert rel_l2(dq, rdq) < eps, (name, "dq l2", rel_l2(dq, rdq) / eps)
    finally:
        c_to_a, store_t = exact, exact_store


def cm_read(buf, rows, cols, ld):  # a column-major matrix as cuBLASLt reads it
    return np.array([[buf[i + j * ld] for j in range(cols)] for i in range(rows)])


def layout(rows_rm, cols_rm, ld):  # matmul.cpp's layout(): a row-major matrix read column-major
    return cols_rm, rows_rm, ld


def lt_gemm(m, n, k, a, lda, ta, b, ldb, tb, c, ldc, count=1, sa=0, sb=0, sc=0):
    """CublasLtGemm::run on flat buffers: cuBLASLt's first operand is our b, its second our a, each
    matrix i of a batch `stride` elements after the previous one; writes c column-major."""
    for i in range(count):
        first = layout(n if tb else k, k if tb else n, ldb)
        second = layout(k if ta else m, m if ta else k, lda)
        cl = layout(m, n, ldc)
        op_a = cm_read(b[i * sb:], *first)
        op_b = cm_read(a[i * sa:], *second)
        d = (op_a.T if tb else op_a) @ (op_b.T if ta else op_b)
        for p in range(cl[0]):
            for q in range(cl[1]):
                c[i * sc + p + q * cl[2]] = d[p, q]


def check_gemm_mapping():
    rng = np.random.default_rng(2)
    for m, n, k in [(7, 5, 3), (4, 9, 6)]:
        for ta, tb in itertools.product([False, True], repeat=2):
            a = rng.standard_normal((k, m) if ta else (m, k))
            b = rng.standard_normal((n, k) if tb else (k, n))
            want = (a.T if ta else a) @ (b.T if tb else b)
            out = np.zeros(m * n)
            lt_gemm(m, n, k, a.reshape(-1), a.shape[1], ta, b.reshape(-1), b.shape[1], tb, out, n)
            assert np.allclose(out.reshape(m, n), want), ("gemm", m, n, k, ta, tb)


def check_newton_schulz_batch():
    rng = np.random.default_rng(3)
    ca, cb, cc = 3.4445, -4.7750, 2.0315
    steps = 3

    def definition(x):  # ops.h, in f64
        X = x.T if x.shape[0] > x.shape[1] else x
        X = X / (np.linalg.norm(X) + 1e-7)
        for _ in range(steps):
            A = X @ X.T
            X = ca * X + (cb * A + (cc * A) @ A) @ X
        return X.T if x.shape[0] > x.shape[1] else X

    for rows, cols, count in [(3, 5, 3), (6, 4, 4), (4, 4, 2)]:
        xs = [rng.standard_normal((rows, cols)) * (1 + 9 * i) for i in range(count)]
        tr = rows > cols
        m, n = (cols, rows) if tr else (rows, cols)
        X, BX = np.full(count * m * n, np.nan), np.full(count * m * n, np.nan)
        A, cA, B = (np.full(count * m * m, np.nan) for _ in range(3))
        for z in range(count):  # move_batch, loading: blockIdx.z = z
            if tr:  # transpose_tile(X + z r c, x, r = rows, c = cols): dst[cc r + rr] = src[rr c + cc]
                for rr, c in itertools.product(range(rows), range(cols)):
                    X[z * rows * cols + c * rows + rr] = xs[z][rr, c]
            else:
                X[z * m * n:(z + 1) * m * n] = xs[z].reshape(-1)
        for y in range(count):  # launch_ns_normalise: blockIdx.y = y
            seg = X[y * m * n:(y + 1) * m * n]
            seg /= math.sqrt((seg * seg).sum()) + 1e-7
        for _ in range(steps):  # the backend's loop, with its GemmBatch strides
            lt_gemm(m, m, n, X, n, False, X, n, True, A, m, count, m * n, m * n, m * m)
            cA[:] = cc * A
            lt_gemm(m, m, m, cA, m, False, A, m, False, B, m, count, m * m, m * m, m * m)
            B[:] = cb * A + B
            lt_gemm(m, n, m, B, m, False, X, n, False, BX, n, count, m * m, m * n, m * n)
            X[:] = ca * X + BX
        for z in range(count):  # move_batch, storing: X[z] read as [r, c] = [cols, rows] if tr
            out = np.full(rows * cols, np.nan)
            if tr:
                for rr, c in itertools.product(range(cols), range(rows)):
                    out[c * cols + rr] = X[z * rows * cols + rr * rows + c]
            else:
                out[:] = X[z * m * n:(z + 1) * m * n]
            want = definition(xs[z])
            assert np.allclose(out.reshape(rows, cols), want, rtol=1e-9, atol=1e-12), ("ns batch", rows, cols, z)


def check_polar_express_batch():
    """CudaBackend::polar_express: matrices loaded as they are (a tall one stays [n, m]), the 1.01
    normalisation, and the strided-batch GEMMs of both branches, against nanochat's iteration."""
    rng = np.random.default_rng(4)
    coeffs = [(8.156554524902461, -22.48329292557795, 15.878769915207462),
              (4.042929935166739, -2.808917465908714, 0.5000178451051316),
              (3.8916678022926607, -2.772484153217685, 0.5060648178503393)]

    def definition(x):  # nanochat/optim.py, in f64
        X = x / (np.linalg.norm(x) * 1.01 + 1e-6)
        for a, b, c in coeffs:
            if x.shape[0] > x.shape[1]:
                A = X.T @ X
                X = a * X + X @ (b * A + c * (A @ A))
            else:
                A = X @ X.T
                X = a * X + (b * A + c * (A @ A)) @ X
        return X

    for rows, cols, count in [(3, 5, 3), (6, 4, 4), (4, 4, 2)]:
        xs = [rng.standard_normal((rows, cols)) * (1 + 9 * i) for i in range(count)]
        tall = rows > cols
        m, n = (cols, rows) if tall else (rows, cols)
        X = np.concatenate([x.reshape(-1) for x in xs])  # launch_ns_load, not transposing
        XB = np.full(count * m * n, np.nan)
        A, AA, B = (np.full(count * m * m, np.nan) for _ in range(3))
        for y in range(count):  # launch_ns_normalise with factor 1.01, eps 1e-6
            seg = X[y * m * n:(y + 1) * m * n]
            seg /= math.sqrt((seg * seg).sum()) * 1.01 + 1e-6
        for a, b, c in coeffs:  # the backend's loop, with its GemmBatch strides
            if tall:
                lt_gemm(m, m, n, X, m, True, X, m, False, A, m, count, m * n, m * n, m * m)
            else:
                lt_gemm(m, m, n, X, n, False, X, n, True, A, m, count, m * n, m * n, m * m)
            lt_gemm(m, m, m, A, m, False, A, m, False, AA, m, count, m * m, m * m, m * m)
            B[:] = b * A + c * AA
            if tall:
                lt_gemm(n, m, m, X, m, False, B, m, False, XB, m, count, m * n, m * m, m * n)
            else:
                lt_gemm(m, n, m, B, m, False, X, n, False, XB, n, count, m * m, m * n, m * n)
            X[:] = a * X + XB
        for z in range(count):
            got = X[z * m * n:(z + 1) * m * n].reshape(rows, cols)
            assert np.allclose(got, definition(xs[z]), rtol=1e-9, atol=1e-12), ("polar batch", rows, cols, z)


def check_normuon_indexing():
    """optimizer.cu's NorMuon kernels: the row or column each element's scale comes from, and the
    mean squares of the row (block per row) and column (thread per column) kernels."""
    rng = np.random.default_rng(5)
    for rows, cols in [(5, 3), (4, 4), (3, 7)]:
        g = rng.standard_normal(rows * cols)
        per_row = rows >= cols
        k = rows if per_row else cols
        u = np.zeros(k)
        if per_row:  # normuon_row_squares_kernel: row r reads g[r * cols + c]
            for r in range(rows):
                u[r] = sum(g[r * cols + c] ** 2 for c in range(cols)) / cols
        else:  # normuon_col_squares_kernel: column c reads g[r * cols + c]
            for c in range(cols):
                u[c] = sum(g[r * cols + c] ** 2 for r in range(rows)) / rows
        G = g.reshape(rows, cols)
        want = (G ** 2).mean(axis=1 if per_row else 0)
        assert np.allclose(u, want), ("normuon mean squares", rows, cols)
        scale = rng.standard_normal(k)
        got = np.array([g[i] * scale[i // cols if per_row else i % cols] for i in range(rows * cols)])
        want = G * (scale[:, None] if per_row else scale[None, :])
        assert np.allclose(got.reshape(rows, cols), want), ("normuon scale index", rows, cols)


def check_embedding_chunks():
    chunk = 64
    random.seed(1)
    for trial in range(300):
        vocab, n = random.choice([1, 2, 5, 11, 100]), random.choice([1, 3, 63, 64, 65, 128, 200, 700])
        ids = [random.randrange(vocab) for _ in range(n)]
        if random.random() < 0.3:  # a long run of one id
            lo = random.randrange(n)
            for i in range(lo, random.randrange(lo, n + 1)):
                ids[i] = 0
        if random.random() < 0.2:
            ids[random.randrange(n)] = -3  # out of range: sorts last as u32, skipped
        dout = [random.randint(-5, 5) for _ in range(n)]
        order = sorted(range(n), key=lambda i: (ids[i] & 0xffffffff, i))  # stable radix sort
        keys = [ids[i] & 0xffffffff for i in order]
        chunks = (n + chunk - 1) // chunk
        head, tail, table, adds = [None] * chunks, [None] * chunks, [0] * vocab, [0] * vocab

        def add(row, value):
            if row < vocab:
                table[row] += value
                adds[row] += 1

        for q in range(chunks):  # chunk_runs_kernel
            e0, e1 = q * chunk, min(n, q * chunk + chunk)
            acc, cur, first = 0, keys[e0], True
            for e in range(e0, e1):
                if keys[e] != cur:
                    if first:
                        head[q] = acc
                    else:
                        add(cur, acc)
                    acc, cur, first = 0, keys[e], False
                acc += dout[order[e]]
            if first:
                head[q] = acc
            else:
                tail[q] = acc
        for q in range(chunks):  # finish_runs_kernel
            e0, e1 = q * chunk, min(n, q * chunk + chunk)

            def finish(row, slot):
                acc, r = slot, q + 1
                while r < chunks and keys[r * chunk] == row:
                    acc, r = acc + head[r], r + 1
                add(row, acc)

            if e0 == 0 or keys[e0 - 1] != keys[e0]:
                finish(keys[e0], head[q])
            if keys[e0] != keys[e1 - 1]:
                finish(keys[e1 - 1], tail[q])
        want = [0] * vocab
        for i in range(n):
            if 0 <= ids[i] < vocab:
                want[ids[i]] += dout[i]
        assert table == want, ("embedding", trial)
        assert all(a <= 1 for a in adds), ("a row added twice", trial)


# ---- sample.cu: the top-k set -------------------------------------------------------------------
SAMPLE_THREADS = 256  # kChunks: thread c owns ids c, c + 256, ...


def order_key(z):  # float32 array -> uint32 keys in the same order (no NaN, no -0)
    u = z.astype(np.float32).view(np.uint32)
    return np.where(u & 0x80000000, ~u, u | 0x80000000).astype(np.uint32)


def key_value(k):  # the inverse, for one key
    k = np.uint32(k)
    u = k & np.uint32(0x7FFFFFFF) if k & np.uint32(0x80000000) else ~k
    return np.array([u], dtype=np.uint32).view(np.float32)[0]


def sample_kept(z, top_k):  # the kernel's steps 2 and 3: a bool per id, whether it is kept
    vocab = len(z)
    if top_k <= 0 or top_k >= vocab:
        return np.ones(vocab, bool)
    keys = order_key(z)
    key = 0
    for bit in range(31, -1, -1):  # every thread counts its chunk; the block adds the counts
        cand = key | (1 << bit)
        n = sum(int((keys[c::SAMPLE_THREADS] >= cand).sum()) for c in range(SAMPLE_THREADS))
        if n >= top_k:
            key = cand
    t = key_value(key)
    need = top_k - int((z > t).sum())
    ties = [int((z[c::SAMPLE_THREADS] == t).sum()) for c in range(SAMPLE_THREADS)]
    start = np.concatenate([[0], np.cumsum(ties)[:-1]])  # thread 0's exclusive prefix
    kept = np.zeros(vocab, bool)
    for c in range(SAMPLE_THREADS):
        rank = start[c]
        for j in range(c, vocab, SAMPLE_THREADS):
            tie = z[j] == t
            kept[j] = z[j] > t or (tie and rank < need)
            rank += 1 if tie else 0
    return kept


def check_sample_top_k():
    rng = np.random.default_rng(11)
    x = rng.normal(size=1000).astype(np.float32) * 10
    x = np.concatenate([x, np.float32([0, 1e-30, -1e-30, 3e38, -3e38, np.inf, -np.inf])])
    assert all(key_value(k) == v for k, v in zip(order_key(x), x)), "order_key's inverse"
    srt = np.sort(x)
    assert (np.diff(order_key(srt).astype(np.int64)) >= 0).all(), "order_key keeps the order"
    for trial in range(40):
        vocab = int(rng.choice([5, 255, 256, 300, 700, 2049]))
        levels = int(rng.choice([0, 3, 9]))
        z = (np.floor(rng.random(vocab) * levels) - 1 if levels else rng.normal(size=vocab) * 5).astype(np.float32)
        z = z + np.float32(0)  # as capped(): -0 made +0
        top_k = int(rng.choice([1, 2, 17, vocab - 1, vocab, 0]))
        order = [j for c in range(SAMPLE_THREADS) for j in range(c, vocab, SAMPLE_THREADS)]  # draw order
        ranked = sorted(order, key=lambda j: -z[j])  # stable: ties in draw order
        k = top_k if 0 < top_k < vocab else vocab
        want = np.zeros(vocab, bool)
        want[ranked[:k]] = True
        got = sample_kept(z, top_k)
        assert (got == want).all() and got.sum() == k, ("top-k set", trial, vocab, top_k, levels)


def check_hopper_attention():  # attention_hopper{,_backward}.cu: hopper_emulation.py, beside this file
    from hopper_emulation import check_hopper_backward, check_hopper_forward
    check_hopper_forward()
    check_hopper_backward()


if __name__ == "__main__":
    checks = [check_attention, check_16bit_error_against_test_tolerances, check_hopper_attention, check_gemm_mapping, check_newton_schulz_batch,
              check_polar_express_batch, check_normuon_indexing, check_embedding_chunks, check_sample_top_k]
    for check in checks:
        check()
        print(check.__name__, "ok", flush=True)
    print(f"{len(checks)} passed, 0 failed")
