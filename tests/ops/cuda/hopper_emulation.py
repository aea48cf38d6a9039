"""CPU emulation of attention_hopper.cu (the wgmma + TMA forward), run by kernel_emulation.py.

What is emulated, after the PTX ISA's descriptions, and checked against exact attention in f64:
 - shared memory as bytes: the TMA box copies (cp.async.bulk.tensor, 4-d tensor maps over
   (d, heads, rows, batch), zeros past the visible rows and past head_dim) written through the
   128-byte swizzle (16-byte chunk c of a 128-byte row r lands at chunk c ^ (r % 8));
 - the wgmma matrix descriptors exactly as sw128_desc packs them (the 64 bits decoded back into
   start address, leading and stride byte offsets and swizzle mode), and the operand addressing of
   the 128-byte swizzle mode: K-major Q and K tiles (16 k values at +32 bytes per k-step) and the
   MN-major V tile read transposed (16 keys at +16 rows per k-step);
 - the m64nNk16 accumulator fragment (thread 32 w + lane of a warpgroup holds rows 16 w + g and
   16 w + g + 8, columns 8 j + 2 t + {0, 1}) and the A fragment from registers (P);
 - the mbarrier ring of 2 stages: phases and parities as the kernel waits on them, the producer
   running ahead as far as the barriers let it, so a wrong parity shows as a wait that would block
   forever or pass early (a tile read before it landed or overwritten before it was read).
Shared memory starts as NaN, so a read of bytes no copy wrote shows in the result.
"""
import math

import numpy as np

import kernel_emulation as ke

M, N, WG_ROWS, STAGES, ROW_BYTES = 128, 64, 64, 2, 128


def swizzle(addr):  # CU_TENSOR_MAP_SWIZZLE_128B and wgmma's 128-byte mode: address bits 4-6 ^= bits 7-9
    return addr ^ (((addr >> 7) & 7) << 4)


class Layout:  # attention_hopper.cu's Layout<HD>, byte offsets
    def __init__(self, hd):
        self.q_block, self.kv_block = M * ROW_BYTES, N * ROW_BYTES
        self.tile = N * hd * 2; self.kv = M * hd * 2
        self.bytes = self.kv + STAGES * 2 * self.tile
        assert all(x % 1024 == 0 for x in (self.q_block, self.kv_block, self.tile, self.kv))  # Note [swizzled tiles]

    def k(self, s): return self.kv + s * 2 * self.tile
    def v(self, s): return self.k(s) + self.tile


def tma_load(smem, dst, src, c0, head, row0, rows, box_rows):
    """One box: src [rows_alloc, heads, d] of one batch, rows < `rows` visible; 64 columns from c0."""
    d = src.shape[2]
    for r in range(box_rows):
        for c in range(64):
            inside = row0 + r < rows and c0 + c < d
            smem[swizzle(dst + r * ROW_BYTES + c * 2) // 2] = src[row0 + r, head, c0 + c] if inside else 0.0


def sw128_desc(addr):  # attention_hopper.cu's sw128_desc, bit for bit
    return ((addr & 0x3FFFF) >> 4) | (1024 >> 4) << 16 | (1024 >> 4) << 32 | 1 << 62


def decode(desc):  # the PTX ISA's matrix-descriptor fields
    start = (desc & 0x3FFF) << 4; lbo = ((desc >> 16) & 0x3FFF) << 4; sbo = ((desc >> 32) & 0x3FFF) << 4
    assert (desc >> 49) & 7 == 0 and desc >> 62 == 1, "base offset 0 and 128-byte swizzle"
    return start, lbo, sbo


def operand(smem, desc, rows, k_major):
    """A [rows x 16] (k_major: element (r, k) at row r, byte 2 k) or, MN-major, B^T: element (k, n)
    at row k, byte 2 n (n < 64), returned as [rows or 64, 16]."""
    start, _, sbo = decode(desc)
    if k_major:
        addr = lambda r, k: start + (r // 8) * sbo + (r % 8) * ROW_BYTES + 2 * k
        return np.array([[smem[swizzle(addr(r, k)) // 2] for k in range(16)] for r in range(rows)])
    addr = lambda k, n: start + (k // 8) * sbo + (k % 8) * ROW_BYTES + 2 * n
    return np.array([[smem[swizzle(addr(k, n)) // 2] for k in range(16)] for n in range(64)])


lane = np.arange(32); g = lane // 4; t = lane % 4


def to_fragment(D):  # [64, 64] -> the warpgroup's accumulators [4 warps][8][32][4]
    f = np.zeros((4, 8, 32, 4))
    for w in range(4):
        for j in range(8):
            for e in range(4):
                f[w, j, :, e] = D[16 * w + g + 8 * (e // 2), 8 * j + 2 * t + e % 2]
    return f


def from_a_registers(a):  # per warp a [4 regs, 32, 2] (the m16n8k16 A layout) -> A [64, 16]
    A = np.full((64, 16), np.nan)
    for w in range(4):
        for i in range(4):
            r = 16 * w + g + 8 * (i % 2); c = 2 * t + 8 * (i // 2)
            A[r, c] = a[w][i][:, 0]; A[r, c + 1] = a[w][i][:, 1]
    return A


class Barrier:  # an mbarrier: arrivals per phase, completed phases; try_wait.parity semantics
    def __init__(self, count): self.count, self.arrived, self.phases = count, 0, 0
    def arrive(self, n=1):
        self.arrived += n
        if self.arrived == self.count: self.arrived, self.phases = 0, self.phases + 1
    def ready(self, parity): return (self.phases & 1) != parity  # the phase of that parity is complete


def forward(q, k, v, kv_len, scale, window=0):
    """q [B, tq, hq, d], k, v [B, tk, hkv, d] -> out, lse as attention_hopper.cu computes them."""
    B, tq, hq, d = q.shape; _, tk, hkv, _ = k.shape
    HD = 64 if d <= 64 else 128; L = Layout(HD); W = ke.kernel_window(window); q_pos0 = kv_len - tq
    out = np.full(q.shape, np.nan); lse = np.full((B, hq, tq), np.nan)
    m_tiles = (tq + M - 1) // M
    for b in range(B):
        for h in range(hq):
            for bx in range(m_tiles):
                block(q[b], k[b], v[b], out[b], lse[b], L, HD, (m_tiles - 1 - bx) * M, h, h // (hq // hkv),
                      kv_len, q_pos0, W, scale)
    return out, lse


def block(q, k, v, out, lse, L, HD, m0, h, kh, kv_len, q_pos0, W, scale):
    tq = q.shape[0]
    smem = np.full(L.bytes // 2, np.nan)
    keys = min(q_pos0 + min(m0 + M, tq), kv_len); n_tiles = (keys + N - 1) // N
    nt0 = max(0, q_pos0 + m0 - W) // N
    full = [Barrier(1) for _ in range(STAGES)]; empty = [Barrier(256) for _ in range(STAGES)]
    for cb in range(HD // 64):  # the Q box, then q_full completes
        tma_load(smem, cb * L.q_block, q, cb * 64, h, m0, tq, M)
    consumers = [Consumer(wg, m0, q_pos0, kv_len, tq, W, HD) for wg in range(2)]
    loaded = {}  # stage -> the tile index it holds
    produced = 0
    for i in range(n_tiles - nt0):
        # The producer runs ahead while its empty-wait passes (parity ((i / 2) & 1) ^ 1).
        while produced < n_tiles - nt0 and empty[produced % STAGES].ready(((produced // STAGES) & 1) ^ 1):
            s = produced % STAGES; n0 = (nt0 + produced) * N
            for cb in range(HD // 64):
                tma_load(smem, L.k(s) + cb * L.kv_block, k, cb * 64, kh, n0, kv_len, N)
                tma_load(smem, L.v(s) + cb * L.kv_block, v, cb * 64, kh, n0, kv_len, N)
            loaded[s] = produced; full[s].arrive(); produced += 1
        s = i % STAGES
        assert full[s].ready((i // STAGES) & 1) and loaded.get(s) == i, "consumer would wait forever or read another tile"
        for c in consumers: c.tile(smem, L, s, (nt0 + i) * N, scale)
        empty[s].arrive(256)
    assert produced == n_tiles - nt0
    for c in consumers: c.store(out, lse, h)


class Consumer:  # one consumer warpgroup (attention_hopper.cu's consume)
    def __init__(self, wg, m0, q_pos0, kv_len, tq, W, HD):
        self.wg, self.q_pos0, self.kv_len, self.tq, self.W, self.HD = wg, q_pos0, kv_len, tq, W, HD
        self.w0 = w0 = m0 + wg * WG_ROWS
        self.wg_last = min(q_pos0 + min(w0 + WG_ROWS, tq) - 1, kv_len - 1) if w0 < tq else -1
        self.wg_all = q_pos0 + w0; self.wg_first = self.wg_all - W; self.all_first = self.wg_all + WG_ROWS - 1 - W
        self.o = np.zeros((4, HD // 8, 32, 4))
        self.row_max = [[np.full(32, -np.inf)] * 2 for _ in range(4)]; self.row_sum = [[np.zeros(32)] * 2 for _ in range(4)]

    def tile(self, smem, L, s, n0, scale):
        active = n0 <= self.wg_last and n0 + N - 1 >= self.wg_first
        whole = n0 + N - 1 <= self.wg_all and n0 >= self.all_first
        ke.SKIPPED["hopper " + ("whole" if active and whole else "masked" if active else "skipped")] += 1
        if not active: return
        q_base = self.wg * WG_ROWS * ROW_BYTES
        S = np.zeros((64, 64))
        for kk in range(self.HD // 16):  # scores(): wgmma_ss per k-step
            at = (kk % 4) * 32
            A = operand(smem, sw128_desc(q_base + (kk // 4) * L.q_block + at), 64, True)
            Bt = operand(smem, sw128_desc(L.k(s) + (kk // 4) * L.kv_block + at), 64, True)
            S += A @ Bt.T
        sc = to_fragment(S)
        for w in range(4):
            pos = self.q_pos0 + self.w0 + 16 * w + g
            first = [ke.tile_col(pos + 8 * rr - self.W, n0, N) for rr in range(2)]
            last = None if whole else [ke.tile_col(np.minimum(pos + 8 * rr, self.kv_len - 1), n0, N) for rr in range(2)]
            ke.online_softmax(sc[w], self.o[w], self.row_max[w], self.row_sum[w], first, last, scale)
        for kk in range(4):  # accumulate_pv(): wgmma_rs per k-step and 64-column block
            A = from_a_registers([ke.c_to_a(sc[w, 2 * kk], sc[w, 2 * kk + 1]) for w in range(4)])
            for cb in range(self.HD // 64):
                Bt = operand(smem, sw128_desc(L.v(s) + cb * L.kv_block + kk * 16 * ROW_BYTES), 64, False)
                self.o[:, cb * 8:cb * 8 + 8] += to_fragment(A @ Bt.T)

    def store(self, out, lse, h):
        d = out.shape[2]
        for w in range(4):
            for rr in range(2):
                ssum = ke.quad_sum(self.row_sum[w][rr]); row = self.w0 + 16 * w + g + 8 * rr
                for L_ in range(32):
                    if row[L_] >= self.tq: continue
                    for dt in range(d // 8):  # store_rows: the d stored columns
                        for e in range(2):
                            out[row[L_], h, dt * 8 + 2 * t[L_] + e] = self.o[w, dt, L_, 2 * rr + e] / ssum[L_]
                    if t[L_] == 0:
                        lse[h, row[L_]] = (self.row_max[w][rr][L_] + math.log2(ssum[L_])) * math.log(2)


def check_hopper_forward():
    for key in ("hopper whole", "hopper masked", "hopper skipped"): ke.SKIPPED[key] = 0
    rng = np.random.default_rng(1)
    # (B, tq, tk, kv_len, hq, hkv, d, window): causal at both widths (96 at 128 with zero columns),
    # grouped heads, two query blocks, decoding with a longer cache, and windows that skip tiles
    # and leave rows without a key in a tile.
    cases = [(2, 130, 130, 130, 2, 1, 64, 0), (1, 70, 100, 90, 2, 1, 128, 0), (1, 65, 65, 65, 1, 1, 96, 0),
             (1, 3, 140, 133, 2, 2, 64, 0), (1, 200, 200, 200, 1, 1, 64, 37), (1, 150, 150, 150, 1, 1, 64, 1)]
    for (B, tq, tk, kv_len, hq, hkv, d, w) in cases:
        q, k, v = (rng.standard_normal(s) for s in [(B, tq, hq, d), (B, tk, hkv, d), (B, tk, hkv, d)])
        k[:, kv_len:] = np.nan; v[:, kv_len:] = np.nan  # past kv_len: never read
        scale = 1 / math.sqrt(d)
        out, lse = forward(q, k, v, kv_len, scale, w)
        for b in range(B):
            ro, rl, _ = ke.reference(q[b], k[b], v[b], kv_len, scale, w)
            assert ke.rel(out[b], ro) < 1e-12 and ke.rel(lse[b], rl) < 1e-12, ("hopper forward", B, tq, kv_len, d, w)
    assert all(ke.SKIPPED[key] > 0 for key in ("hopper whole", "hopper masked", "hopper skipped")), ke.SKIPPED
